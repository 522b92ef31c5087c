"""The efficiency table: steps to a target of each method relative to dense training, as measured.

One row per (source experiment, workload, workers, method, target): how many seeds ran and reached the
target, the mean steps to it over the seeds that did, and the ratio to dense training's mean in the same
experiment, workload and workers (``steps_ratio``; empty where the method never reached it). It is a tidy
CSV whose first lines are ``# key: value`` provenance comments (``pandas.read_csv(path, comment="#")``),
written by the workflow from ``runs/`` (:func:`build`) to ``paper/generated/stats/efficiency.csv``; the
advisor reads that file where it exists, else the copy shipped with lowbw (``efficiency.csv`` beside this
module: the same build, committed so that a fresh clone advises before any run). A user rebuilds it from
their own runs with ``python -m lowbw advise --build-efficiency RUNS OUT``.

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

__all__ = ["COLUMNS", "Efficiency", "build", "rows_from_runs", "target_of", "ttt_targets", "write", "read", "lookup",
           "default_path", "SHIPPED", "GENERATED"]

SHIPPED = Path(__file__).with_name("efficiency.csv")
GENERATED = Path("paper/generated/stats/efficiency.csv")
BASELINES = ("dense", "sync")  # the method each experiment's ratios are taken against (the first it has)
COLUMNS = ["experiment", "dataset", "model", "kind", "metric", "direction", "target", "workers", "method",
           "seeds", "seeds_reached", "steps_mean", "dense_steps_mean", "steps_ratio"]
LM_DATASETS = ("shakespeare",)  # text datasets: their models are language models, their target a loss


@dataclass(frozen=True)
class Efficiency:
    """The answer of :func:`lookup` for one method."""

    ratio: float  # predicted steps to the target / dense's (inf: did not reach it where measured)
    confidence: str  # "measured" | "extrapolated" | "bytes only"
    basis: str  # the measurement it rests on, in words
    dense_steps: float  # dense's measured steps to the target there (nan: none)


def _kind(dataset: str) -> str:
    return "lm" if dataset in LM_DATASETS else "image"


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
    """The target names of the runs' flattened ``ttt.<name>.step`` columns (:mod:`lowbw.results`)."""
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
    """The table's rows (``COLUMNS``) from a DataFrame of complete runs (:func:`lowbw.results.load_runs`'s
    columns plus ``experiment``): per (experiment, dataset, model, workers) the baseline is the first of
    ``BASELINES`` it ran, and every method's mean steps to each target is divided by the baseline's."""
    rows: list[dict[str, Any]] = []
    if runs is None or runs.empty or "method" not in runs:
        return rows
    runs = runs[runs["method"].notna()]
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
                             "dense_steps_mean": dense_mean, "steps_ratio": ratio})
    return rows


def build(runs_root: str | Path) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """(rows, provenance) of the table from every complete run under ``runs_root``."""
    import pandas as pd  # lazy: pandas costs a quarter second and only the workflow builds the table

    from lowbw.results import load_runs
    from lowbw.runio import provenance

    root = Path(runs_root)
    runs = load_runs(root, incomplete="skip") if root.is_dir() else pd.DataFrame()
    prov = provenance()
    if runs.empty or "method" not in runs:
        return [], {"source": str(root), "runs": 0, "commit": prov.get("git_commit")}
    return rows_from_runs(runs), {
        "source": str(root), "runs": int(len(runs)), "commit": prov.get("git_commit"), "host": prov.get("host"),
        "what": "steps to the target per method / dense's, same experiment, workload and workers; mean over the "
                "seeds that reached it"}


def write(rows: list[dict[str, Any]], prov: dict[str, Any], out: str | Path) -> Path:
    """The table as CSV with ``# key: value`` provenance lines."""
    from lowbw.runio import atomic_write_text

    buf = io.StringIO()
    buf.write("".join(f"# {k}: {v}\n" for k, v in prov.items()))
    w = csv.DictWriter(buf, COLUMNS, lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({k: ("" if isinstance(r[k], float) and math.isnan(r[k]) else r[k]) for k in COLUMNS})
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
        missing = [c for c in COLUMNS if c not in r]
        if missing:
            raise ValueError(f"efficiency table {p}: missing column(s) {', '.join(missing)}")
        for k in ("target", "steps_mean", "dense_steps_mean", "steps_ratio"):
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


def lookup(rows: list[dict[str, Any]], method: str, model: str, kind: str, workers: int, metric: str = "test_acc",
           target: float | None = None) -> Efficiency:
    """The steps ratio of ``method`` for the user's setting from the nearest measured rows (module docstring).
    Rows of the nearest setting are combined by their median ratio; a method that reached the target in none
    of them gets ``inf``."""
    mine = [r for r in rows if r["method"] == method and r["seeds"] > 0]
    if not mine:
        return Efficiency(1.0, "bytes only", "no measured run of this method: steps assumed as dense's", math.nan)
    best = min(_distance(r, model, kind, workers, metric, target) for r in mine)
    near = [r for r in mine if _distance(r, model, kind, workers, metric, target) == best]
    reached = [r for r in near if r["seeds_reached"] > 0 and math.isfinite(r["steps_ratio"])]
    r0 = near[0]
    where = f"{r0['model']}/{r0['dataset']}, {r0['workers']} workers, target {r0['target']:g} ({r0['experiment']})"
    same = r0["model"] == model and r0["workers"] == workers
    conf = "measured" if same else "extrapolated"
    dense = statistics.median([r["dense_steps_mean"] for r in near]) if near else math.nan
    if not reached:
        return Efficiency(math.inf, conf, f"did not reach the target in {where}", dense)
    ratio = statistics.median(r["steps_ratio"] for r in reached)
    return Efficiency(ratio, conf, f"{ratio:.2f}x dense's steps in {where}", dense)
