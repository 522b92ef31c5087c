"""E9 on the language model near convergence (the lm_evidence profile, issue 41): gpt-mini trained by every
method at its own tuned values (``runs/e9_lmc``, 3 seeds), with the recorded sweep that picked them
(``runs/e9_lmc_sweep``, the appendix table), the check of each inner-lr pick against its runner-up on the seeds
the sweep never ran (``runs/e9_lmc_confirm``, the second appendix table) and dense's long run
(``runs/e9_lmc_curve``). Where this
profile's runs are absent (the default profile) the runs kept in the repository are read
(``paper/measured/lm``, ``python -m lowbw store add --cpu``): a fresh clone's PDF shows them as stored evidence
and a run of the profile replaces them.

The target is chosen by the numbers: dense's final validation loss (mean over its seeds) + 0.1 nats/char,
rounded up to 0.05. Time to target is censored: a seed that never reaches it counts (arrivals k/n and the
median over all seeds, infinite where more than half never arrive). Beside it, the final validation loss at
equal tokens (every run sees the same 1024 x 16 windows) and at equal wall-clock time at each headline link
(the loss of each run's last evaluation by the time the fastest whole run of the grid ends there).
"""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from scipy.stats import ttest_ind, ttest_rel

from lowbw.report.catalog import PREFIX
from lowbw.report.common import fmt_duration, report_links
from lowbw.report.conditions import runs_provenance
from lowbw.report.experiment import Context, Experiment, MissingData, Stats
from lowbw.report.latex import booktabs, escape, fmt_num, page_rows
from lowbw.report.lmc_sweep import CONFIRM, SWEEP, at_edge, confirmed, kept_at_edge, runner_up, sweep_table
from lowbw.report.training import eval_lines, retime
from lowbw.runs.results import load_metrics, load_runs
from lowbw.workflow.store import load_store

__all__ = ["E9LMC", "LMC_STORE", "TUNED", "CURVE", "HEADLINE_MBIT", "stats", "numbers", "table", "figure",
           "sweep_latex"]

LMC_STORE = Path("paper/measured/lm")  # the lm_evidence profile's runs, kept in the repository
TUNED, CURVE = "e9_lmc", "e9_lmc_curve"  # the tuned grid and dense's long run
WORKERS = "e9_lmc_workers"  # DiLoCo and eager DiLoCo at their tuned values with fewer workers
EAGER, DILOCO = "diloco16_eager", "diloco16"  # eager DiLoCo and the DiLoCo it overlaps
HEADLINE_MBIT = (10.0, 1000.0)  # the links the headline compares at (Mbit/s per worker)
BASELINE = "dense"
MARGIN = 0.1  # nats/char above dense's final validation loss: the target
SWEEP_ROWS_PER_PAGE = 64  # rows of the appendix's sweep table per page (\footnotesize, a page holds about 75)



def _seeds(methods: pd.DataFrame) -> str:
    """The seeds per method in words: ``5``, or ``3 to 5`` while a campaign adds seeds (each method's statistics
    count its own)."""
    lo, hi = int(methods["seeds"].min()), int(methods["seeds"].max())
    return str(lo) if lo == hi else f"{lo} to {hi}"

def _p_vs_dense(mine: pd.Series, dense: pd.Series) -> float:
    """p of "ends at dense's final loss": a seed fixes the initial weights and the order of the data for every
    method, and seeds that end high do so for every AdamW method alike, so the test is paired over the seeds
    both ran (a t-test on the per-seed differences); Welch's over unpaired samples where fewer than two seeds are
    shared; 0 where every shared seed differs by the same nonzero amount; nan for dense itself and where either
    has one run."""
    common = sorted(set(mine.index) & set(dense.index))
    if len(common) > 1:
        d = mine.loc[common].to_numpy() - dense.loc[common].to_numpy()
        if np.all(d == d[0]):  # the same difference on every seed: no spread to test against
            return 0.0 if d[0] != 0 else math.nan
        return float(ttest_rel(mine.loc[common], dense.loc[common]).pvalue)
    if len(mine) > 1 and len(dense) > 1:
        return float(ttest_ind(mine.to_numpy(), dense.to_numpy(), equal_var=False).pvalue)
    return math.nan


