"""E1's latency axis (``runs/bench/collectives_latency.json``): all-reduce time against message size at
several one-way link delays, measured on the testbed (delay from the userspace link emulator where the
kernel has no netem), against the calibrated alpha-beta model; and where the fastest algorithm changes
from a latency-bound one (few message steps: ps, tree) to a bandwidth-bound one (few bytes per link:
ring, butterfly), measured and predicted.

Crossover of algorithms a and b in one testbed (N, rate, delay): the message size M* where their times
are equal. Predicted: the calibrated model's (:func:`lowbw.net.calibrated.calibrated_time`), solved in
log M by bisection over the measured size range; measured: where log(t_a / t_b) changes sign between two
measured sizes, interpolated linearly in log M. The talk's textbook condition
(:func:`lowbw.net.costmodel.crossover_nbytes` with ``talk=True``, alpha = the measured one-way latency,
the nominal beta)
is listed beside them. The model error is reported over every measured size and over the issue's range
(64 KB to 10 MB) separately; beside it each algorithm's measured software cost per step (the model's
fourth term) and the per-message traces of the heap tree (:func:`trace_table`). These helpers are used by
:mod:`lowbw.report.e1`, which owns E1's files.
"""

from __future__ import annotations

import math
from typing import Any

import matplotlib.pyplot as plt
import pandas as pd
from matplotlib.lines import Line2D
from matplotlib.ticker import NullFormatter

from lowbw.bench.collectives import calibration_key
from lowbw.comm.registry import COLLECTIVES
from lowbw.net.calibrated import TCP_PAYLOAD_PER_FRAME, calibrated_time, model_link
from lowbw.net.costmodel import LinkParams, crossover_nbytes
from lowbw.report.catalog import E1_ALGS
from lowbw.report.conditions import MARK, busy_testbeds, caption
from lowbw.report.latex import booktabs, escape, fmt_num

__all__ = ["SOURCE", "ALGS", "crossing_pair", "latency_tables", "latency_numbers", "latency_table", "latency_axes",
           "crossover_axis", "predicted_crossover", "measured_crossover", "software_table", "trace_table"]

SOURCE = "collectives_latency"  # runs/bench/<SOURCE>.json
ALGS = ["ring", "tree", "ps", "butterfly"]  # the issue's four; their catalogue words: lowbw.report.catalog
TOLERANCE = 0.10
CELL = ["workers", "rate_mbit", "delay_ms"]
LATENCY_BOUND = ("ps", "tree")  # few message steps on the critical path
BANDWIDTH_BOUND = ("ring", "butterfly")  # few bytes per link
MARGIN = 0.05  # a crossover needs each side faster by more than this (relative) at its end of the sizes
ISSUE_MIN_MB, ISSUE_MAX_MB = 0.064, 10.0  # the issue's message range


def predicted_crossover(cal: dict, a: str, b: str, n: int, lo: float, hi: float, chunk: float | None = None
                        ) -> float | None:
    """Bytes in [lo, hi] where the calibrated model's times of ``a`` and ``b`` are equal (None: no sign change
    of their difference at the ends of the range)."""
    def d(m: float) -> float:
        return calibrated_time(cal, a, m, n, chunk) - calibrated_time(cal, b, m, n, chunk)

    x0, x1 = math.log(lo), math.log(hi)
    f0, f1 = d(lo), d(hi)
    if f0 == 0:
        return lo
    if f0 * f1 > 0:
        return None
    for _ in range(60):
        xm = (x0 + x1) / 2
        fm = d(math.exp(xm))
        if f0 * fm <= 0:
            x1 = xm
        else:
            x0, f0 = xm, fm
    return math.exp((x0 + x1) / 2)


