"""E4 -- compression in training (``runs/e4_compression``): final accuracy per compressor and virtual time
to the target accuracy at every report bandwidth (each run re-timed, lowbw.report.training.retime)."""

from __future__ import annotations

from lowbw.report.common import fmt_duration, report_links, target_acc, training_runs
from lowbw.report.experiment import Context, Experiment, Stats
from lowbw.report.figures import ttt_facets
from lowbw.report.latex import booktabs, escape, fmt_num

__all__ = ["E4"]

BASELINE = "dense"  # the method every other is compared with


def stats(ctx: Context) -> Stats | None:
    """Tidy ``accuracy`` (one row per method), ``times`` (per method and bandwidth) and ``runs`` (per run and
    bandwidth: ttt_s, NaN where the run never reached the target)."""
    from lowbw.report.training import group_accuracy, group_times, run_times

    runs, mets = training_runs(ctx, ["e4_compression"])
    if runs is None:
        return None
    mbits, lat, focus = report_links(ctx)
    target = target_acc(ctx, runs)
    per_run = run_times(runs, mets, ["method"], target, mbits, lat)
    return Stats({"accuracy": group_accuracy(runs, ["method"], {"method": BASELINE}),
                  "times": group_times(per_run, ["method"]), "runs": per_run},
                 {"source": "runs/e4_compression", "target_acc": target, "focus_mbit": focus, "latency_ms": lat,
                  "seeds": int(runs["seed"].nunique()), "workers": int(runs["workers"].iloc[0]),
                  "baseline": BASELINE})


def _at(st: Stats, mbit: float):
    t = st.tables["times"]
    return t[t["bandwidth_mbit"] == mbit].set_index("method")


def numbers(st: Stats) -> dict[str, str]:
    acc = st.tables["accuracy"].set_index("method")
    n, focus = st.meta["seeds"], st.meta["focus_mbit"]
    at = _at(st, focus)
    dense_t = at.loc[BASELINE, "ttt_mean_s"]
    out = {"EFourTarget": fmt_num(100 * st.meta["target_acc"], 3), "EFourFocus": fmt_num(focus),
           "EFourSeeds": str(n), "EFourTttDense": fmt_duration(dense_t)}
    reached = at[at["seeds_reached"] == n]
    if not reached.empty:
        best = reached["ttt_mean_s"].idxmin()
        out["EFourBest"] = escape(best)
        out["EFourBestTtt"] = fmt_duration(reached.loc[best, "ttt_mean_s"])
        out["EFourBestSpeedup"] = fmt_num(dense_t / reached.loc[best, "ttt_mean_s"], 3)
    worse = acc[(acc.index != BASELINE) & acc["significant"] & (acc["test_acc_mean"] < acc.loc[BASELINE,
                                                                                            "test_acc_mean"])]
    out["EFourSigWorse"] = str(len(worse))
    out["EFourSigWorseList"] = escape(", ".join(worse.index)) or "none"
    out["EFourNever"] = escape(", ".join(at.index[at["seeds_reached"] == 0])) or "none"
    per_bw = []
    for mb in st.tables["times"]["bandwidth_mbit"].unique():  # the config's order
        ok = _at(st, mb)
        ok = ok[ok["seeds_reached"] == n]
        if not ok.empty:
            per_bw.append(f"{fmt_num(mb)}\\,Mbit/s: {escape(ok['ttt_mean_s'].idxmin())}")
    if per_bw:
        out["EFourBestPerMbit"] = "; ".join(per_bw)
    return out


def _ttt_cell(r, n: int) -> str:
    k = int(r["seeds_reached"])
    return "--" if k == 0 else fmt_duration(r["ttt_mean_s"]) + ("" if k == n else f" ({k}/{n})")


def table(st: Stats) -> str:
    acc = st.tables["accuracy"]
    n = st.meta["seeds"]
    mbits = list(st.tables["times"]["bandwidth_mbit"].unique())
    dense_bytes = acc.set_index("method").loc[BASELINE, "bytes_per_worker_step"]
    rows = []
    for _, r in acc.iterrows():
        sig = r"$^{*}$" if r["method"] != BASELINE and r["significant"] else ""
        rows.append([escape(r["method"]),
                     fmt_num(100 * r["test_acc_mean"], 3) + r" $\pm$ " + fmt_num(100 * r["test_acc_std"], 2) + sig,
                     fmt_num(dense_bytes / max(r["bytes_per_worker_step"], 1), 3)]
                    + [_ttt_cell(_at(st, mb).loc[r["method"]], n) for mb in mbits])
    header = ["Method", r"Test acc.\ (\%)", "Comp."] + [f"{fmt_num(m)} Mbit/s" for m in mbits]
    return booktabs(rows, header,
                    f"Compression in training (MLP on MNIST, {st.meta['workers']} workers, sim backend, {n} seeds): "
                    f"final test accuracy (mean $\\pm$ std; $^*$: differs from dense, Welch $p<0.05$), compression "
                    f"of the bytes sent per step, and virtual time to {fmt_num(100 * st.meta['target_acc'])}\\,\\% "
                    "test accuracy at each bandwidth ((k/n): only k of n seeds reached it).", "tab:e4",
                    size=r"\scriptsize")


def figure(st: Stats):
    acc = st.tables["accuracy"]
    return ttt_facets(st.tables["runs"], acc, "method", BASELINE, list(acc["method"]),
                      fmt_num(100 * st.meta["target_acc"]))


E4 = Experiment("e4", "E4 compression in training", stats, numbers, table, figure, "no e4_compression runs")