def _method(name: str) -> str:
    return name.removesuffix("-tuned")


def _source(ctx: Context) -> tuple[Path, str] | None:
    """Where the tuned grid's complete runs are, (root, words): this build's runs, else the store; None: neither.
    The sweep and dense's long run are read from the same root, so that one source's numbers are reported."""
    for root, where in ((Path(ctx.runs_dir), "measured by this build"), (LMC_STORE, "stored")):
        d = root / TUNED
        if d.is_dir() and not load_runs(d, incomplete="skip").empty:
            return root, where
    return None


def _load(root: Path, exp: str) -> tuple[pd.DataFrame | None, pd.DataFrame | None]:
    """(runs, metrics) of experiment ``exp``'s complete runs under ``root`` (with the store's measured dates
    where ``root`` is the store), or (None, None)."""
    d = root / exp
    if not d.is_dir():
        return None, None
    runs = load_runs(d, incomplete="skip")
    if runs.empty:
        return None, None
    if root == LMC_STORE:
        prov = load_store(LMC_STORE)
        runs = runs.merge(prov[["run", "measured_date"]].assign(run=prov["run"].str.removeprefix(f"{exp}/")),
                          on="run", how="left")
    return runs, load_metrics(d, incomplete="skip")


def _ttt(m: pd.DataFrame, target: float, mbit: float, lat: float) -> tuple[float, float]:
    """(virtual seconds, bytes sent by then) to the first evaluation with val_loss <= target (NaN, NaN if never)."""
    ev = eval_lines(m, "val_loss")
    hit = ev[ev["val_loss"] <= target].iloc[:1]
    if hit.empty:
        return math.nan, math.nan
    return float(retime(hit, mbit, lat).iloc[0]), float(hit["bytes_sent"].iloc[0])


def _loss_at(m: pd.DataFrame, t: float, mbit: float, lat: float) -> float:
    """val_loss of the last evaluation at or before virtual time ``t`` at ``mbit`` (NaN if none)."""
    ev = eval_lines(m, "val_loss")
    ev = ev[retime(ev, mbit, lat).to_numpy() <= t + 1e-9]
    return float(ev["val_loss"].iloc[-1]) if not ev.empty else math.nan


def _censored_median(t: np.ndarray) -> float:
    """Median over every seed, a seed that never arrived counting as infinitely late."""
    return float(np.median(np.where(np.isfinite(t), t, np.inf)))