def crossing_pair(at_small: dict[str, float], at_large: dict[str, float]) -> tuple[str, str] | None:
    """(latency-bound algorithm, bandwidth-bound algorithm) whose predicted order flips between the smallest
    and the largest size: the faster of ps/tree at the smallest size, the faster of ring/butterfly at the
    largest, each faster than the other by more than ``MARGIN`` there (None: no such flip, e.g. with two
    workers, where every algorithm has the same latency term and only the shapers' bursts tell them apart)."""
    lat_ = [a for a in LATENCY_BOUND if a in at_small and a in at_large]
    bw = [a for a in BANDWIDTH_BOUND if a in at_small and a in at_large]
    if not lat_ or not bw:
        return None
    a = min(lat_, key=at_small.get)
    b = min(bw, key=at_large.get)
    if at_small[a] < (1 - MARGIN) * at_small[b] and at_large[b] < (1 - MARGIN) * at_large[a]:
        return a, b
    return None


def measured_crossover(sizes: list[float], ta: list[float], tb: list[float]) -> tuple[float | None, int]:
    """(bytes of the first sign change of log(ta / tb) over increasing ``sizes``, interpolated in log size;
    how many sign changes there are)."""
    r = [math.log(x / y) for x, y in zip(ta, tb)]
    first, changes = None, 0
    for i in range(1, len(r)):
        if r[i - 1] == 0 or r[i - 1] * r[i] < 0:
            changes += 1
            if first is None:
                f = 0.0 if r[i - 1] == r[i] else r[i - 1] / (r[i - 1] - r[i])
                first = math.exp(math.log(sizes[i - 1]) + f * (math.log(sizes[i]) - math.log(sizes[i - 1])))
    return first, changes


def latency_tables(b: dict) -> dict[str, Any] | None:
    """Tidy tables of the latency bench ``b``: ``latency`` (one row per measured algorithm x setting),
    ``latency_cells`` (one row per testbed: the model's and the measured fastest algorithm at the smallest
    and the largest size, their crossover), ``latency_skipped`` (testbeds not built, and why)."""
    if not b or not b.get("rows"):
        return None
    df = pd.DataFrame(b["rows"])
    df = df[df["ok"] & df["time_s"].notna()].copy()
    if df.empty:
        return None
    df["delay_ms"] = df["delay_ms"].fillna(0).astype(float)
    df["abs_err"] = df["model_rel_err"].abs()
    cols = ["algorithm", *CELL, "size_mb", "nbytes", "time_s", "model_s", "model_rel_err", "abs_err",
            "model_nominal_s", "late_starts", "emulation"]
    df = df[[c for c in cols if c in df]].sort_values([*CELL, "size_mb", "algorithm"]).reset_index(drop=True)
    cells = []
    busy = busy_testbeds(b)
    for (n, rate, delay), g in df.groupby(CELL):
        cal = b.get("calibration", {}).get(calibration_key(int(n), rate, delay))
        piv = g.pivot_table(index="nbytes", columns="algorithm", values="time_s")
        piv = piv[[a for a in ALGS if a in piv.columns]].dropna()
        row: dict[str, Any] = {"workers": int(n), "rate_mbit": rate, "delay_ms": delay,
                               "busy": busy.get((int(n), float(rate), float(delay)), False),
                               "max_abs_err": float(g["abs_err"].max()),
                               "handshake_s": (cal or {}).get("handshake_s"),
                               "alpha_s": (cal or {}).get("fit", {}).get("alpha_s")}
        if cal is None or len(piv) < 2:
            cells.append(row)
            continue
        lo, hi = float(piv.index.min()), float(piv.index.max())
        model_at = {m: {a: calibrated_time(cal, a, m, int(n)) for a in piv.columns} for m in (lo, hi)}
        small, large = (min(model_at[m], key=model_at[m].get) for m in (lo, hi))
        row.update(model_fastest_small=small, model_fastest_large=large,
                   measured_fastest_small=str(piv.loc[lo].idxmin()), measured_fastest_large=str(piv.loc[hi].idxmin()),
                   winner_agree=float(sum(
                       piv.loc[m].idxmin() == min(piv.columns, key=lambda a, m=m: calibrated_time(cal, a, m, int(n)))
                       for m in piv.index) / len(piv)))
        pair = crossing_pair(model_at[lo], model_at[hi])
        nominal = LinkParams(alpha_s=float(cal["fit"]["alpha_s"]), bandwidth_bps=float(rate) * 1e6)
        # the talk's condition: the two differ in latency steps and in bytes (never with two workers, where
        # every schedule has the same latency term and only bursts and handshakes tell them apart)
        talk = crossover_nbytes(*pair, int(n), nominal, talk=True) if pair else None
        if pair and talk:
            a, b_ = pair
            pred = predicted_crossover(cal, a, b_, int(n), lo, hi)
            meas, changes = measured_crossover(list(piv.index), list(piv[a]), list(piv[b_]))
            row.update(pair=f"{a}/{b_}", predicted_bytes=pred, measured_bytes=meas, sign_changes=changes,
                       talk_bytes=talk, ratio=(meas / pred) if meas and pred else None)
        cells.append(row)
    skipped = pd.DataFrame([{k: s.get(k) for k in (*CELL, "why")} for s in b.get("skipped", []) if s.get("cell")],
                           columns=[*CELL, "why"])
    return {"latency": df, "latency_cells": pd.DataFrame(cells), "latency_skipped": skipped,
            "latency_software": software_table(b), "latency_traces": trace_table(b)}


