"""The efficiency table: steps to a target of each method relative to dense training, as measured.

One row per (source experiment, workload, workers, method, target): how many seeds ran and reached the
target, the mean steps to it over the seeds that did, and the ratio to dense training's mean in the same
experiment, workload and workers (``steps_ratio``; empty where the method never reached it). It is a tidy
CSV whose first lines are ``# key: value`` provenance comments (``pandas.read_csv(path, comment="#")``),
written by the workflow from ``runs/`` (:func:`build`) to ``paper/generated/stats/efficiency.csv``; the
advisor reads that file where it exists, else the copy shipped with lowbw (``efficiency.csv`` beside this
module: the same build, committed so that a fresh clone advises before any run). A user rebuilds it from
their own runs with ``python -m lowbw advise --build-efficiency RUNS OUT``.

Beside ``runs/`` the table reads the runs kept in the repository (``STORES``: the lm_evidence profile's language
model trained near convergence, every method at its own tuned values, ``paper/measured/lm``), so that a fresh
clone's step multipliers for a language model come from the converged regime, not from the first minutes of
learning; an experiment present under ``runs/`` replaces its stored copy. Two kinds of experiment are not a
comparison of methods and are left out (``NOT_COMPARISONS``): a hyper-parameter sweep (one seed a point, each
method also at values it was not picked at) and a single long reference run (a curve). A method run at its
swept values (the preset ``<method>-tuned`` that ``lowbw.report.lmc_sweep pick`` writes) is that method.

:func:`lookup` answers for the user's setting from the nearest measurement: the same model and workers
("measured"), else the same model at the nearest number of workers, else a workload of the same kind, else
any ("extrapolated", saying from what); nothing for that method: "bytes only" (steps assumed as dense's).
Reading uses the csv module, not pandas: advice must start fast.
"""

from __future__ import annotations

import csv
import io
import math
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lowbw.data.text import TEXT_SPECS
from lowbw.runs.io import atomic_write_text, provenance

__all__ = ["COLUMNS", "Efficiency", "build", "rows_from_runs", "target_of", "ttt_targets", "write", "read", "lookup",
           "default_path", "SHIPPED", "GENERATED", "STORES", "NOT_COMPARISONS", "TUNED"]

SHIPPED = Path(__file__).with_name("efficiency.csv")
GENERATED = Path("paper/generated/stats/efficiency.csv")
# runs kept in the repository that the table reads beside the runs root (a run of the same experiment there
# replaces them): the lm_evidence profile's converged-regime grid
STORES = (Path("paper/measured/lm"),)
# experiment-name endings of runs that compare no methods: a hyper-parameter sweep and a single reference curve
NOT_COMPARISONS = ("_sweep", "_curve")
TUNED = "-tuned"  # preset-name ending of a method at its own swept values: the same method
BASELINES = ("dense", "sync")  # the method each experiment's ratios are taken against (the first it has)
COLUMNS = ["experiment", "dataset", "model", "kind", "metric", "direction", "target", "workers", "method",
           "seeds", "seeds_reached", "steps_mean", "dense_steps_mean", "steps_ratio", "steps_max"]


@dataclass(frozen=True)
class Efficiency:
    """The answer of :func:`lookup` for one method."""

    ratio: float  # predicted steps to the target / dense's (inf: did not reach it where measured)
    confidence: str  # "measured" | "extrapolated" | "bytes only"
    basis: str  # the measurement it rests on, in words
    dense_steps: float  # dense's measured steps to the target there (nan: none)
    # runs of the user's own model and workers as long as this where some seed missed the target (nan: none):
    # a training budget of at most this many steps is not enough for every seed
    failed_within: float = math.nan


def _kind(dataset: str) -> str:
    """``lm`` for a text corpus (its models are language models, its target a loss), else ``image``."""
    return "lm" if dataset in TEXT_SPECS else "image"


