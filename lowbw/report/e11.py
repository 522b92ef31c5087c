"""E11 -- how good is ``lowbw advise``? Leave-one-setting-out over the suite's own measured runs.

A *setting* is (experiment, workload = dataset and model, workers, network). The networks: E4's runs
(``e4_*``) re-timed at the report's bandwidths, E9's (``e9_*``) at E9's three links (both
:func:`lowbw.report.training.retime`: the runs' links are equal, so one run answers for every link), E10's
(``e10_*``, one experiment per network) and the GPU store's runs (``paper/measured/gpu``) on their own virtual
clock. For each setting the advisor is built without it -- its efficiency table
(:func:`lowbw.advise.efficiency.rows_from_runs`) from every run *except the runs measured in that setting*
(for a re-timed experiment those runs are also its other networks' runs, so all of them go) -- and ranks the
methods measured there (:func:`lowbw.advise.rank.rank`, each method as its runs' config sets it,
:func:`lowbw.advise.candidates.candidate_from_config`; a scheme whose step the advisor does not model, such as
ssp or async, is left out and counted, and so is a method measured nowhere but in the held-out setting: nothing
would be left to predict its steps from). Its inputs are what a user gives: the model, the workers, the links
(a bandwidth trace as its time-weighted mean rate) and the compute per step (the setting's runs' median
virtual compute per step, as ``--step-ms``). A stricter variant holds out every run of the same dataset,
model and workers (all experiments, all networks).

The target of a setting is the hardest of its runs' targets that the baseline (dense) reached with every seed;
a setting without such a target, without dense runs or with fewer than two ranked methods is skipped (counted).
Measured time to the target of a method = mean over seeds of its virtual time to it at the setting's network;
a method reached the target when every seed did. Then

* regret = measured time of the advisor's pick / the best measured time among the ranked methods - 1
  (infinite when the pick did not reach the target there);
* rank correlation = Spearman's rho between the advisor's order and the measured times of the ranked methods
  that reached the target, only where at least :data:`~lowbw.report.stats.MIN_CORRELATION_METHODS` such methods
  enter it (with three, rho = 1 has probability 1/6 by chance): a setting with fewer has no rho, and the paper
  states the reason where a rho would stand;
* targets (issue 34): median regret <= 10 %, worst <= 50 %, and no pick that missed the target.

The step-time comparison: for every dense and DiLoCo/local-SGD run (every H steps, fp32), its measured virtual
seconds per step at the setting's network against the advisor's prediction and against the analytic form
(ours, a ring all-reduce on the slowest link, no overlap):
``T = C + (2 (M-1)/M * 4P * 8 / r + 2 (M-1) alpha) / H`` with compute C per step, M workers, P parameters,
r bits/s, alpha one-way latency, H = 1 for data-parallel training. Beside it, on a grid without runs, the
advisor's step model against the wall-clock model of the DiLoCo scaling-law paper (:mod:`lowbw.report.walltime`).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pandas as pd

import lowbw.workflow.store as gpu_store
from lowbw.advise import efficiency
from lowbw.advise.candidates import candidate_from_config
from lowbw.advise.efficiency import target_of, ttt_targets
from lowbw.advise.rank import rank
from lowbw.advise.workload import from_model
from lowbw.net.costlinks import WorkerLink
from lowbw.net.trace import resolve_trace
from lowbw.report import walltime
from lowbw.report.catalog import E9_LINKS
from lowbw.report.common import plotting
from lowbw.report.experiment import Context, Experiment, Stats
from lowbw.report.latex import booktabs, escape, fmt_num
from lowbw.report.stats import MIN_CORRELATION_METHODS
from lowbw.report.training import retime
from lowbw.runs.results import load_metrics, load_runs
from lowbw.train.workload_specs import workload_words

__all__ = ["E11", "settings", "spearman", "rank_correlation", "analytic_step", "REGRET_MEDIAN", "REGRET_WORST"]

REGRET_MEDIAN, REGRET_WORST = 0.10, 0.50  # issue 34's targets
ROUNDING = 1e-9  # relative step-time error below which two times are equal up to float64 rounding
BASELINE = "dense"
PREFIXES = ("e4_", "e9_", "e10_")  # the experiments E11 holds out settings of (image and LM alike)
MISSING = ("no measured settings yet: no complete runs of e4_*, e9_* or e10_* and no GPU store runs whose "
           "baseline reached a target")


def _ids(df) -> list[str]:
    return [f"{s}:{e}/{r}" for s, e, r in zip(df["source"], df["experiment"], df["run"])]


def _load(ctx: Context, store: Path | None):
    """(runs, metrics, config per run uid): every complete run of the held-out experiments and the store.

    Only the experiments the profile runs are read from ``runs/`` (another profile's campaign left there, e.g. the
    language-model sweep, is not this build's evidence): the same PDF from this checkout as from a fresh clone."""
    runs, mets, cfgs = [], [], {}
    ours = set(ctx.config.get("experiments") or {})
    dirs = sorted(d for d in ctx.runs_dir.glob("e*_*")
                  if d.is_dir() and d.name.startswith(PREFIXES) and d.name in ours)
    sources = [("runs", d) for d in dirs]
    if store is not None and store.is_dir():
        sources += [("store", d) for d in sorted(store.iterdir()) if d.is_dir()]
    for src, d in sources:
        r = load_runs(d, incomplete="skip")
        if r.empty or "method" not in r:
            continue
        r = r.assign(experiment=d.name, source=src)
        r = r[r["complete"].astype(bool)]
        runs.append(r)
        if d.name.startswith(("e4_", "e9_")):  # re-timed: their metrics lines are needed
            mets.append(load_metrics(d, incomplete="skip").assign(experiment=d.name, source=src))
        for uid, run in zip(_ids(r), r["run"]):
            cfgs[uid] = json.loads((d / run / "config.json").read_text())["config"]
    if not runs:
        return None, None, {}
    return (pd.concat(runs, ignore_index=True), pd.concat(mets, ignore_index=True) if mets else None, cfgs)


def _trace_mean_bps(name: str, workers: int) -> float:
    """Time-weighted mean rate (bits/s) of worker 0 over the trace (one period, or the steps' span)."""
    tr = resolve_trace(name, workers)
    steps = [s for s in tr.steps if s.rank in (None, 0)]
    end = tr.period_s or (steps[-1].t_s if len(steps) > 1 else 1.0)
    total = sum(s.bps * (min(end, n.t_s) - s.t_s) for s, n in zip(steps, steps[1:]) if s.t_s < end)
    if tr.period_s and steps[-1].t_s < end:
        total += steps[-1].bps * (end - steps[-1].t_s)
    return total / end if end > 0 and total > 0 else steps[0].bps


def _lst(v) -> list:
    if isinstance(v, str):
        v = json.loads(v) if v.startswith("[") else []
    return list(v) if isinstance(v, list | tuple) else []


def _own_links(cfg: dict[str, Any]) -> tuple[tuple, str]:
    """(WorkerLink per worker, words) of a run's own network (per-worker rates, uplinks, a trace's mean)."""
    n = int(cfg["workers"])
    rates = _lst(cfg.get("worker_bandwidth_mbit")) or [float(cfg.get("bandwidth_mbit", 10))] * n
    ups = _lst(cfg.get("worker_uplink_mbit")) or rates
    lats = _lst(cfg.get("worker_latency_ms")) or [float(cfg.get("latency_ms", 0.0) or 0.0)] * n
    words = f"{min(rates):g}" + ("" if len(set(rates)) == 1 else f"-{max(rates):g}") + " Mbit/s"
    if ups != rates:  # a slower uplink: its rate in the same unit, marked "up"
        words += f" (up {min(ups):g})"
    if cfg.get("bandwidth_trace"):
        mean = _trace_mean_bps(cfg["bandwidth_trace"], n)
        rates = ups = [mean / 1e6] * n
        words = f"trace {cfg['bandwidth_trace']} (mean {mean / 1e6:.3g} Mbit/s)"
    speeds = _lst(cfg.get("worker_speeds"))
    if speeds and max(speeds) != min(speeds):
        words += f", a {max(speeds) / min(speeds):g}x straggler"
    links = tuple(WorkerLink(u * 1e6, d * 1e6, a / 1e3, a / 1e3) for u, d, a in zip(ups, rates, lats))
    return links, words + f", {lats[0]:g} ms"


def _equal_links(n: int, mbit: float, lat_ms: float) -> tuple:
    return tuple(WorkerLink(mbit * 1e6, mbit * 1e6, lat_ms / 1e3, lat_ms / 1e3) for _ in range(n))


def settings(ctx: Context, runs, mets, cfgs) -> list[dict[str, Any]]:
    """Every held-out setting: its runs (uids), links, words, and how to time a run's target and step there."""
    r = ctx.config.get("report") or {}
    e4_links = [(float(b), float(r.get("latency_ms", 0.5))) for b in r.get("bandwidths_mbit", [1, 10, 100, 1000])]
    e9_links = [(m, lat) for m, lat in E9_LINKS.values()]
    out = []
    for (src, exp, ds, model, n), g in runs.groupby(["source", "experiment", "dataset", "model", "workers"],
                                                     sort=True):
        ids = _ids(g)
        if exp.startswith(("e4_", "e9_")):
            m = mets[(mets["experiment"] == exp) & (mets["source"] == src)]
            for mbit, lat in e4_links if exp.startswith("e4_") else e9_links:
                def at(row, step, m=m, mbit=mbit, lat=lat):
                    x = m[(m["run"] == row["run"]) & (m["step"] == step)]
                    return float(retime(x, mbit, lat).iloc[0]) if len(x) else math.nan

                def per_step(row, m=m, mbit=mbit, lat=lat):
                    x = m[m["run"] == row["run"]].sort_values("step").iloc[-1:]
                    return float(retime(x, mbit, lat).iloc[0]) / max(1, int(x["step"].iloc[0]))

                out.append({"source": src, "experiment": exp, "dataset": ds, "model": model, "workers": int(n),
                            "network": f"{mbit:g} Mbit/s, {lat:g} ms",
                            "links": _equal_links(int(n), mbit, lat), "ids": ids, "at": at, "per_step": per_step})
        else:
            links, words = _own_links(cfgs[ids[0]])
            out.append({"source": src, "experiment": exp, "dataset": ds, "model": model, "workers": int(n),
                        "network": words, "links": links, "ids": ids,
                        "at": lambda row, step: math.nan,  # own clock: ttt.<name>.t_virtual (below)
                        "per_step": lambda row: float(row["t_virtual"]) / max(1, int(row["step"])), "own": True})
    return out


def spearman(a, b) -> float:
    """Spearman's rank correlation of two equal-length sequences (average ranks for ties); NaN below 3."""
    if len(a) < 3:
        return math.nan
    ra, rb = pd.Series(list(a), dtype=float).rank(), pd.Series(list(b), dtype=float).rank()
    if ra.std() == 0 or rb.std() == 0:
        return math.nan
    return float(ra.corr(rb))


def rank_correlation(order: list[str], measured: dict[str, float]) -> float:
    """Spearman's rho of the advisor's ``order`` (best first) against the ``measured`` times to the target of the
    ranked methods that reached it (method -> seconds); NaN where fewer than
    :data:`~lowbw.report.stats.MIN_CORRELATION_METHODS` methods enter it (no correlation is quoted over fewer)."""
    if len(measured) < MIN_CORRELATION_METHODS:
        return math.nan
    return spearman([order.index(m) for m in measured], [measured[m] for m in measured])


def analytic_step(compute_s: float, params: int, links: tuple, period: int = 1) -> float:
    """Ours, stated in the module docstring: C + (2 (M-1)/M * 4P*8/r + 2 (M-1) alpha) / H, r and alpha of the
    slowest link (a ring is bounded by it)."""
    m = len(links)
    if m < 2:
        return compute_s
    r = min(min(x.up_bps, x.down_bps) for x in links)
    alpha = max(x.up_alpha_s + x.down_alpha_s for x in links) / 2
    return compute_s + (2 * (m - 1) / m * 4 * params * 8 / r + 2 * (m - 1) * alpha) / period


def _target(g, names: list[str]) -> str | None:
    """The hardest target name the baseline reached with every seed in ``g`` (None without a baseline run)."""
    def hard(n):
        metric, d, v = target_of(n)
        return (metric, -v if d == "up" else v)

    base = g[g["method"] == BASELINE]
    if base.empty:
        return None
    for n in sorted(names, key=hard):
        col = f"ttt.{n}.step"
        if col in base and base.groupby("method")[col].apply(lambda x: x.notna().all()).any():
            return n
    return None


def _evaluate(s: dict, runs, cfgs, holdout: str) -> dict[str, Any] | None:
    """One held-out setting: the advisor's ranking (built without ``holdout``'s runs) against the measurements."""
    import statistics

    ids = set(s["ids"])
    mine = runs[[u in ids for u in _ids(runs)]]
    name = _target(mine, ttt_targets(mine))
    if name is None:
        return None
    metric, _, value = target_of(name)
    if holdout == "runs":
        rest = runs[[u not in ids for u in _ids(runs)]]
    else:  # every run of the same dataset, model and workers
        rest = runs[~((runs["dataset"] == s["dataset"]) & (runs["model"] == s["model"])
                      & (runs["workers"] == s["workers"]))]
    measured, cands, left_out = {}, [], []
    for method, gm in mine.groupby("method", sort=True):
        times = []
        for _, row in gm.iterrows():
            step = row.get(f"ttt.{name}.step")
            if step is None or (isinstance(step, float) and math.isnan(step)):
                times.append(math.nan)
            else:
                times.append(float(row[f"ttt.{name}.t_virtual"]) if s.get("own") else s["at"](row, int(step)))
        reached = all(math.isfinite(t) for t in times)
        measured[method] = {"ttt_s": statistics.fmean(times) if reached else math.nan, "reached": reached,
                            "seeds": len(times), "step_s": statistics.fmean(s["per_step"](r) for _, r in gm.iterrows())}
        c = candidate_from_config(str(method), cfgs[_ids(gm)[0]])
        (cands.append(c) if c is not None else left_out.append(str(method)))
    # a method measured only in the held-out setting has no steps to the target left to predict it from: the
    # advisor could only assume dense's steps ("bytes only"), so it is not ranked but named (E9's methods were
    # measured nowhere else and made held-out E9 settings pick dense)
    table = efficiency.rows_from_runs(rest)
    have = {str(r["method"]) for r in table}
    unmeasured = [c.name for c in cands if c.name not in have]
    cands = [c for c in cands if c.name in have]
    left_out += [f"{m} (measured nowhere else)" for m in unmeasured]
    if len(cands) < 2:  # one ranked method cannot be chosen wrongly: not a test of the advisor
        return None
    compute = statistics.median(float(r["t_virtual_compute"]) / max(1, int(r["step"])) for _, r in mine.iterrows())
    batch = int(mine["batch_size"].iloc[0]) if "batch_size" in mine else 32
    w = from_model(s["model"], batch, step_ms=compute * 1e3)
    budget = float(mine["step"].max())  # the held-out runs' length: what a user would give as --max-steps
    ranking = rank(w, s["links"], table, metric, value, cands=tuple(cands), budget=budget)
    order = [a.candidate.name for a in ranking]
    pick = order[0]
    reached = {m: v for m, v in measured.items() if v["reached"] and m in order}  # the best among those ranked
    best = min(reached, key=lambda m: reached[m]["ttt_s"]) if reached else None
    regret = (measured[pick]["ttt_s"] / reached[best]["ttt_s"] - 1) if best and measured[pick]["reached"] else math.inf
    rho = rank_correlation(order, {m: v["ttt_s"] for m, v in reached.items()})
    per_method = [{"method": a.candidate.name, "position": i + 1, "confidence": a.efficiency.confidence,
                   "predicted_step_s": a.step.step_s, "predicted_ttt_s": a.ttt_s,
                   "predicted_steps_ratio": a.efficiency.ratio, "measured_ttt_s": measured[a.candidate.name]["ttt_s"],
                   "reached": measured[a.candidate.name]["reached"], "measured_step_s":
                   measured[a.candidate.name]["step_s"], "period": a.candidate.period, "family": a.candidate.family,
                   "compressor": a.candidate.compressor, "fragments": a.candidate.fragments,
                   "households": a.candidate.households}
                  for i, a in enumerate(ranking)]
    return {"target": name, "metric": metric, "target_value": value, "pick": pick,
            "pick_confidence": ranking[0].efficiency.confidence, "pick_reached": measured[pick]["reached"],
            "best": best, "regret": regret, "rho": rho, "rho_methods": len(reached), "ranked": len(order),
            "left_out": ", ".join(left_out),
            # a compressed method's compression time from the repository's timings (lowbw.advise.device)
            "compress_stored": any(a.compression is not None and a.compression.basis == "measured"
                                   and a.candidate.compressor != "none" for a in ranking),
            "compute_s": compute, "params": w.params, "per_method": per_method}


def stats(ctx: Context, store: Path | None = None) -> Stats | None:
    """Tidy ``settings`` (one row per held-out setting: pick, best, regret, rho, for both hold-outs),
    ``methods`` (per setting and ranked method: predicted and measured step and time to target) and
    ``steps`` (dense and every-H fp32 runs: measured, advisor's and analytic seconds per step); None without a
    setting whose baseline reached a target."""
    runs, mets, cfgs = _load(ctx, gpu_store.DEFAULT_STORE if store is None else store)  # read now: tests move it
    if runs is None:
        return None
    rows, methods, steps, skipped = [], [], [], 0
    for s in settings(ctx, runs, mets, cfgs):
        ev = _evaluate(s, runs, cfgs, "runs")
        if ev is None:
            skipped += 1
            continue
        strict = _evaluate(s, runs, cfgs, "workload")
        key = {"source": s["source"], "experiment": s["experiment"], "dataset": s["dataset"], "model": s["model"],
               "workers": s["workers"], "network": s["network"]}
        rows.append({**key, **{k: v for k, v in ev.items() if k != "per_method"},
                     "strict_pick": strict["pick"] if strict else None,
                     "strict_regret": strict["regret"] if strict else math.nan})
        for pm in ev["per_method"]:
            methods.append({**key, **pm})
            # the methods whose exchange is one dense world average every `period` steps (analytic_step's model):
            # no compressor, no fragments, no households (sync, local, DiLoCo; the advisor models no others)
            if pm["compressor"] == "none" and pm["fragments"] == 1 and pm["households"] == 0:
                steps.append({**key, "method": pm["method"], "period": pm["period"], "measured_step_s":
                              pm["measured_step_s"], "advisor_step_s": pm["predicted_step_s"],
                              "analytic_step_s": analytic_step(ev["compute_s"], ev["params"], s["links"],
                                                               pm["period"])})
    if not rows:
        return None
    st = pd.DataFrame(rows)
    if (runs["source"] == "store").any():  # the GPU runs: settings of their own, rows of the efficiency table
        ctx.read_store("gpu")
    if st["compress_stored"].any():
        ctx.read_store("compress_time")
    return Stats({"settings": st, "methods": pd.DataFrame(methods), "steps": pd.DataFrame(steps)},
                 {"source": "runs/e4_*, runs/e9_*, runs/e10_*, paper/measured/gpu", "skipped_settings": skipped,
                  "regret_targets": [REGRET_MEDIAN, REGRET_WORST]})


def _pct(x: float) -> str:
    return "never" if not math.isfinite(x) else fmt_num(100 * x, 2)


def _pct_unit(x: float) -> str:
    """A regret for prose: ``12\\,\\%``, or ``never`` (no unit) where the pick did not reach the target."""
    return "never" if not math.isfinite(x) else fmt_num(100 * x, 2) + r"\,\%"


CONFIDENCE = {"measured": "meas.", "extrapolated": "extr."}  # the table's abbreviations (its caption says them)
TARGETS = ("the median-regret target", "the worst-regret target",
           "the target of never picking a method that missed the target")


def verdict(met: tuple[bool, bool, bool]) -> str:
    """Which of issue 34's three targets (median, worst, never a missing pick; ``met`` in that order) the
    advisor meets, as a verb phrase: "meets A but misses B and C"."""
    ok = [t for t, m in zip(TARGETS, met) if m]
    bad = [t for t, m in zip(TARGETS, met) if not m]

    def words(xs):
        return xs[0] if len(xs) == 1 else ", ".join(xs[:-1]) + " and " + xs[-1]

    if not bad:
        return "meets all three targets"
    if not ok:
        return "misses all three targets: " + words(bad)
    return f"meets {words(ok)} but misses {words(bad)}"


def _target_words(metric: str, value: float) -> str:
    """``val_loss <= 1.6`` in LaTeX (a bare ``<=`` prints wrongly in the text font)."""
    op = r"$\ge$" if metric.endswith("acc") else r"$\le$"
    return f"{escape(metric)} {op} {fmt_num(value)}"


def _workload(ds: str, model: str) -> str:
    return workload_words(model, ds)


def _where(r) -> str:
    return escape(f"{r['experiment']}, {r['workers']} workers, {r['network']}")


def _rho_numbers(rho, methods) -> dict[str, str]:
    """The median rank correlation over the settings where at least MIN_CORRELATION_METHODS ranked methods
    reached the target (``rho`` NaN elsewhere); where there is none, ``EElevenRhoNone`` instead: the most methods
    that reached the target in one setting, so that the prose says why no correlation is given."""
    import numpy as np

    out = {"EElevenRhoMinMethods": str(MIN_CORRELATION_METHODS)}
    if np.isfinite(rho).any():
        return out | {"EElevenRhoMedian": fmt_num(float(np.nanmedian(rho)), 2),
                      "EElevenRhoSettings": str(int(np.isfinite(rho).sum()))}
    return out | {"EElevenRhoNone": str(int(max(methods, default=0)))}


def numbers(st: Stats) -> dict[str, str]:
    """Every E11 macro, "n/a" where the measured settings do not define it; the rank correlation's macros only
    where it is defined (:func:`_rho_numbers`)."""
    import numpy as np

    t = st.tables["settings"]
    reg = t["regret"].to_numpy(float)
    finite = reg[np.isfinite(reg)]
    med = float(np.median(reg)) if len(reg) else math.nan  # inf sorts last: the median is defined
    worst = float(reg.max()) if len(reg) else math.nan
    never = int((~t["pick_reached"].astype(bool)).sum())
    rho = t["rho"].to_numpy(float)
    strict = t["strict_regret"].to_numpy(float)
    wi = int(np.argmax(np.where(np.isfinite(reg), reg, np.inf))) if len(reg) else None
    met = (med <= REGRET_MEDIAN, worst <= REGRET_WORST, never == 0)
    fails = t[(t["regret"] > REGRET_MEDIAN) | ~t["pick_reached"].astype(bool)]
    sp = st.tables["steps"]

    def errors(col) -> np.ndarray:
        """|predicted / measured - 1| per row; below ROUNDING it is the float rounding of two equal times (the
        virtual clock charges a ring step by the analytic form itself), printed as 0."""
        e = (sp[col] / sp["measured_step_s"] - 1).abs().to_numpy(float)
        e = e[np.isfinite(e)]
        return np.where(e < ROUNDING, 0.0, e)

    def err(col):
        e = errors(col) if not sp.empty else np.array([])
        return fmt_num(100 * float(np.median(e)), 2) if len(e) else "n/a"

    def errmax(col):
        e = errors(col) if not sp.empty else np.array([])
        return fmt_num(100 * float(e.max()), 2) if len(e) else "n/a"

    return {
        "EElevenSettings": str(len(t)),
        "EElevenSkipped": str(st.meta["skipped_settings"]),
        "EElevenWorkloads": escape("; ".join(sorted({_workload(d, m) for d, m in zip(t["dataset"], t["model"])}))),
        "EElevenExperiments": escape(", ".join(sorted(set(t["experiment"])))),
        "EElevenRegretMedian": _pct_unit(med),
        "EElevenRegretWorst": _pct_unit(worst),
        "EElevenWorstWhere": _where(t.iloc[wi]) if wi is not None else "n/a",
        "EElevenWithinTen": str(int((finite <= REGRET_MEDIAN).sum())),
        "EElevenNeverReached": str(never),
        **_rho_numbers(rho, t["rho_methods"]),
        "EElevenVerdict": verdict(met),
        "EElevenFailures": "; ".join(f"{_where(r)}: {escape(r['pick'])} ({escape(r['pick_confidence'])}) instead "
                                     f"of {escape(r['best'] or '--')}, regret {_pct_unit(r['regret'])}"
                                     for _, r in fails.iterrows()) or "none",
        "EElevenStrictRegretMedian": _pct_unit(float(np.median(strict))) if len(strict) else "n/a",
        "EElevenStrictRegretWorst": _pct_unit(float(strict.max())) if len(strict) else "n/a",
        "EElevenStepRows": str(len(sp)),
        "EElevenAdvisorStepErr": err("advisor_step_s"), "EElevenAdvisorStepErrMax": errmax("advisor_step_s"),
        "EElevenAnalyticStepErr": err("analytic_step_s"), "EElevenAnalyticStepErrMax": errmax("analytic_step_s"),
        **walltime.numbers(),
    }


def table(st: Stats) -> str:
    return _settings_table(st) + "\n" + walltime.table()


def _settings_table(st: Stats) -> str:
    t = st.tables["settings"]
    left = sorted({m for x in t["left_out"] for m in str(x).split(", ") if m})
    has_rho = bool(t["rho"].notna().any())  # no setting with enough methods: no rho column, the caption says why
    rows = []
    for _, r in t.iterrows():
        conf = CONFIDENCE.get(r["pick_confidence"], r["pick_confidence"])
        rho = [fmt_num(r["rho"], 2) if math.isfinite(r["rho"]) else "--"] if has_rho else []
        rows.append([escape(r["experiment"]), str(r["workers"]),
                     escape(r["network"]), _target_words(r["metric"], r["target_value"]), f"{r['ranked']}",
                     f"{escape(r['pick'])} ({escape(conf)})", escape(r["best"] or "--"),
                     _pct(r["regret"]), *rho, _pct(r["strict_regret"])])
    rho_words = (r"$\rho$: Spearman's rank correlation of its order with the measured times (where at least "
                 f"{MIN_CORRELATION_METHODS} ranked methods reached the target, -- elsewhere)" if has_rho else
                 f"no rank correlation is given: at most {int(t['rho_methods'].max())} ranked methods reached the "
                 f"target in a setting, and none is quoted over fewer than {MIN_CORRELATION_METHODS}")
    # No workload column: the experiment fixes the dataset and model (the prose lists them), and the table must
    # fit the text width of the two-column paper's table*.
    return booktabs(rows, ["Exp.", "N", "Network", "Target", "Ranked", "Pick (conf.)", "Best",
                           r"Regret (\%)", *([r"$\rho$"] if has_rho else []), r"Strict (\%)"],
                    "Leave-one-setting-out: for each held-out setting the advisor, its efficiency table built "
                    "without that setting's runs, ranks the methods measured there. Exp.: the held-out "
                    "experiment, which fixes the dataset and model; N: workers; Network: link rate per worker "
                    "(a-b: rates from a to b; up: a slower uplink's rate) and one-way latency; Target: the "
                    "hardest target the baseline (dense) reached with every seed; Pick (conf.): the advisor's "
                    "first choice and the confidence of its efficiency row (meas.: measured, extr.: "
                    "extrapolated); Best: the ranked method measured fastest to the target. Regret = measured "
                    "time to the "
                    "target of its pick / the best measured - 1 (never: the pick did not reach the target with "
                    "every seed); " + rho_words + "; Strict: the regret when every run of the same "
                    "dataset, model and workers is held out. Ranked: methods the advisor models"
                    + (f"; left out (no step model): {escape(', '.join(left))}" if left else "") + ". "
                    f"Against the targets set in advance (median regret at most {fmt_num(100 * REGRET_MEDIAN)}\\,\\%, "
                    f"worst at most {fmt_num(100 * REGRET_WORST)}\\,\\%, no pick that misses the target), the "
                    f"advisor {numbers(st)['EElevenVerdict']}.", "tab:e11",
                    size=r"\scriptsize")


def _label(r, workers_vary: bool) -> str:
    """A setting's axis label: the experiment and its network (rates with their unit), the workers where they
    differ between settings."""
    return f"{r['experiment']}" + (f" N={r['workers']}" if workers_vary else "") + f": {r['network']}"


def figure(st: Stats):
    """Left: regret per held-out setting (bars on a symlog axis, linear below 1 %, so that 0 %, the 10 % and
    50 % targets (dashed) and regrets of thousands of per cent are all readable; a pick that missed the target
    has no bar and is marked "never"). Right: seconds per step of dense and every-H runs, measured against the
    advisor's prediction (dots) and the analytic form (crosses), log-log with the diagonal."""
    plt, _ = plotting()
    t = st.tables["settings"]
    sp = st.tables["steps"]
    fig, (a, b) = plt.subplots(1, 2, figsize=(7.0, max(2.6, 0.6 + 0.14 * len(t))),
                               gridspec_kw={"width_ratios": [1.4, 1]})
    reg = [100 * x if math.isfinite(x) else math.nan for x in t["regret"]]
    top = max([v for v in reg if v == v] + [100.0 * REGRET_WORST]) * 3
    ys = list(range(len(t)))
    a.barh(ys, [0.0 if v != v else v for v in reg], color="C0", height=0.7)
    for y, v in zip(ys, reg):
        if v != v:  # no finite length: the word says it
            a.text(0, y, " never", va="center", ha="left", fontsize=7, color="C3", fontweight="bold")
        else:
            a.annotate(f"{v:.0f}", (v, y), xytext=(2, 0), textcoords="offset points", va="center", fontsize=6.5)
    for x in (100 * REGRET_MEDIAN, 100 * REGRET_WORST):
        a.axvline(x, ls="--", lw=0.7, color="0.3")
    a.set_xscale("symlog", linthresh=1.0, linscale=0.5)
    vary = t["workers"].nunique() > 1
    a.set_yticks(ys, [_label(r, vary) for _, r in t.iterrows()], fontsize=6.5)
    a.tick_params(axis="x", labelsize=7)
    a.invert_yaxis()
    a.set(xlabel="regret (%), dashed: 10 % and 50 % targets", xlim=(0, top))
    a.xaxis.label.set_size(7.5)
    if not sp.empty:
        b.scatter(sp["measured_step_s"], sp["advisor_step_s"], s=10, label="advisor")
        b.scatter(sp["measured_step_s"], sp["analytic_step_s"], s=12, marker="x", label="analytic (ours)")
        lo = float(min(sp[["measured_step_s", "advisor_step_s", "analytic_step_s"]].min())) * 0.8
        hi = float(max(sp[["measured_step_s", "advisor_step_s", "analytic_step_s"]].max())) * 1.25
        b.plot([lo, hi], [lo, hi], ls="--", lw=0.7, color="0.3")
        b.set(xscale="log", yscale="log", xlabel="measured s/step", ylabel="predicted s/step")
        b.legend(fontsize=6, frameon=False)
    else:
        b.text(0.5, 0.5, "no dense or every-H run", ha="center", va="center", transform=b.transAxes)
    fig.tight_layout()
    return fig


E11 = Experiment("e11", "E11 how good is the advisor", stats, numbers, table, figure, MISSING)
