"""E4 -- compression in training: the final quality per compressor and virtual time to the target at every
report bandwidth (each run re-timed, lowbw.report.training.retime), on two workloads: the MLP on MNIST
(``runs/e4_compression``, key ``e4``) and the character-level GPT on Tiny Shakespeare (``runs/e4_lm``, key
``e4lm``), which also says whether the ranking of the methods carries over from one workload to the other."""

from __future__ import annotations

import math
from functools import partial

import pandas as pd
from scipy.stats import spearmanr

from lowbw.report.catalog import PREFIX
from lowbw.report.common import fmt_duration, report_links, training_runs
from lowbw.report.experiment import Context, Experiment, MissingData, Stats
from lowbw.report.figures import ttt_facets
from lowbw.report.goal import goal_of
from lowbw.report.latex import booktabs, escape, fmt_num
from lowbw.report.stats import MIN_CORRELATION_METHODS, mean_std
from lowbw.report.training import group_accuracy, group_times, require_baseline, run_times, ttt_cell
from lowbw.workflow.store import ANCHOR_STORE, load_store

__all__ = ["E4", "E4LM"]

BASELINE = "dense"  # the method every other is compared with
RUNS = {"e4": "e4_compression", "e4lm": "e4_lm"}  # experiment key -> its runs
# gpt-small dense at nanoGPT's CPU recipe (medium profile) and the validation loss nanoGPT's README reports for it
ANCHOR_RUNS, ANCHOR_PUBLISHED, ANCHOR_TOLERANCE = "e4_lm_anchor", 1.88, 0.05


def stats(ctx: Context, key: str = "e4") -> Stats | None:
    """Tidy ``accuracy`` (one row per method: the final quality), ``times`` (per method and bandwidth) and
    ``runs`` (per run and bandwidth: ttt_s, NaN where the run never reached the target); for the language model
    also ``ranks`` (per method present in both workloads: its time to target at the focus bandwidth on each)."""
    runs, mets = training_runs(ctx, [RUNS[key]])
    if runs is None:
        return None
    require_baseline(runs, {"method": BASELINE}, f"runs/{RUNS[key]}")
    mbits, lat, focus = report_links(ctx)
    goal = goal_of(ctx.config, runs)
    per_run = run_times(runs, mets, ["method"], goal.target, mbits, lat)
    tables = {"accuracy": group_accuracy(runs, ["method"], {"method": BASELINE}, goal.metric),
              "times": group_times(per_run, ["method"]), "runs": per_run}
    if key == "e4lm":
        try:
            other = stats(ctx, "e4")
        except MissingData:  # the MLP's runs lack their baseline: no ranking to compare, the rest stands
            other = None
        if other is not None:
            tables["ranks"] = _ranks(tables["times"], other.tables["times"], focus)
        anchor, _ = training_runs(ctx, [ANCHOR_RUNS])
        if anchor is None:  # the medium profile's runs, kept in the repository (python -m lowbw store add --cpu)
            kept = load_store(ANCHOR_STORE)
            anchor = kept if not kept.empty else None
            if anchor is not None:
                ctx.read_store("anchor")
        if anchor is not None:
            tables["anchor"] = anchor[["run", "seed", "model", "steps", "final_val_loss", "best_val_loss"]]
    return Stats(tables, {"source": f"runs/{RUNS[key]}", "key": key, "goal": goal, "target": goal.target.value,
                          "metric": goal.metric, "focus_mbit": focus, "latency_ms": lat,
                          "seeds": int(runs["seed"].nunique()), "workers": int(runs["workers"].iloc[0]),
                          "baseline": BASELINE})


def _ranks(lm, mlp, focus: float):
    """Methods whose every seed reached the target on both workloads at ``focus`` Mbit/s: mean ttt on each."""
    def at(t):
        t = t[(t["bandwidth_mbit"] == focus) & (t["seeds_reached"] == t["seeds"])]
        return t.set_index("method")["ttt_mean_s"]

    a, b = at(lm), at(mlp)
    both = [m for m in a.index if m in b.index]
    return pd.DataFrame({"method": both, "ttt_lm_s": [float(a[m]) for m in both],
                         "ttt_mlp_s": [float(b[m]) for m in both]})


def _at(st: Stats, mbit: float):
    t = st.tables["times"]
    return t[t["bandwidth_mbit"] == mbit].set_index("method")