def software_table(b: dict):
    """One row per (testbed, algorithm) with a measured software cost: per step (median and quartiles of
    the tiny calls, seconds), the steps, the calls, the call's start lag (median and quartiles over the
    traced tiny calls, and what the model charges of it, seconds; NaN where not traced) and where it was
    measured (``source``: this run, or the calibration-only run merged in)."""
    rows = []
    for key, cal in (b.get("calibration") or {}).items():
        for alg, e in (cal.get("software") or {}).items():
            if "per_step_s" not in e:
                continue
            rows.append({"testbed": key, "algorithm": alg, "steps": e["steps"], "per_step_s": e["per_step_s"],
                         "per_step_q25_s": e["per_step_q25_s"], "per_step_q75_s": e["per_step_q75_s"],
                         "calls": len(e.get("times_s") or []), "nbytes": e["nbytes"],
                         **{k: e.get(k, float("nan")) for k in LAG_COLUMNS},
                         "source": (cal.get("software_measured") or {}).get("source", "this run")})
    return pd.DataFrame(rows, columns=["testbed", "algorithm", "steps", "per_step_s", "per_step_q25_s",
                                       "per_step_q75_s", "calls", "nbytes", *LAG_COLUMNS, "source"])


LAG_COLUMNS = ("start_lag_s", "start_lag_q25_s", "start_lag_q75_s", "start_lag_charged_s")


def _heap_chain(algorithm: str | None) -> bool:
    """Whether ``algorithm`` is a registered heap tree whose one-chunk chain the model times (``SPEC.heap_chain``)."""
    spec = COLLECTIVES.get(algorithm or "")
    return spec is not None and spec.heap_chain