def stats(ctx: Context) -> Stats | None:
    """Tables ``runs`` (per run: final loss, and per headline link ttt, bytes to target, loss at equal time),
    ``methods`` (per method: over seeds), ``sweep`` (the recorded sweep) and ``curve`` (dense's long run)."""
    src = _source(ctx)
    if src is None:
        return None
    root, where = src
    if root == LMC_STORE:
        ctx.read_store("lm")
    runs, mets = _load(root, TUNED)
    runs = runs.assign(method=runs["name"].map(_method))
    if BASELINE not in set(runs["method"]):
        raise MissingData(f"{TUNED}: no {BASELINE} run")
    _, lat, _ = report_links(ctx)
    dense_final = float(runs.loc[runs["method"] == BASELINE, "final_val_loss"].mean())
    target = math.ceil((dense_final + MARGIN) / 0.05 - 1e-9) * 0.05
    per = {r["run"]: mets[mets["run"] == r["run"]] for _, r in runs.iterrows()}
    ends = {mb: min(float(retime(m, mb, lat).max()) for m in per.values()) for mb in HEADLINE_MBIT}
    rows = []
    for _, r in runs.iterrows():
        m = per[r["run"]]
        row = {"method": r["method"], "seed": int(r["seed"]), "run": r["run"],
               "final_val_loss": float(r["final_val_loss"]), "bytes_total": float(r["bytes_sent_total"])}
        for mb in HEADLINE_MBIT:
            row[f"ttt_s@{mb:g}"], row[f"bytes_to_target@{mb:g}"] = _ttt(m, target, mb, lat)
            row[f"loss_at_equal_time@{mb:g}"] = _loss_at(m, ends[mb], mb, lat)
        rows.append(row)
    per_run = pd.DataFrame(rows)
    dense = per_run.loc[per_run["method"] == BASELINE, "final_val_loss"].to_numpy()
    dense_by_seed = per_run[per_run["method"] == BASELINE].set_index("seed")["final_val_loss"]
    mrows = []
    for method, g in per_run.groupby("method", sort=False):
        f = g["final_val_loss"].to_numpy()
        p = _p_vs_dense(g.set_index("seed")["final_val_loss"], dense_by_seed)
        row = {"method": method, "seeds": len(g), "final_mean": float(f.mean()),
               "final_std": float(f.std(ddof=1)) if len(f) > 1 else math.nan, "p_vs_dense": p,
               "as_low_as_dense": bool(f.mean() <= dense.mean() or not p < 0.05),
               "bytes_total_mean": float(g["bytes_total"].mean())}
        for mb in HEADLINE_MBIT:
            t = g[f"ttt_s@{mb:g}"].to_numpy(dtype=float)
            row[f"arrived@{mb:g}"] = int(np.isfinite(t).sum())
            row[f"ttt_median_s@{mb:g}"] = _censored_median(t)
            row[f"bytes_to_target@{mb:g}"] = float(np.nanmedian(g[f"bytes_to_target@{mb:g}"])) if np.isfinite(
                t).any() else math.nan
            row[f"loss_at_equal_time@{mb:g}"] = float(g[f"loss_at_equal_time@{mb:g}"].mean())
        mrows.append(row)
    methods = pd.DataFrame(mrows)
    sweep, _ = _load(root, SWEEP)
    curve, curve_m = _load(root, CURVE)
    sweep_t = sweep_table(sweep) if sweep is not None else pd.DataFrame()
    confirm, _ = _load(root, CONFIRM)
    held = sorted(int(s) for s in confirm["seed"].unique()) if confirm is not None else []
    conf = {}
    if not sweep_t.empty and confirm is not None and held:
        cols = ["name", "seed", "lr", "final_val_loss"]
        conf = confirmed(sweep_t, pd.concat([runs[cols], confirm[cols]], ignore_index=True), held)
    fewer, _ = _load(root, WORKERS)
    tables = {"runs": per_run, "methods": methods, "sweep": sweep_t,
              "workers": _eager_gap(per_run, int(runs["workers"].iloc[0]), fewer) if fewer is not None
              else pd.DataFrame(),
              "confirm": _confirm_table(sweep_t, conf) if conf else pd.DataFrame(),
              "curve": curve_m if curve is not None else pd.DataFrame(), "metrics": mets}
    dates = sorted(set(runs.get("measured_date", pd.Series(dtype=str)).dropna().astype(str)))
    sweep_dirs = [root / SWEEP / r for r in sweep["run"]] if sweep is not None else []
    return Stats(tables, {"source": str(root / TUNED),
                          "provenance": runs_provenance(root / TUNED / r for r in runs["run"]),
                          "sweep_provenance": runs_provenance(sweep_dirs),
                          "confirm_provenance": runs_provenance(root / CONFIRM / r for r in confirm["run"])
                          if confirm is not None else "", "held_out": held,
                          "kept_at_edge": kept_at_edge(sweep_t, conf) if conf else {},
                          "picking_seeds": sorted({int(s) for s in sweep["seed"]} | set(held))
                          if sweep is not None else [],
                          "where": where, "dates": dates, "target": target, "dense_final": dense_final,
                          "latency_ms": lat, "equal_time_s": ends, "seeds": _seeds(methods),
                          "steps": int(runs["steps"].iloc[0]), "workers": int(runs["workers"].iloc[0]),
                          "curve_final": float(curve["final_val_loss"].iloc[0]) if curve is not None else math.nan,
                          "curve_steps": int(curve["steps"].iloc[0]) if curve is not None else 0})