def numbers(st: Stats) -> dict[str, str]:
    p, goal, q = PREFIX[st.meta["key"]], st.meta["goal"], st.meta["metric"]
    acc = st.tables["accuracy"].set_index("method")
    n, focus = st.meta["seeds"], st.meta["focus_mbit"]
    at = _at(st, focus)
    dense_t = at.loc[BASELINE, "ttt_mean_s"]
    out = {f"{p}Target": goal.fmt(goal.target.value), f"{p}Focus": fmt_num(focus),
           f"{p}Seeds": str(n), f"{p}TttDense": fmt_duration(dense_t)}
    reached = at[at["seeds_reached"] == n]
    if not reached.empty:
        best = reached["ttt_mean_s"].idxmin()
        out[f"{p}Best"] = escape(best)
        out[f"{p}BestTtt"] = fmt_duration(reached.loc[best, "ttt_mean_s"])
        out[f"{p}BestSpeedup"] = fmt_num(dense_t / reached.loc[best, "ttt_mean_s"], 3)
    base = acc.loc[BASELINE, f"{q}_mean"]
    worse_than_dense = acc[f"{q}_mean"] < base if goal.higher_is_better else acc[f"{q}_mean"] > base
    worse = acc[(acc.index != BASELINE) & acc["significant"] & worse_than_dense]
    out[f"{p}SigWorse"] = str(len(worse))
    out[f"{p}SigWorseList"] = escape(", ".join(worse.index)) or "none"
    out[f"{p}Never"] = escape(", ".join(at.index[at["seeds_reached"] == 0])) or "none"
    # "fastest" counts only methods every seed of which reached the target: the others are named with how many
    # did and their median over all seeds (a seed that never arrived counts as the slowest), never a mean of
    # the arrivals alone
    partial = at[(at["seeds_reached"] > 0) & (at["seeds_reached"] < n)]
    if not partial.empty:
        out[f"{p}Partial"] = "; ".join(
            f"{escape(m)} ({int(r['seeds_reached'])} of {n} seeds, "
            + (f"median {fmt_duration(r['ttt_median_s'])})" if math.isfinite(r["ttt_median_s"]) else "median never)")
            for m, r in partial.iterrows())
    per_bw = []
    for mb in st.tables["times"]["bandwidth_mbit"].unique():  # the config's order
        ok = _at(st, mb)
        ok = ok[ok["seeds_reached"] == n]
        if not ok.empty:
            per_bw.append(f"{fmt_num(mb)}\\,Mbit/s: {escape(ok['ttt_mean_s'].idxmin())}")
    if per_bw:
        out[f"{p}BestPerMbit"] = "; ".join(per_bw)
    if st.meta["key"] == "e4lm":
        out[f"{p}DenseLoss"] = goal.fmt(base)
        out.update(_rank_numbers(p, st.tables.get("ranks")))
        out.update(_anchor_numbers(p, st.tables.get("anchor")))
    return out


def _anchor_numbers(p: str, anchor) -> dict[str, str]:
    """The anchor's final validation loss over its seeds against nanoGPT's published one, and whether it lies
    within the tolerance (words chosen here, so the prose cannot contradict the number)."""
    if anchor is None or anchor.empty:
        return {}

    ms = mean_std(anchor["final_val_loss"])
    gap = ms.mean - ANCHOR_PUBLISHED
    within = abs(gap) <= ANCHOR_TOLERANCE
    return {f"{p}AnchorLoss": fmt_num(ms.mean, 3) + (f" $\\pm$ {fmt_num(ms.std, 2)}" if ms.n > 1 else ""),
            f"{p}AnchorSeeds": str(ms.n), f"{p}AnchorGap": f"{gap:+.3f}",
            f"{p}AnchorVerdict": ("within" if within else "outside") + f" the {fmt_num(ANCHOR_TOLERANCE)} we allow"}


def _rank_numbers(p: str, ranks) -> dict[str, str]:
    """Spearman's rank correlation of the methods' times to target on the two workloads, and the fastest on
    each (among the methods both measured to the target with every seed); no claim over fewer than
    :data:`~lowbw.report.stats.MIN_CORRELATION_METHODS` methods."""
    if ranks is None or len(ranks) < MIN_CORRELATION_METHODS:
        return {}

    rho = float(spearmanr(ranks["ttt_lm_s"], ranks["ttt_mlp_s"]).statistic)
    lm = ranks.loc[ranks["ttt_lm_s"].idxmin(), "method"]
    mlp = ranks.loc[ranks["ttt_mlp_s"].idxmin(), "method"]
    return {f"{p}RankCorr": fmt_num(rho, 2) if math.isfinite(rho) else "--", f"{p}RankMethods": str(len(ranks)),
            f"{p}RankSame": "the same method" if lm == mlp else f"{escape(lm)} here but {escape(mlp)} on the MLP"}


def _ttt_cell(r, n: int) -> str:
    return ttt_cell(r)


def table(st: Stats) -> str:
    acc, goal, q = st.tables["accuracy"], st.meta["goal"], st.meta["metric"]
    n = st.meta["seeds"]
    mbits = list(st.tables["times"]["bandwidth_mbit"].unique())
    dense_bytes = acc.set_index("method").loc[BASELINE, "bytes_per_worker_step"]
    rows = []
    for _, r in acc.iterrows():
        sig = r"$^{*}$" if r["method"] != BASELINE and r["significant"] else ""
        rows.append([escape(r["method"]),
                     goal.fmt(r[f"{q}_mean"]) + r" $\pm$ " + goal.fmt(r[f"{q}_std"], 2) + sig,
                     fmt_num(dense_bytes / max(r["bytes_per_worker_step"], 1), 3)]
                    + [_ttt_cell(_at(st, mb).loc[r["method"]], n) for mb in mbits])
    header = ["Method", goal.label, "Comp."] + [f"{fmt_num(m)} Mbit/s" for m in mbits]
    return booktabs(rows, header,
                    f"Compression in training ({goal.workload}, {st.meta['workers']} workers, sim backend, {n} "
                    f"seeds): final {goal.label.lower()} (mean $\\pm$ std; $^*$: differs from dense, Welch "
                    f"$p<0.05$), compression of the bytes sent per step, and virtual time to {goal.words} at each "
                    "bandwidth ((k/n): only k of n seeds reached it).", f"tab:{st.meta['key']}",
                    size=r"\scriptsize")


def figure(st: Stats):
    acc, goal = st.tables["accuracy"], st.meta["goal"]
    return ttt_facets(st.tables["runs"], acc, "method", BASELINE, list(acc["method"]), goal)


E4 = Experiment("e4", "E4 compression in training", partial(stats, key="e4"), numbers, table, figure,
                "no e4_compression runs")
E4LM = Experiment("e4lm", "E4 compression in training, language model", partial(stats, key="e4lm"), numbers,
                  table, figure, "no e4_lm runs")