def trace_table(b: dict):
    """One row per traced (testbed, size) of the heap tree at N = 4: the median over its calls of the call's
    time and of each message's arrival at its receiver (``at_<src>_<dst>``, s from the call's start), the
    model's (``model_s``, ``model_at_*``), and the head start of the root's first stream (``head_start_bytes``):
    the bytes it had to itself before the second shared the root's uplink, from its measured arrival,
    p = (arrival - send - alpha) / beta paced bytes of m, w = 2m - b - p (clipped to [b, m]; m: all of it
    before the second stream, b: the bucket only; for m >= 2 b only, where the two differ clearly)."""
    import statistics

    rows = []
    for t in b.get("traces") or []:
        if not _heap_chain(t.get("algorithm")) or t.get("workers") != 4 or not t.get("calls"):
            continue
        cal = (b.get("calibration") or {}).get(calibration_key(4, t["rate_mbit"], t.get("delay_ms") or 0))
        arrive, sent = {}, {}
        for c in t["calls"]:
            for rk, evs in enumerate(c["ranks"]):
                for e in evs:
                    if e["kind"] == "recv" and e.get("done") is not None:
                        arrive.setdefault(f"{e['peer']}_{rk}", []).append(e["done"])
                    elif e["kind"] == "send":
                        sent.setdefault(f"{rk}_{e['peer']}", []).append(e["posted"])
        row = {"rate_mbit": t["rate_mbit"], "delay_ms": t.get("delay_ms") or 0, "nbytes": t["nbytes"],
               "calls": len(t["calls"]), "time_s": statistics.median(c["time_s"] for c in t["calls"]),
               "model_s": t.get("model_s"), "source": t.get("source")}
        row.update({f"at_{k}": statistics.median(v) for k, v in arrive.items()})
        for k, v in ((t.get("model_chain") or {}).get("arrive_s") or {}).items():
            row[f"model_at_{k.replace('->', '_')}"] = v
        m = float(t["nbytes"])
        bucket = float((cal or {}).get("shaper_burst_bytes") or 0.0) * TCP_PAYLOAD_PER_FRAME
        if bucket and m >= 2 * bucket and "at_0_1" in row and sent.get("0_1"):  # both streams well past the bucket
            beta = model_link(cal, t["algorithm"]).beta
            paced = (row["at_0_1"] - statistics.median(sent["0_1"]) - cal["fit"]["alpha_s"]) / beta
            row["head_start_bytes"] = min(m, max(bucket, 2 * m - bucket - paced))
        rows.append(row)
    return pd.DataFrame(rows)


def latency_numbers(tables: dict[str, Any], meta: dict[str, Any]) -> dict[str, str]:
    """The ``EOneLat*`` macros (lowbw.report.catalog)."""
    df, cells, skipped = tables["latency"], tables["latency_cells"], tables["latency_skipped"]
    delayed = df[df["delay_ms"] > 0]
    by_alg = df.groupby("algorithm")["abs_err"].max()
    out = {
        "EOneLatDelays": ", ".join(fmt_num(float(d)) for d in sorted(df["delay_ms"].unique())),
        "EOneLatRates": " and ".join(fmt_num(float(r)) for r in sorted(df["rate_mbit"].unique())),
        "EOneLatWorkersMin": str(int(df["workers"].min())), "EOneLatWorkersMax": str(int(df["workers"].max())),
        "EOneLatSizeMinKB": fmt_num(1e3 * float(df["size_mb"].min())),
        "EOneLatSizeMaxMB": fmt_num(float(df["size_mb"].max())),
        "EOneLatSettings": str(len(df)), "EOneLatCells": str(int(df.groupby(CELL).ngroups)),
        "EOneLatSkippedCells": str(len(skipped)),
        "EOneLatEmulatorLimit": fmt_num(meta["emulator_limit_mbit"]),
        "EOneLatErrMedian": fmt_num(100 * float(df["abs_err"].median()), 2),
        "EOneLatErrMax": fmt_num(100 * float(df["abs_err"].max()), 2),
        "EOneLatWithinTen": fmt_num(100 * float((df["abs_err"] <= TOLERANCE).mean()), 3),
        "EOneLatAlgsWithinTen": str(int((by_alg <= TOLERANCE).sum())), "EOneLatAlgs": str(len(by_alg)),
        "EOneLatLoadMax": fmt_num(meta["load_max"], 2), "EOneLatLateStarts": str(int(meta["late_starts"])),
    }
    # every measured algorithm's worst error, in the order of the catalogue's words (a profile may measure fewer)
    out["EOneLatErrPerAlg"] = ", ".join(
        f"{E1_ALGS[alg]} {fmt_num(100 * float(by_alg[alg]), 2)}\\,\\%" for alg in E1_ALGS if alg in by_alg)
    unknown = sorted(set(by_alg.index) - set(E1_ALGS))
    if unknown:
        raise ValueError(f"E1 algorithm(s) {unknown} have no word in lowbw.report.catalog.E1_ALGS")
    if not delayed.empty:
        out["EOneLatDelayedErrMax"] = fmt_num(100 * float(delayed["abs_err"].max()), 2)
        out["EOneLatDelayedWithinTen"] = fmt_num(100 * float((delayed["abs_err"] <= TOLERANCE).mean()), 3)
        hs = cells[(cells["delay_ms"] > 0) & cells["handshake_s"].notna()]
        if not hs.empty:
            out["EOneLatHandshakeRatio"] = fmt_num(float((hs["handshake_s"] / hs["alpha_s"]).median()), 3)
    issue = df[(df["size_mb"] >= ISSUE_MIN_MB) & (df["size_mb"] <= ISSUE_MAX_MB)]
    if not issue.empty:
        by_issue = issue.groupby("algorithm")["abs_err"].max()
        out["EOneLatIssueErrPerAlg"] = ", ".join(
            f"{E1_ALGS[alg]} {fmt_num(100 * float(by_issue[alg]), 3)}\\,\\%" for alg in E1_ALGS if alg in by_issue)
        out["EOneLatIssueErrMax"] = fmt_num(100 * float(issue["abs_err"].max()), 3)  # 10.2 is not "10"
        out["EOneLatIssueWithinTen"] = fmt_num(100 * float((issue["abs_err"] <= TOLERANCE).mean()), 3)
        out["EOneLatIssueAlgsWithinTen"] = str(int((by_issue <= TOLERANCE).sum()))
        out["EOneLatIssueAlgs"] = str(len(by_issue))
    out.update(_software_numbers(tables.get("latency_software")))
    out.update(_trace_numbers(tables.get("latency_traces")))
    zero = df[df["delay_ms"] == 0]
    if not zero.empty:
        out["EOneLatZeroErrMax"] = fmt_num(100 * float(zero["abs_err"].max()), 2)
        fast = zero[zero["time_s"] < 0.01]
        if not fast.empty:
            out["EOneLatZeroFastErrMax"] = fmt_num(100 * float(fast["abs_err"].max()), 2)
    if "ratio" in cells and cells["ratio"].notna().any():
        r = cells["ratio"].dropna()
        out["EOneLatCrossCount"] = str(len(r))
        out["EOneLatCrossRatioMedian"] = fmt_num(float(r.median()), 3)
        out["EOneLatCrossRatioWorst"] = fmt_num(float(max(r.max(), 1 / r.min())), 3)
    if "winner_agree" in cells and cells["winner_agree"].notna().any():
        out["EOneLatWinnerAgree"] = fmt_num(100 * float(cells["winner_agree"].mean()), 3)
    return out


