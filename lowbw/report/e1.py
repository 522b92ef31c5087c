"""E1 -- collectives on rate-limited links (``runs/bench/collectives.json``): measured time against the
calibrated alpha-beta model and the bandwidth-optimal bound ``2 (N-1)/N M beta``; and its latency axis
(``runs/bench/collectives_latency.json``, :mod:`lowbw.report.e1_latency`): time against message size at
several link delays, the measured and the predicted crossover between latency- and bandwidth-bound
algorithms. Either file alone is enough; the paper says which is missing (``EOneNotRun``,
``EOneLatNotRun``)."""

from __future__ import annotations

import pandas as pd
from matplotlib.ticker import NullFormatter

from lowbw.comm.algorithms import ALLREDUCE_ALGORITHMS
from lowbw.net.linkemu import MAX_TOTAL_BPS
from lowbw.report import e1_exchange as exch
from lowbw.report import e1_latency as lat
from lowbw.report.common import plotting
from lowbw.report.conditions import MARK, busy_testbeds, caption
from lowbw.report.experiment import Context, Experiment, Stats
from lowbw.report.latex import booktabs, escape, fmt_num

__all__ = ["E1", "ALG_ORDER"]

ALG_ORDER = list(ALLREDUCE_ALGORITHMS)  # the plotting order
BOUND_RATE_MBIT = 100  # the ring-vs-bound numbers: this link rate ...
BOUND_MIN_SIZE_MB = 10  # ... and messages at least this large
TOLERANCE = 0.10  # the model's error is "within" at |err| <= 10 %
SETTING = ["workers", "rate_mbit", "size_mb"]


def stats(ctx: Context) -> Stats | None:
    """Tidy ``settings``: one row per measured (algorithm, workers, rate, size), median over repetitions; and
    the latency axis' tables (``latency``, ``latency_cells``, ``latency_skipped``) where it was measured."""
    b = ctx.bench("collectives")
    lb = ctx.bench(lat.SOURCE)
    xb = ctx.bench(exch.SOURCE)  # the packed exchange: numbers only
    lt = lat.latency_tables(lb) if lb else None
    cols = ["algorithm", *SETTING, "time_s", "model_s", "model_rel_err", "frac_of_bound", "timing", "emulation",
            "busy"]
    if b and b.get("rows"):
        df = pd.DataFrame(b["rows"])
        df = df[df["ok"] & df["time_s"].notna()]
        busy = busy_testbeds(b)  # the cell's testbed measured while the machine was busy
        df = df.assign(busy=[busy.get((int(r["workers"]), float(r["rate_mbit"]), float(r.get("delay_ms") or 0)),
                                      False) for _, r in df.iterrows()])
        df = df[[c for c in cols if c in df]].reset_index(drop=True)
    else:
        df = pd.DataFrame(columns=cols)
    if df.empty and lt is None:  # the packed exchange alone makes no E1 (its NotRun: lowbw.report.catalog)
        return None
    meta: dict = {"exchange": xb, "source": "runs/bench/collectives.json" if not df.empty else None,
                  "provenance": (b or {}).get("provenance"), "conditions": (b or {}).get("conditions")}
    if not df.empty:
        meta.update(emulation=", ".join(sorted(set(df["emulation"]))), table_workers=int(df["workers"].max()),
                    table_size_mb=float(df["size_mb"].max()))
    tables = {"settings": df}
    if lt is not None:
        tables.update(lt)
        beds = lb.get("testbeds", [])
        loads = [x for t in beds for x in (t.get("loadavg_before"), t.get("loadavg_after")) if x is not None]
        meta.update(latency_source=f"runs/bench/{lat.SOURCE}.json", latency_provenance=lb.get("provenance"),
                    latency_conditions=lb.get("conditions"),
                    emulator_limit_mbit=MAX_TOTAL_BPS / 1e6, load_max=max(loads, default=float("nan")),
                    late_starts=int(lt["latency"]["late_starts"].fillna(0).sum())
                    if "late_starts" in lt["latency"] else 0,
                    latency_elapsed_s=lb.get("elapsed_s"))
    return Stats(tables, meta)


def numbers(st: Stats) -> dict[str, str]:
    out = {"EOneTolerance": fmt_num(100 * TOLERANCE)}
    if st.meta.get("exchange"):
        out.update(exch.exchange_numbers(st.meta["exchange"]))
    else:
        out["EOneExchNotRun"] = escape(f"runs/bench/{exch.SOURCE}.json absent")
    if "latency" in st.tables:
        out.update(lat.latency_numbers(st.tables, st.meta))
    else:
        out["EOneLatNotRun"] = escape(f"runs/bench/{lat.SOURCE}.json absent")
    if not st.tables["settings"].empty:
        out.update(_rate_numbers(st))
    return out