def _confirm_table(sweep: pd.DataFrame, conf: dict) -> pd.DataFrame:
    """One row per method whose inner-lr pick was checked on the held-out seeds (``conf``, :func:`confirmed`):
    ``pick_lr``, ``pick_mean``, ``alt_lr``, ``alt_mean``, ``beyond`` (lr -> mean of each point beyond the edge),
    ``lr`` (kept) and ``changed``; a method whose held-out runs are missing has NaNs."""
    alt = runner_up(sweep)
    rows = [{"method": m, **c, "changed": c["lr"] != c["pick_lr"]} for m, c in conf.items()]
    rows += [{"method": m, "pick_lr": math.nan, "pick_mean": math.nan, "alt_lr": alt[m], "alt_mean": math.nan,
              "beyond": {}, "lr": math.nan, "changed": False} for m in alt if m not in conf]  # not checked
    return pd.DataFrame(rows)


def _seed_words(seeds: list[int]) -> str:
    """``[3, 4]`` -> ``"3 and 4"``, ``[1, 2, 3]`` -> ``"1, 2 and 3"``."""
    return " and ".join(str(s) for s in seeds) if len(seeds) < 3 else (
        ", ".join(str(s) for s in seeds[:-1]) + f" and {seeds[-1]}")


def _optimism(runs: pd.DataFrame, picking: list[int], p: str) -> dict[str, str]:
    """How much lower the tuned runs end on the seeds that picked their values (the sweep's and the held-out ones)
    than on the seeds no pick saw: per method the difference of the two means, its median over the methods that
    ran both, in words (``UnseenSeeds``, ``PickOptimism``); nothing where no tuned seed is unseen."""
    unseen = sorted(set(runs["seed"].astype(int)) - set(picking))
    if not picking or not unseen:
        return {}
    seen = runs["seed"].astype(int).isin(picking)
    gap = (runs[~seen].groupby("method")["final_val_loss"].mean()
           - runs[seen].groupby("method")["final_val_loss"].mean()).dropna()
    if gap.empty:
        return {}
    d = float(gap.median())
    return {f"{p}UnseenSeeds": _seed_words(unseen),
            f"{p}PickOptimism": f"{fmt_num(abs(d), 2)} nats/char {'higher' if d > 0 else 'lower'}" if d else "as low"}


def _eager_gap(tuned: pd.DataFrame, workers: int, fewer: pd.DataFrame) -> pd.DataFrame:
    """One row per worker count (``workers``: the tuned grid's, then ``fewer``'s): eager DiLoCo's and DiLoCo's mean
    final validation loss (``eager``, ``diloco``) over the seeds all four cells ran, ``gap`` = eager - diloco,
    ``seeds``, and ``p``: a paired t-test over those seeds of the per-seed gap at the grid's count against fewer
    workers' (the same on both rows). Eager's update is (M-1)/M stale, so the gap should narrow with fewer workers
    if staleness causes it (empty without all four cells)."""
    cells = [(workers, tuned), (int(fewer["workers"].iloc[0]), fewer.assign(method=fewer["name"].map(_method)))]
    have = [{int(x) for x in t.loc[t["method"] == m, "seed"]} for _, t in cells for m in (EAGER, DILOCO)]
    seeds = sorted(set.intersection(*have))
    if not seeds:
        return pd.DataFrame()
    rows, gaps = [], []
    for m_workers, t in cells:
        t = t.assign(seed=t["seed"].astype(int))
        by = t[t["seed"].isin(seeds)].pivot_table(index="seed", columns="method", values="final_val_loss")
        gaps.append(by[EAGER] - by[DILOCO])
        rows.append({"workers": m_workers, "eager": float(by[EAGER].mean()), "diloco": float(by[DILOCO].mean()),
                     "gap": float(gaps[-1].mean()), "seeds": len(seeds)})
    p = float(ttest_rel(gaps[0], gaps[1]).pvalue) if len(seeds) > 1 else math.nan
    return pd.DataFrame(rows).assign(p=p)


def _fastest(methods: pd.DataFrame, mb: float) -> pd.Series | None:
    """The method with the smallest censored median time to target at ``mb`` (None if none arrived)."""
    col = f"ttt_median_s@{mb:g}"
    ok = methods[np.isfinite(methods[col])]
    return None if ok.empty else ok.loc[ok[col].idxmin()]