def _per_algorithm_ms(df, col: str, name: str, list_name: str) -> dict[str, str]:
    """``df[col]`` (seconds) per algorithm: ``list_name``, the median over testbeds of each (ms, a list);
    ``<name>Min``/``<name>Max``, the range of all (ms); ``<name>Testbeds``, on how many testbeds."""
    med = df.groupby("algorithm")[col].median()
    return {list_name: ", ".join(f"{E1_ALGS[a]} {fmt_num(1e3 * float(med[a]), 2)}\\,ms" for a in E1_ALGS if a in med),
            f"{name}Min": fmt_num(1e3 * float(df[col].min()), 2),
            f"{name}Max": fmt_num(1e3 * float(df[col].max()), 2),
            f"{name}Testbeds": str(df["testbed"].nunique())}


def _software_numbers(sw) -> dict[str, str]:
    """Each algorithm's software cost per step (and start lag per call, where traced): the median over
    testbeds (ms, a list), the range of all, and on how many testbeds; which came from a later run."""
    if sw is None or sw.empty:
        return {}
    out = _per_algorithm_ms(sw, "per_step_s", "EOneLatSoftware", "EOneLatSoftwarePerStep")
    if (sw["source"] != "this run").any():
        out["EOneLatSoftwareSeparateRun"] = str(sw.loc[sw["source"] != "this run", "testbed"].nunique())
    lag = sw[sw["start_lag_s"].notna()] if "start_lag_s" in sw else sw.iloc[0:0]
    if not lag.empty:
        out.update(_per_algorithm_ms(lag, "start_lag_s", "EOneLatStartLag", "EOneLatStartLag"))
    return out