def _rate_numbers(st: Stats) -> dict[str, str]:
    df = st.tables["settings"]
    out = {"EOneBoundRate": fmt_num(BOUND_RATE_MBIT), "EOneBoundMinSize": fmt_num(BOUND_MIN_SIZE_MB)}
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
    """The rate axis' table (``tab:e1``) and, where measured, the latency axis' (``tab:e1lat``)."""
    parts = [] if st.tables["settings"].empty else [_rate_table(st)]
    if "latency" in st.tables:
        parts.append(lat.latency_table(st.tables, st.meta.get("latency_conditions"),
                                       st.meta.get("latency_provenance")))
    return "\n".join(parts)


def _rate_table(st: Stats) -> str:
    df, n, size = st.tables["settings"], st.meta["table_workers"], st.meta["table_size_mb"]
    sub = df[(df["workers"] == n) & (df["size_mb"] == size)]
    rates = sorted(sub["rate_mbit"].unique())
    rows, marked = [], 0
    for alg in [a for a in ALG_ORDER if a in set(sub["algorithm"])]:
        cells = [escape(alg)]
        for r in rates:
            x = sub[(sub["algorithm"] == alg) & (sub["rate_mbit"] == r)]
            busy = not x.empty and bool(x["busy"].iloc[0]) if "busy" in x else False
            marked += busy
            cells += (["--", "--"] if x.empty else
                      [fmt_num(x["time_s"].iloc[0], 3) + (MARK if busy else ""),
                       fmt_num(100 * x["frac_of_bound"].iloc[0], 3)])
        rows.append(cells)
    header = ["Algorithm"] + [h for r in rates for h in (f"{fmt_num(r)} Mbit/s: s", r"\% bound")]
    return booktabs(rows, header,
                    f"All-reduce of {fmt_num(size)}\\,MB among {n} workers on shaped links ({st.meta['emulation']}): "
                    r"median measured time and its share of the bandwidth-optimal bound $2\frac{N-1}{N}M\beta$."
                    + caption(st.meta.get("conditions"), st.meta.get("provenance"), marked),
                    "tab:e1", size=r"\scriptsize")


def figure(st: Stats):
    """Top row: the rate axis (time against link rate at the largest N and size; model against measurement)
    and the latency axis' crossovers; below, the latency axis' small multiples (rates x worker counts)."""
    plt, sns = plotting()
    has_rate, has_lat = not st.tables["settings"].empty, "latency" in st.tables
    if not has_lat:
        fig, axes = plt.subplots(1, 2, figsize=(7.2, 2.6))
        _rate_axes(st, axes[0], axes[1], sns)
        return fig
    rows = st.tables["latency"]["rate_mbit"].nunique()
    fig = plt.figure(figsize=(7.2, 2.5 + 2.1 * rows))
    gs = fig.add_gridspec(2, 1, height_ratios=[2.5, 2.1 * rows], hspace=0.3)
    top = gs[0].subgridspec(1, 3, wspace=0.5)  # room for each panel's y label beside the previous one's ticks
    if has_rate:
        _rate_axes(st, fig.add_subplot(top[0]), fig.add_subplot(top[1]), sns)
    lat.crossover_axis(fig.add_subplot(top[2]), st.tables)
    lat.latency_axes(fig, gs[1], st.tables)
    return fig


def _rate_axes(st: Stats, ax0, ax1, sns) -> None:
    df, n, size = st.tables["settings"], st.meta["table_workers"], st.meta["table_size_mb"]
    d = df[df["workers"] == n]
    sns.lineplot(data=d[d["size_mb"] == size], x="rate_mbit", y="time_s", hue="algorithm", marker="o",
                 hue_order=[a for a in ALG_ORDER if a in set(d["algorithm"])], ax=ax0)
    ax0.set(xscale="log", yscale="log", xlabel="link rate (Mbit/s)", ylabel="all-reduce time (s)",
            title=f"N={n}, {fmt_num(size)} MB")
    # one column in the lower left: the lines fall from upper left to lower right, and two columns covered them
    ax0.legend(fontsize=5, ncol=1, loc="lower left", labelspacing=0.15, handlelength=1.2, borderaxespad=0.2)
    ok = df[df["model_s"].notna()]
    ax1.scatter(ok["time_s"], ok["model_s"], s=8, alpha=0.7)
    lim = [ok[["time_s", "model_s"]].min().min() * 0.8, ok[["time_s", "model_s"]].max().max() * 1.2]
    ax1.plot(lim, lim, "k--", lw=0.8)
    ax1.set(xscale="log", yscale="log", xlabel="measured (s)", ylabel="calibrated model (s)",
            title="model vs measurement, all settings")

    for ax in (ax0, ax1):
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.yaxis.set_minor_formatter(NullFormatter())


E1 = Experiment("e1", "E1 collectives", stats, numbers, table, figure,
                "runs/bench/collectives.json and runs/bench/collectives_latency.json absent")