def target_of(name: str) -> tuple[str, str, float]:
    """(metric, direction "up"|"down", value) of a ``time_to_target`` key: a bare number is a test accuracy
    (``"0.9"``), else :func:`lowbw.train.targets.parse_target`'s form (``"val_loss<=2"``)."""
    try:
        return "test_acc", "up", float(name)
    except ValueError:
        pass
    from lowbw.train.targets import parse_target  # lazy: only building the table needs it

    t = parse_target(name)
    return t.metric, "up" if t.op == ">=" else "down", t.value


def ttt_targets(runs) -> list[str]:
    """The target names of the runs' flattened ``ttt.<name>.step`` columns (:mod:`lowbw.runs.results`)."""
    return [c[len("ttt."):-len(".step")] for c in runs.columns if c.startswith("ttt.") and c.endswith(".step")]


def _recorded(g, names: list[str]) -> list[str]:
    """The target names the runs ``g`` were configured with (their ``targets`` key: a missing time to target
    means "not reached" only for those); every name where the runs do not say."""
    if "targets" not in g:
        return names
    import json

    from lowbw.train.targets import parse_targets  # lazy: only building the table needs it

    mine: set[str] = set()
    for v in g["targets"].dropna():
        v = json.loads(v) if isinstance(v, str) else v
        mine |= {t.name for t in parse_targets(v if isinstance(v, list) else [v])}
    return [n for n in names if n in mine] if mine else names


def rows_from_runs(runs) -> list[dict[str, Any]]:
    """The table's rows (``COLUMNS``) from a DataFrame of complete runs (:func:`lowbw.runs.results.load_runs`'s
    columns plus ``experiment``): per (experiment, dataset, model, workers) the baseline is the first of
    ``BASELINES`` it ran, and every method's mean steps to each target is divided by the baseline's."""
    rows: list[dict[str, Any]] = []
    if runs is None or runs.empty or "method" not in runs:
        return rows
    runs = runs[runs["method"].notna()].copy()
    runs["method"] = runs["method"].astype(str).str.removesuffix(TUNED)
    names = ttt_targets(runs)
    for (exp, ds, model, n), g in runs.groupby(["experiment", "dataset", "model", "workers"], sort=True):
        base = next((b for b in BASELINES if (g["method"] == b).any()), None)
        if base is None:
            continue
        for name in _recorded(g, names):
            col = f"ttt.{name}.step"
            metric, direction, target = target_of(name)
            dense = g.loc[g["method"] == base, col].dropna()
            dense_mean = float(dense.mean()) if len(dense) else math.nan
            for method, gm in g.groupby("method", sort=True):
                steps = gm[col].dropna()
                mean = float(steps.mean()) if len(steps) else math.nan
                ratio = mean / dense_mean if len(steps) and dense_mean > 0 else math.nan
                rows.append({"experiment": exp, "dataset": ds, "model": model, "kind": _kind(ds),
                             "metric": metric, "direction": direction, "target": target, "workers": int(n),
                             "method": "dense" if method == base else method, "seeds": int(len(gm)),
                             "seeds_reached": int(len(steps)), "steps_mean": mean,
                             "dense_steps_mean": dense_mean, "steps_ratio": ratio,
                             "steps_max": float(gm["step"].max()) if "step" in gm else math.nan})
    return rows


def build(runs_root: str | Path, stores: tuple[Path, ...] = STORES) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """(rows, provenance) of the table from every complete run under ``runs_root`` and, for the experiments
    not there, under each of ``stores`` that exists (paths relative to the working directory, the repository's
    root in the workflow)."""
    import pandas as pd  # lazy: pandas costs a quarter second and only the workflow builds the table

    from lowbw.runs.results import load_runs  # lazy: pandas, which only the workflow's build of the table needs

    root = Path(runs_root)
    runs = load_runs(root, incomplete="skip") if root.is_dir() else pd.DataFrame()
    used = [str(root)]
    for store in map(Path, stores):
        kept = load_runs(store, incomplete="skip") if store.is_dir() else pd.DataFrame()
        if kept.empty or "experiment" not in kept:
            continue
        if not runs.empty and "experiment" in runs:
            kept = kept[~kept["experiment"].isin(set(runs["experiment"]))]
        if not kept.empty:
            runs, used = pd.concat([runs, kept], ignore_index=True), used + [str(store)]
    if not runs.empty and "experiment" in runs:
        runs = runs[~runs["experiment"].astype(str).str.endswith(NOT_COMPARISONS)]
    prov = provenance()
    if runs.empty or "method" not in runs:
        return [], {"source": ", ".join(used), "runs": 0, "commit": prov.get("git_commit")}
    return rows_from_runs(runs), {
        "source": ", ".join(used), "runs": int(len(runs)), "commit": prov.get("git_commit"), "host": prov.get("host"),
        "what": "steps to the target per method / dense's, same experiment, workload and workers; mean over the "
                "seeds that reached it"}