def _trace_numbers(tr) -> dict[str, str]:
    """The heap tree's traces: which leaf is last at the smallest traced size of the shortest traced delay
    (ms from the call's start), and the root's first stream's head start over the sizes above a bucket."""
    if tr is None or tr.empty or "at_0_2" not in tr or "at_1_3" not in tr:
        return {}
    first = tr.sort_values(["rate_mbit", "delay_ms", "nbytes"]).iloc[0]
    out = {"EOneLatTraceRate": fmt_num(float(first["rate_mbit"])),
           "EOneLatTraceDelay": fmt_num(float(first["delay_ms"])),
           "EOneLatTraceSizeKB": fmt_num(float(first["nbytes"]) / 1e3),
           "EOneLatTraceLeafTwoMs": fmt_num(1e3 * float(first["at_0_2"]), 3),
           "EOneLatTraceLeafThreeMs": fmt_num(1e3 * float(first["at_1_3"]), 3),
           "EOneLatTraceCount": str(len(tr)), "EOneLatTraceDelays": ", ".join(
               fmt_num(float(d)) for d in sorted(tr["delay_ms"].unique()))}
    if "head_start_bytes" in tr:
        big = tr[tr["head_start_bytes"].notna()]
        if not big.empty:
            out["EOneLatTraceHeadMinKB"] = fmt_num(float(big["head_start_bytes"].min()) / 1e3, 2)
            out["EOneLatTraceHeadMaxKB"] = fmt_num(float(big["head_start_bytes"].max()) / 1e3, 2)
    return out


def latency_table(tables: dict[str, Any], conditions: dict[str, Any] | None = None,
                  provenance: dict[str, Any] | None = None) -> str:
    """One row per testbed: fastest algorithm at the smallest and the largest size (model = measured unless
    shown as measured/model), the crossover of those two (predicted, measured, talk's), the worst error; the
    caption holds the run's ``conditions`` and a testbed measured while the machine was busy is marked."""
    cells = tables["latency_cells"].sort_values(CELL)

    def kb(x) -> str:
        return "--" if x is None or (isinstance(x, float) and math.isnan(x)) else fmt_num(float(x) / 1e3)

    def fastest(r, end: str) -> str:
        m, p = r.get(f"measured_fastest_{end}"), r.get(f"model_fastest_{end}")
        if not isinstance(m, str):
            return "--"
        return escape(m) if m == p else f"{escape(m)}/{escape(str(p))}"

    rows, marked = [], 0
    for _, r in cells.iterrows():
        busy = r.get("busy", False) is True
        marked += busy
        rows.append([fmt_num(float(r["rate_mbit"])) + (MARK if busy else ""), str(int(r["workers"])),
                     fmt_num(float(r["delay_ms"])),
                     fastest(r, "small"), fastest(r, "large"), kb(r.get("predicted_bytes")),
                     kb(r.get("measured_bytes")), kb(r.get("talk_bytes")), fmt_num(100 * float(r["max_abs_err"]), 2)])
    skipped = tables["latency_skipped"]
    note = None
    if len(skipped):
        which = "; ".join(f"{fmt_num(float(s['rate_mbit']))}\\,Mbit/s, N={int(s['workers'])}, "
                          f"{fmt_num(float(s['delay_ms']))}\\,ms" for _, s in skipped.iterrows())
        note = f"Not built (the link emulator cannot carry their summed uplinks): {which}."
    header = ["Mbit/s", "N", "delay ms", "fastest, small", "fastest, large", "M* model KB", "M* measured KB",
              "M* talk KB", r"max $|$err$|$ \%"]
    return booktabs(rows, header,
                    "E1 latency axis: per testbed, the fastest all-reduce at the smallest and the largest message "
                    "(measured; measured/model where they differ), the message size M* where those two take equal "
                    "time (calibrated model, measured, the talk's textbook formula with the measured one-way "
                    "latency and the nominal rate), and the calibrated model's largest error."
                    + caption(conditions, provenance, marked), "tab:e1lat",
                    size=r"\scriptsize", note=note)