def numbers(st: Stats) -> dict[str, str]:
    p, ms = PREFIX["e9lmc"], st.tables["methods"].set_index("method", drop=False)
    out = {f"{p}Target": fmt_num(st.meta["target"], 3), f"{p}DenseLoss": fmt_num(st.meta["dense_final"], 3),
           f"{p}Seeds": str(st.meta["seeds"]), f"{p}Steps": str(st.meta["steps"]),
           f"{p}Methods": str(len(ms)), f"{p}Where": st.meta["where"]}
    if math.isfinite(st.meta["curve_final"]):
        out[f"{p}CurveLoss"] = fmt_num(st.meta["curve_final"], 3)
        out[f"{p}CurveSteps"] = str(st.meta["curve_steps"])
        out[f"{p}DenseGap"] = fmt_num(st.meta["dense_final"] - st.meta["curve_final"], 2)
    if not st.tables["sweep"].empty:
        out[f"{p}SweepPoints"] = str(len(st.tables["sweep"]))
        edge = at_edge(st.tables["sweep"])
        joint = st.tables["sweep"][st.tables["sweep"]["knob"] == "joint"]
        worse = [str(r["method"]) for _, r in joint.iterrows() if not r["picked"]]
        out[f"{p}JointPoints"] = str(len(joint))
        out[f"{p}JointWorse"] = escape(", ".join(worse)) or "none"
        out[f"{p}JointWorseCount"] = str(len(worse))
        out[f"{p}SweepEdge"] = escape(", ".join(f"{m} ({' and '.join(k.replace('_', ' ') for k in ks)})"
                                             for m, ks in edge.items())) or "none"
    words = {10.0: "Ten", 1000.0: "Gbit"}
    dense = ms.loc[BASELINE]
    for mb in HEADLINE_MBIT:
        w = words[mb]
        best = _fastest(st.tables["methods"], mb)
        if best is None:
            out[f"{p}{w}Best"] = "none"
            continue
        col = f"ttt_median_s@{mb:g}"
        out[f"{p}{w}Best"] = escape(best["method"])
        out[f"{p}{w}BestTtt"] = fmt_duration(best[col])
        out[f"{p}{w}BestArrived"] = f"{int(best[f'arrived@{mb:g}'])} of {int(best['seeds'])}"
        out[f"{p}{w}BestBytes"] = fmt_num(best[f"bytes_to_target@{mb:g}"] / 1e6, 3)
        out[f"{p}{w}BestEnds"] = _ends(best, dense)
        out[f"{p}{w}BestFinal"] = fmt_num(best["final_mean"], 3)
        second = _fastest(st.tables["methods"][st.tables["methods"]["method"] != best["method"]], mb)
        if second is not None:  # the next soonest: a close second with more seeds arriving is worth naming
            out[f"{p}{w}Second"] = escape(second["method"])
            out[f"{p}{w}SecondTtt"] = fmt_duration(second[col])
            out[f"{p}{w}SecondArrived"] = f"{int(second[f'arrived@{mb:g}'])} of {int(second['seeds'])}"
        dense_t = dense[col]
        out[f"{p}{w}DenseTtt"] = fmt_duration(dense_t) if math.isfinite(dense_t) else "never"
        if math.isfinite(dense_t) and best["method"] != BASELINE:
            out[f"{p}{w}Speedup"] = fmt_num(dense_t / best[col], 3)
        out[f"{p}{w}EqualTime"] = fmt_duration(st.meta["equal_time_s"][mb])
        lo = ms[f"loss_at_equal_time@{mb:g}"].idxmin()
        out[f"{p}{w}EqualTimeBest"] = escape(str(lo))
        out[f"{p}{w}EqualTimeLoss"] = fmt_num(ms.loc[lo, f"loss_at_equal_time@{mb:g}"], 3)
    # how far one seed's pick carries: dense's seeds, and the widest spread of any method's seeds
    runs = st.tables["runs"]
    d = runs.loc[runs["method"] == BASELINE, "final_val_loss"]
    out[f"{p}DenseSeedMin"], out[f"{p}DenseSeedMax"] = fmt_num(d.min(), 3), fmt_num(d.max(), 3)
    spread = runs.groupby("method", sort=False)["final_val_loss"].agg(lambda f: f.max() - f.min())
    out[f"{p}WidestSpread"] = fmt_num(spread.max(), 2)
    out[f"{p}WidestSpreadMethod"] = escape(str(spread.idxmax()))
    sweep = st.tables["sweep"]
    if not sweep.empty and BASELINE in set(sweep["method"]):
        picked = sweep[(sweep["method"] == BASELINE) & sweep["picked"] & sweep["knob"].isin(["default", "lr"])]
        out[f"{p}DenseSweepLoss"] = fmt_num(picked["final_val_loss"].min(), 3)
    conf = st.tables["confirm"]
    if not conf.empty:
        done = conf[np.isfinite(conf["pick_mean"])]
        held = st.meta["held_out"]
        out[f"{p}HeldOutSeeds"] = _seed_words(held)
        out[f"{p}Confirmed"] = str(len(done))
        out[f"{p}Repicked"] = str(int(done["changed"].sum()))
        out[f"{p}RepickedMethods"] = escape(", ".join(done.loc[done["changed"], "method"])) or "none"
        # the kept lrs that sat at the edge of those tried, and the methods that kept a point beyond it
        ext = done[done["beyond"].map(len) > 0]
        out[f"{p}Extended"] = str(len(ext))
        won = ext[ext.apply(lambda r: r["lr"] in r["beyond"], axis=1).astype(bool)] if len(ext) else ext
        out[f"{p}ExtendedKeptMethods"] = escape(", ".join(won["method"])) or "none"
        if BASELINE in set(done["method"]):
            d = done.set_index("method").loc[BASELINE]
            out[f"{p}DenseHeldPick"], out[f"{p}DenseHeldAlt"] = fmt_num(d["pick_mean"], 3), fmt_num(d["alt_mean"], 3)
            out[f"{p}DensePickLr"], out[f"{p}DenseAltLr"] = fmt_num(d["pick_lr"], 3), fmt_num(d["alt_lr"], 3)
            out[f"{p}DenseKeptLr"] = fmt_num(d["lr"], 3)
        out[f"{p}KeptAtEdge"] = escape(", ".join(f"{m} ({side})" for m, side in st.meta["kept_at_edge"].items())
                                        ) or "none"
    # whether seeds are shared luck: the seed on which dense ends highest, and how many other methods end
    # highest on it too; Muon's range beside dense's
    by_seed = runs.pivot_table(index="seed", columns="method", values="final_val_loss")
    if len(by_seed) > 1:
        worst = by_seed.idxmax()
        others = [m for m in by_seed.columns if m != BASELINE and by_seed[m].notna().all()]
        out[f"{p}DenseWorstSeed"] = str(int(worst[BASELINE]))
        out[f"{p}SameWorst"] = f"{sum(worst[m] == worst[BASELINE] for m in others)} of {len(others)}"
    if "muon" in spread.index:
        out[f"{p}MuonSpread"] = fmt_num(spread["muon"], 3)
    out[f"{p}DenseSpread"] = fmt_num(spread[BASELINE], 2)
    out.update(_optimism(runs, st.meta["picking_seeds"], p))
    w = st.tables["workers"]
    if not w.empty:  # eager DiLoCo against DiLoCo with the grid's workers (row 0) and fewer (row 1)
        grid, few = w.iloc[0], w.iloc[1]
        out[f"{p}EagerGapSeeds"], out[f"{p}FewWorkers"] = str(int(grid["seeds"])), str(int(few["workers"]))
        for r, tag in ((grid, ""), (few, "Few")):
            out[f"{p}Eager{tag}Loss"], out[f"{p}Diloco{tag}Loss"] = fmt_num(r["eager"], 3), fmt_num(r["diloco"], 3)
            out[f"{p}EagerGap{tag}"] = fmt_num(r["gap"], 2)
        narrower = few["gap"] < grid["gap"] and few["p"] < 0.05
        out[f"{p}EagerGapVerdict"] = (
            f"significantly narrower with fewer workers (paired over the seeds, p = {fmt_num(few['p'], 2)}), as the "
            "stale share predicts" if narrower else
            f"not significantly narrower (paired over the seeds, p = {fmt_num(few['p'], 2)}): the stale share alone "
            "does not explain it")
    never = [m for m in ms.index if ms.loc[m, "arrived@10"] == 0]
    out[f"{p}Never"] = escape(", ".join(never)) or "none"
    out[f"{p}EndsHigher"] = escape(", ".join(m for m in ms.index if not ms.loc[m, "as_low_as_dense"])) or "none"
    return out