def write(rows: list[dict[str, Any]], prov: dict[str, Any], out: str | Path) -> Path:
    """The table as CSV with ``# key: value`` provenance lines."""
    buf = io.StringIO()
    buf.write("".join(f"# {k}: {v}\n" for k, v in prov.items()))
    w = csv.DictWriter(buf, COLUMNS, lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({k: ("" if isinstance(v, float) and math.isnan(v) else v)
                    for k in COLUMNS for v in [r.get(k, math.nan)]})
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    return atomic_write_text(out, buf.getvalue())


def default_path() -> Path:
    """The workflow's table if it was built here, else the shipped one."""
    return GENERATED if GENERATED.is_file() else SHIPPED


def read(path: str | Path | None = None) -> list[dict[str, Any]]:
    """The rows of a table file (numbers as floats, ``nan`` where empty)."""
    p = Path(path) if path is not None else default_path()
    if not p.is_file():
        raise ValueError(f"efficiency table {p} does not exist")
    lines = [ln for ln in p.read_text().splitlines() if not ln.startswith("#")]
    out = []
    for r in csv.DictReader(lines):
        missing = [c for c in COLUMNS if c not in r and c != "steps_max"]
        if missing:
            raise ValueError(f"efficiency table {p}: missing column(s) {', '.join(missing)}")
        r.setdefault("steps_max", "")  # tables written before the horizon was recorded: unknown
        for k in ("target", "steps_mean", "dense_steps_mean", "steps_ratio", "steps_max"):
            r[k] = float(r[k]) if r[k] != "" else math.nan
        for k in ("workers", "seeds", "seeds_reached"):
            r[k] = int(r[k])
        out.append(r)
    return out


def _distance(r: dict[str, Any], model: str, kind: str, workers: int, metric: str, target: float | None
              ) -> tuple[int, float, float]:
    """How far a measured row is from the user's setting: (workload tier, |log2 workers ratio|, target gap)."""
    tier = 0 if r["model"] == model else 1 if r["kind"] == kind else 2
    tgap = abs(r["target"] - target) if (target is not None and r["metric"] == metric) else 0.0
    return tier + (0 if r["metric"] == metric else 3), abs(math.log2(r["workers"] / workers)), tgap


def complete(r: dict[str, Any]) -> bool:
    """Whether a row measures its ratio: every seed reached the target (a table without ``steps_max``, which
    cannot tell a short run from a failed one: any seed)."""
    if not math.isfinite(r["steps_ratio"]) or r["seeds_reached"] == 0:
        return False
    return r["seeds_reached"] == r["seeds"] or not math.isfinite(r.get("steps_max", math.nan))


def lower_bound(r: dict[str, Any]) -> float:
    """The least steps ratio an incomplete row allows: its seeds that missed the target would have needed more
    than the run's ``steps_max`` steps, so the mean over all seeds is at least
    (sum of the reached seeds' steps + missed seeds x steps_max) / seeds, over dense's mean. 0 where the horizon
    is not recorded (no bound)."""
    if not (math.isfinite(r.get("steps_max", math.nan)) and r["dense_steps_mean"] > 0):
        return 0.0
    reached = r["seeds_reached"] * r["steps_mean"] if r["seeds_reached"] else 0.0
    return (reached + (r["seeds"] - r["seeds_reached"]) * r["steps_max"]) / r["seeds"] / r["dense_steps_mean"]


def _where(r: dict[str, Any]) -> str:
    return f"{r['model']}/{r['dataset']}, {r['workers']} workers, target {r['target']:g} ({r['experiment']})"


def lookup(rows: list[dict[str, Any]], method: str, model: str, kind: str, workers: int, metric: str = "test_acc",
           target: float | None = None) -> Efficiency:
    """The steps ratio of ``method`` for the user's setting from the nearest measured rows (module docstring).

    A row where every seed reached the target measures the ratio; a row where some seed did not is censored by
    its horizon: it only bounds the ratio from below (:func:`lower_bound`; a short run says nothing about a
    longer one). Rows of the nearest setting that measure it are combined by their median ratio, raised to the
    bound of the censored rows as near (a converged run that arrived does not undo a short one that did not); where the
    nearest rows are all censored, the nearest rows that measure it (another target, model or number of
    workers) give the ratio, raised to the nearest rows' bound; where no row measures it, the bound itself (some
    seed reached some target); ``inf`` where no seed of the method reached any target."""
    mine = [r for r in rows if r["method"] == method and r["seeds"] > 0]
    if not mine:
        return Efficiency(1.0, "bytes only", "no measured run of this method: steps assumed as dense's", math.nan)

    def dist(r):
        return _distance(r, model, kind, workers, metric, target)

    best = min(dist(r) for r in mine)
    near = [r for r in mine if dist(r) == best]
    r0 = near[0]
    same = r0["model"] == model and r0["workers"] == workers
    finite = [r["dense_steps_mean"] for r in near if math.isfinite(r["dense_steps_mean"])]
    dense = statistics.median(finite) if finite else math.nan  # dense missed the target in short runs: unknown
    measured = [r for r in near if complete(r)]
    horizon = max((r["steps_max"] for r in near if math.isfinite(r.get("steps_max", math.nan))), default=math.nan)
    bound = max(lower_bound(r) for r in near)
    if measured:
        ratio = statistics.median(r["steps_ratio"] for r in measured)
        if bound > ratio:  # as near a setting where some seed missed within its horizon: at least its bound
            censored = next(r for r in near if lower_bound(r) == bound)
            return Efficiency(bound, "measured" if same else "extrapolated",
                              f"at least {bound:.2f}x dense's steps: not every seed reached the target within "
                              f"{censored['steps_max']:g} steps in {_where(censored)} ({ratio:.2f}x in "
                              f"{_where(measured[0])})", dense)
        return Efficiency(ratio, "measured" if same else "extrapolated", f"{ratio:.2f}x dense's steps in {_where(r0)}",
                          dense)
    failed = horizon if same else math.nan  # the user's own setting: some seed missed within this many steps
    within = f"not every seed reached the target within {horizon:g} steps in {_where(r0)}" \
        if math.isfinite(horizon) else f"did not reach the target in {_where(r0)}"
    farther = [r for r in mine if complete(r)]
    if not farther:  # no row measures it: the bound is all there is, and without a horizon not even that
        if bound > 0 and any(r["seeds_reached"] for r in mine):
            return Efficiency(bound, "extrapolated", f"at least {bound:.2f}x dense's steps: {within}", dense, failed)
        return Efficiency(math.inf, "measured" if same else "extrapolated", within, dense, failed)
    nxt = min(dist(r) for r in farther)
    ratio = statistics.median(r["steps_ratio"] for r in farther if dist(r) == nxt)
    src = next(r for r in farther if dist(r) == nxt)
    ratio = max(ratio, bound)
    at_least = f" (at least {bound:.2f}x)" if bound > 0 else ""
    return Efficiency(ratio, "extrapolated", f"{ratio:.2f}x dense's steps: {within}{at_least}, "
                      f"{src['steps_ratio']:.2f}x in {_where(src)}", dense, failed)
