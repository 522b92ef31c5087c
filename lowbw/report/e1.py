"""E1 -- collectives on rate-limited links (``runs/bench/collectives.json``): measured time against the
calibrated alpha-beta model and the bandwidth-optimal bound ``2 (N-1)/N M beta``."""

from __future__ import annotations

from lowbw.algorithms import ALLREDUCE_ALGORITHMS
from lowbw.report.build import Context, Experiment, Stats
from lowbw.report.common import plotting
from lowbw.report.latex import booktabs, escape, fmt_num

__all__ = ["E1", "ALG_ORDER"]

ALG_ORDER = list(ALLREDUCE_ALGORITHMS)  # the plotting order
BOUND_RATE_MBIT = 100  # the ring-vs-bound numbers: this link rate ...
BOUND_MIN_SIZE_MB = 10  # ... and messages at least this large
TOLERANCE = 0.10  # the model's error is "within" at |err| <= 10 %
SETTING = ["workers", "rate_mbit", "size_mb"]


def stats(ctx: Context) -> Stats | None:
    """Tidy ``settings``: one row per measured (algorithm, workers, rate, size), median over repetitions."""
    import pandas as pd

    b = ctx.bench("collectives")
    if not b or not b.get("rows"):
        return None
    df = pd.DataFrame(b["rows"])
    df = df[df["ok"] & df["time_s"].notna()]
    cols = ["algorithm", *SETTING, "time_s", "model_s", "model_rel_err", "frac_of_bound", "timing", "emulation"]
    df = df[[c for c in cols if c in df]].reset_index(drop=True)
    return Stats({"settings": df}, {"source": "runs/bench/collectives.json", "provenance": b.get("provenance"),
                                    "emulation": ", ".join(sorted(set(df["emulation"]))),
                                    "table_workers": int(df["workers"].max()),
                                    "table_size_mb": float(df["size_mb"].max())})


def numbers(st: Stats) -> dict[str, str]:
    df = st.tables["settings"]
    out = {"EOneBoundRate": fmt_num(BOUND_RATE_MBIT), "EOneBoundMinSize": fmt_num(BOUND_MIN_SIZE_MB),
           "EOneTolerance": fmt_num(100 * TOLERANCE)}
    ring = df[df["algorithm"] == "ring"]
    native = df[df["algorithm"] == "native"]
    r100 = ring[(ring["rate_mbit"] == BOUND_RATE_MBIT) & (ring["size_mb"] >= BOUND_MIN_SIZE_MB)]
    if not r100.empty:
        out["EOneRingBoundFracMin"] = fmt_num(100 * r100["frac_of_bound"].min(), 3)
        out["EOneRingBoundFracMean"] = fmt_num(100 * r100["frac_of_bound"].mean(), 3)
    merged = ring.merge(native, on=SETTING, suffixes=("_ring", "_native"))
    merged = merged[merged["timing_native"] == "measured"] if "timing_native" in merged else merged
    if not merged.empty:
        ratio = merged["time_s_ring"] / merged["time_s_native"]
        out["EOneRingOverNativeMedian"] = fmt_num(float(ratio.median()), 3)
        out["EOneRingOverNativeMax"] = fmt_num(float(ratio.max()), 3)
    err = df["model_rel_err"].dropna().abs()
    if not err.empty:
        out["EOneModelErrMedian"] = fmt_num(100 * float(err.median()), 2)
        out["EOneModelErrMax"] = fmt_num(100 * float(err.max()), 2)
        out["EOneModelWithinTen"] = fmt_num(100 * float((err <= TOLERANCE).mean()), 3)
        by_alg = df.assign(abs_err=df["model_rel_err"].abs()).groupby("algorithm")["abs_err"].max().dropna()
        out["EOneModelWorstAlg"] = escape(str(by_alg.idxmax()))
        out["EOneModelWorstAlgErr"] = fmt_num(100 * float(by_alg.max()), 2)
        out["EOneModelAlgsWithinTen"] = str(int((by_alg <= TOLERANCE).sum()))
        out["EOneModelAlgs"] = str(int(len(by_alg)))
    winners = (df.loc[df.groupby(SETTING)["time_s"].idxmin()].groupby("algorithm").size()
               .sort_values(ascending=False))
    out["EOneSettings"] = str(int(df.groupby(SETTING).ngroups))
    out["EOneTopWinner"] = escape(winners.index[0])
    out["EOneTopWinnerCount"] = str(int(winners.iloc[0]))
    out["EOneEmulation"] = escape(st.meta["emulation"])
    return out


def table(st: Stats) -> str:
    df, n, size = st.tables["settings"], st.meta["table_workers"], st.meta["table_size_mb"]
    sub = df[(df["workers"] == n) & (df["size_mb"] == size)]
    rates = sorted(sub["rate_mbit"].unique())
    rows = []
    for alg in [a for a in ALG_ORDER if a in set(sub["algorithm"])]:
        cells = [escape(alg)]
        for r in rates:
            x = sub[(sub["algorithm"] == alg) & (sub["rate_mbit"] == r)]
            cells += (["--", "--"] if x.empty else
                      [fmt_num(x["time_s"].iloc[0], 3), fmt_num(100 * x["frac_of_bound"].iloc[0], 3)])
        rows.append(cells)
    header = ["Algorithm"] + [h for r in rates for h in (f"{fmt_num(r)} Mbit/s: s", r"\% bound")]
    return booktabs(rows, header,
                    f"All-reduce of {fmt_num(size)}\\,MB among {n} workers on shaped links ({st.meta['emulation']}): "
                    r"median measured time and its share of the bandwidth-optimal bound $2\frac{N-1}{N}M\beta$.",
                    "tab:e1", size=r"\scriptsize")


def figure(st: Stats):
    df, n, size = st.tables["settings"], st.meta["table_workers"], st.meta["table_size_mb"]
    plt, sns = plotting()
    fig, axes = plt.subplots(1, 2, figsize=(7.2, 2.6))
    d = df[df["workers"] == n]
    sns.lineplot(data=d[d["size_mb"] == size], x="rate_mbit", y="time_s", hue="algorithm", marker="o",
                 hue_order=[a for a in ALG_ORDER if a in set(d["algorithm"])], ax=axes[0])
    axes[0].set(xscale="log", yscale="log", xlabel="link rate (Mbit/s)", ylabel="all-reduce time (s)",
                title=f"N={n}, {fmt_num(size)} MB")
    axes[0].legend(fontsize=6, ncol=2)
    ok = df[df["model_s"].notna()]
    axes[1].scatter(ok["time_s"], ok["model_s"], s=8, alpha=0.7)
    lim = [ok[["time_s", "model_s"]].min().min() * 0.8, ok[["time_s", "model_s"]].max().max() * 1.2]
    axes[1].plot(lim, lim, "k--", lw=0.8)
    axes[1].set(xscale="log", yscale="log", xlabel="measured (s)", ylabel="calibrated model (s)",
                title="model vs measurement, all settings")
    return fig


E1 = Experiment("e1", "E1 collectives", stats, numbers, table, figure, "runs/bench/collectives.json absent")