def _ends(m: pd.Series, dense: pd.Series) -> str:
    """How method ``m``'s final loss compares with dense's, in words: as low, higher but not significantly so over
    its seeds (with p), or higher."""
    if m["final_mean"] <= dense["final_mean"]:
        return "ends as low as dense"
    if not m["p_vs_dense"] < 0.05:
        p = f", p = {fmt_num(m['p_vs_dense'], 2)}" if math.isfinite(m["p_vs_dense"]) else ""
        return f"ends higher than dense but not significantly so over {int(m['seeds'])} seeds{p}"
    return "ends higher than dense"


def _fmt_ttt(median: float, arrived: int, n: int) -> str:
    return f"{fmt_duration(median) if math.isfinite(median) else 'never'} ({arrived}/{n})"


def table(st: Stats) -> str:
    """Per method: final validation loss (equal tokens), loss at equal time and censored time to target at
    10 Mbit/s and 1 Gbit/s, bytes per run."""
    rows = []
    for _, r in st.tables["methods"].iterrows():
        n = int(r["seeds"])
        sd = "" if not math.isfinite(r["final_std"]) else f" $\\pm$ {fmt_num(r['final_std'], 2)}"
        rows.append([escape(r["method"]), f"{fmt_num(r['final_mean'], 3)}{sd}",
                     fmt_num(r["loss_at_equal_time@10"], 3), _fmt_ttt(r["ttt_median_s@10"], r["arrived@10"], n),
                     fmt_num(r["loss_at_equal_time@1000"], 3),
                     _fmt_ttt(r["ttt_median_s@1000"], r["arrived@1000"], n),
                     fmt_num(r["bytes_total_mean"] / 1e9, 3)])
    cap = (f"Language model near convergence ({st.meta['where']}; {escape(st.meta['source'])}"
           + (f", {st.meta['provenance']}" if st.meta.get("provenance") else
              f", measured {', '.join(st.meta['dates'])}" if st.meta["dates"] else "")
           + f"): gpt-mini, {st.meta['workers']} workers, {st.meta['steps']} steps, every method at its tuned values, "
           f"{st.meta['seeds']} seeds. Final validation loss (nats/char, mean $\\pm$ std: equal tokens); loss at "
           f"equal wall-clock time (when the fastest whole run ends at that link); median time to "
           f"{fmt_num(st.meta['target'], 3)} over all seeds (arrivals/seeds; never: most seeds never arrived); "
           "GB sent by all workers in the run.")
    return booktabs(rows, ["method", "final loss", "loss @T, 10M", "to target, 10M", "loss @T, 1G",
                           "to target, 1G", "GB"], cap, "tab:e9lmc")