def latency_axes(fig, grid_spec, tables: dict[str, Any]) -> None:
    """Small multiples (rows: link rates; columns: worker counts) of time against message size: measured as
    markers, the calibrated model as lines, one colour per delay, one marker and line style per algorithm."""
    df = tables["latency"]
    rates = sorted(df["rate_mbit"].unique())
    workers = sorted(df["workers"].unique())
    delays = sorted(df["delay_ms"].unique())
    colours = plt.get_cmap("plasma")([0.85 * i / max(1, len(delays) - 1) for i in range(len(delays))])
    markers = dict(zip(ALGS, ["o", "s", "^", "D"]))
    styles = dict(zip(ALGS, ["-", "--", ":", "-."]))
    sub = grid_spec.subgridspec(len(rates), len(workers), hspace=0.35, wspace=0.25)
    for i, rate in enumerate(rates):
        for j, n in enumerate(workers):
            ax = fig.add_subplot(sub[i, j])
            d = df[(df["rate_mbit"] == rate) & (df["workers"] == n)]
            for k, delay in enumerate(delays):
                for alg in ALGS:
                    x = d[(d["delay_ms"] == delay) & (d["algorithm"] == alg)].sort_values("size_mb")
                    if x.empty:
                        continue
                    ax.plot(x["size_mb"] * 1e3, x["model_s"], styles[alg], color=colours[k], lw=0.8)
                    ax.plot(x["size_mb"] * 1e3, x["time_s"], markers[alg], color=colours[k], ms=3, mfc="none",
                            mew=0.7)
            ax.set(xscale="log", yscale="log", title=f"{fmt_num(float(rate))} Mbit/s, N={int(n)}")
            _plain_log_ticks(ax)
            ax.title.set_fontsize(7)
            ax.tick_params(labelsize=6)
            if d["delay_ms"].max() == 0 and len(delays) > 1:
                ax.text(0.04, 0.96, "delay > 0: beyond the\nlink emulator (skipped)", transform=ax.transAxes,
                        fontsize=5.5, va="top")
            if i == len(rates) - 1:
                ax.set_xlabel("message (KB per rank)", fontsize=7)
            if j == 0:
                ax.set_ylabel("all-reduce time (s)", fontsize=7)
            if i == 0 and j == len(workers) - 1:
                hs = [Line2D([], [], color=colours[k], lw=1.5, label=f"{fmt_num(float(dl))} ms")
                      for k, dl in enumerate(delays)]
                hs += [Line2D([], [], color="k", ls=styles[a], marker=markers[a], ms=3, mfc="none", lw=0.8, label=a)
                       for a in ALGS]
                ax.legend(handles=hs, fontsize=5, ncol=2, loc="lower right", title="delay / algorithm",
                          title_fontsize=5)


def crossover_axis(ax, tables: dict[str, Any]) -> None:
    """Measured against predicted crossover size, one point per testbed whose fastest algorithm changes."""
    cells = tables["latency_cells"]
    ok = cells.dropna(subset=["predicted_bytes", "measured_bytes"]) if "predicted_bytes" in cells else cells.iloc[:0]
    if ok.empty:
        ax.text(0.5, 0.5, "no crossover\nin the measured range", ha="center", va="center", transform=ax.transAxes)
        ax.set_axis_off()
        return
    for pair, g in ok.groupby("pair"):
        ax.scatter(g["predicted_bytes"] / 1e3, g["measured_bytes"] / 1e3, s=14, label=pair)
    lo = min(ok["predicted_bytes"].min(), ok["measured_bytes"].min()) / 1e3 * 0.7
    hi = max(ok["predicted_bytes"].max(), ok["measured_bytes"].max()) / 1e3 * 1.4
    ax.plot([lo, hi], [lo, hi], "k--", lw=0.8)
    ax.set(xscale="log", yscale="log", xlabel="predicted crossover (KB)", ylabel="measured crossover (KB)",
           title="latency axis: crossovers")
    _plain_log_ticks(ax)
    ax.legend(fontsize=6)


def _plain_log_ticks(ax) -> None:
    """Decades only on log axes (minor labels like 3x10^0 overlap in small panels)."""
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.yaxis.set_minor_formatter(NullFormatter())