def figure(st: Stats):
    """Validation loss against virtual time at 10 Mbit/s, mean over seeds, one line per method; the target."""
    fig, ax = plt.subplots(figsize=(7.0, 3.6))
    mets, lat = st.tables["metrics"], st.meta["latency_ms"]
    runs = st.tables["runs"]
    for method, g in runs.groupby("method", sort=False):
        curves = []
        for run in g["run"]:
            ev = eval_lines(mets[mets["run"] == run], "val_loss")
            curves.append(pd.Series(ev["val_loss"].to_numpy(), index=retime(ev, 10.0, lat).to_numpy()))
        c = pd.concat(curves, axis=1).sort_index().interpolate(limit_area="inside").mean(axis=1)
        ax.plot(c.index, c.to_numpy(), lw=1.0, label=method, ls="-" if method == BASELINE else "--")
    ax.axhline(st.meta["target"], color="k", lw=0.6, ls=":")
    ax.set_xscale("log")
    ax.set_xlabel("virtual time at 10 Mbit/s (s)")
    ax.set_ylabel("validation loss (nats/char)")
    ax.set_ylim(top=min(4.2, float(ax.get_ylim()[1])))
    ax.legend(fontsize=5, ncol=3)
    fig.tight_layout()
    return fig


def sweep_latex(st: Stats) -> str | None:
    """The appendix table: every sweep point's final and best validation loss, the picked values marked (None
    without sweep runs)."""
    t = st.tables["sweep"]
    if t.empty:
        return None
    def outer(r: pd.Series, k: str) -> str:  # blank where the method has no outer step (or the run predates k)
        return fmt_num(r[k], 2) if k in r and math.isfinite(r[k]) else ""

    rows = [[escape(r["method"]), escape(r["knob"].replace("_", " ")), fmt_num(r["lr"], 3), outer(r, "outer_lr"),
             outer(r, "outer_momentum"), fmt_num(r["final_val_loss"], 3), fmt_num(r["best_val_loss"], 3),
             "$\\checkmark$" if r["picked"] else ""] for _, r in t.iterrows()]
    header = ["method", "point", "lr", "outer lr", "outer mom.", "final", "best", "picked"]
    caption = ("The language model's recorded sweep (seed 0"
               + (f"; {st.meta['sweep_provenance']}" if st.meta.get("sweep_provenance") else "")
               + "): final and best validation loss of each point (joint: each knob's best one-knob value "
               "combined); each method's picked point, its lowest on this seed, marked; a method whose "
               "one-knob pick sat at the largest or smallest value its grid tried is named in the text"
               + ("; Table~\\ref{tab:e9lmc-confirm} says which inner learning rate the held-out seeds kept."
                  if not st.tables["confirm"].empty else "."))
    pages = page_rows(rows, list(t["method"]), SWEEP_ROWS_PER_PAGE)
    return "\n".join(booktabs(page, header, caption if i == 0 else
                               f"The language model's recorded sweep, continued ({i + 1} of {len(pages)}).",
                               "tab:e9lmc-sweep" if i == 0 else f"tab:e9lmc-sweep-{i + 1}", size="\\footnotesize")
                      for i, page in enumerate(pages)) + _confirm_latex(st)


def _confirm_latex(st: Stats) -> str:
    """The held-out check of each inner-lr pick (empty without confirmation runs)."""
    t = st.tables["confirm"]
    if t.empty:
        return ""
    held = ", ".join(str(s) for s in st.meta["held_out"])
    def num(v: float, d: int) -> str:
        return fmt_num(v, d) if math.isfinite(v) else "--"

    rows = [[escape(r["method"]), num(r["pick_lr"], 3), num(r["pick_mean"], 3), num(r["alt_lr"], 3),
             num(r["alt_mean"], 3),
             "; ".join(f"{fmt_num(lr, 3)}: {num(v, 3)}" for lr, v in r["beyond"].items()) or "--",
             num(r["lr"], 3) + (" (changed)" if r["changed"] else "")] for _, r in t.iterrows()]
    return "\n" + booktabs(rows, ["method", "seed-0 pick lr", "held-out loss", "runner-up lr", "held-out loss",
                                   "beyond the edge lr: loss", "kept lr"],
                           f"Each inner learning rate picked on seed 0 against the runner-up of its sweep, both at the "
                           f"method's other picked values, on seeds {held}, which the sweep never ran"
                           + (f" ({st.meta['confirm_provenance']})" if st.meta.get("confirm_provenance") else "")
                           + ": mean final validation loss over those seeds; where the lower sat at the end of every "
                           "inner learning rate the method tried, half or twice it ran on the same seeds (beyond the "
                           "edge; again, up to two rounds, where that one ended lowest); the lowest is kept (ties: "
                           "the pick), and the tuned runs are at the kept value (-- : none, or held-out runs missing).",
                           "tab:e9lmc-confirm")


E9LMC = Experiment("e9lmc", "E9 the language model near convergence, each method tuned", stats, numbers, table,
                   figure, "no e9_lmc runs (the lm_evidence profile) and none stored in paper/measured/lm",
                   appendix=sweep_latex)
