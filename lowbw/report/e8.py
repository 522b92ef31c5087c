"""E8 -- does the simulator tell the truth? ``runs/bench/e2e.json`` (``python -m lowbw bench e2e``) ->
the paper's figure (predicted vs measured step time and time-to-accuracy), table and findings; the language
model's cells (``runs/bench/e2e_lm.json``, ``--model gpt-small``), where present, as a row group of the table
and their own numbers."""

from __future__ import annotations

import pandas as pd
from matplotlib.lines import Line2D

from lowbw.bench.e8.rows import cells
from lowbw.report.catalog import E8_WORKERS
from lowbw.report.common import plotting
from lowbw.report.conditions import MARK, caption, mark, short_commit
from lowbw.report.experiment import Context, Experiment, Stats
from lowbw.report.latex import booktabs, escape, fmt_num
from lowbw.workflow.hoststore import commit_of, cores_of

__all__ = ["E8"]

TOLERANCE = 0.10  # the target: |predicted - measured| / measured


def _pct(x: float | None, digits: int = 2) -> str:
    return "--" if x is None else fmt_num(100 * x, digits)


def _signed_pct(x: float | None) -> str:
    if x is None:
        return "--"
    return ("$+$" if x >= 0 else "$-$") + fmt_num(abs(100 * x), 2)


def _table(df, rates: list[float], workers: list[int], conditions: dict | None = None,
           provenance: dict | None = None, more: str = "") -> str:
    """``more``: a further caption sentence (the language model's cells' source and machine)."""
    rows, marked = [], 0
    for method in list(dict.fromkeys(df["method"])):
        cells = [escape(method)]
        for r in rates:
            for n in workers:
                x = df[(df["method"] == method) & (df["rate_mbit"] == r) & (df["workers"] == n)]
                cell = _signed_pct(x["err_step"].iloc[0]) if not x.empty else "--"
                if not x.empty and r > 100 and n == min(workers) and bool(x["link_bound"].iloc[0]):
                    cell += r"$^\dagger$"  # in the target: link-bound at a fast rate
                if not x.empty and "conditions" in x and mark(x["conditions"].iloc[0]):
                    cell += MARK  # the median repeat was measured while the machine was busy
                    marked += 1
                cells.append(cell)
        x2 = df[(df["method"] == method) & (df["workers"] == min(workers))]
        worst_nom = x2["err_step_nominal"].abs().max() if not x2.empty else None
        cells.append(_pct(worst_nom, 2))
        rows.append(cells)
    header = ["Method"] + [f"{fmt_num(r)}\\,Mbit/s, N={n}" for r in rates for n in workers] \
        + [f"uncalibr., N={min(workers)}"]
    return booktabs(rows, header,
                    r"E8: error of the simulator's step time against a real run on shaped links, "
                    r"$(t_\mathrm{sim} - t_\mathrm{testbed})/t_\mathrm{testbed}$ in \% (same config, seed and "
                    r"steps; testbed: one process per worker, every byte through a tc-shaped link; a cell "
                    r"measured more than once: its median repeat). Last column: "
                    r"the worst error of the uncalibrated clock (ideal software stack, nominal rate, a machine "
                    r"per worker) at the smallest N. $^\dagger$: link-bound (the step's bytes at the link's rate "
                    r"take at least half of it), so in the target above 100\,Mbit/s."
                    + caption(conditions, provenance, marked) + more, "tab:e8",
                    size=r"\scriptsize")


def _figure(df):
    plt, _ = plotting()
    methods = list(dict.fromkeys(df["method"]))
    rates = sorted(df["rate_mbit"].unique())
    markers = dict(zip(methods, "osD^v<>pP*Xh"))
    colours = {r: f"C{i}" for i, r in enumerate(rates)}
    fig, axes = plt.subplots(1, 2, figsize=(7.2, 3.2))
    panels = [("measured_step_s", "predicted_step_s", "step time (s)"),
              ("measured_ttt_s", "predicted_ttt_s", "time to accuracy (s)")]
    for ax, (mx, py, what) in zip(axes, panels):
        d = df[df[mx].notna() & df[py].notna()]
        if d.empty:
            ax.axis("off")
            ax.text(0.5, 0.5, f"no {what} reached", ha="center", va="center", fontsize=8)
            continue
        for _, r in d.iterrows():
            hollow = r["workers"] > d["workers"].min()
            ax.scatter(r[mx], r[py], marker=markers[r["method"]], s=26,
                       facecolors="none" if hollow else colours[r["rate_mbit"]], edgecolors=colours[r["rate_mbit"]],
                       linewidths=0.9)
        lo = min(d[mx].min(), d[py].min()) * 0.7
        hi = max(d[mx].max(), d[py].max()) * 1.4
        xs = [lo, hi]
        ax.plot(xs, xs, "k-", lw=0.7)
        ax.fill_between(xs, [x * (1 - TOLERANCE) for x in xs], [x * (1 + TOLERANCE) for x in xs], color="0.85",
                        zorder=0, lw=0)
        ax.set(xscale="log", yscale="log", xlim=xs, ylim=xs, xlabel=f"measured {what}",
               ylabel=f"simulated {what}")

    handles = [Line2D([], [], ls="", marker=markers[m], color="k", label=m, markerfacecolor="none") for m in methods]
    handles += [Line2D([], [], ls="", marker="s", color=colours[r], label=f"{r:g} Mbit/s") for r in rates]
    if df["workers"].nunique() > 1:
        handles.append(Line2D([], [], ls="", marker="o", color="k", markerfacecolor="none",
                              label=f"hollow: N={int(df['workers'].max())}"))
    fig.legend(handles=handles, loc="lower center", ncol=min(6, len(handles)), fontsize=6.5, frameon=False,
               bbox_to_anchor=(0.5, -0.08))
    axes[0].set_title("per step (grey: $\\pm$10%)", fontsize=8)
    axes[1].set_title("to the target accuracy", fontsize=8)
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    return fig


def _median_runs(rows: list[dict]):
    """One row per cell (method x rate x workers): the run of its median repeat (:func:`lowbw.bench.e8.rows.cells`),
    with the repeats' count and range."""
    return pd.DataFrame([{**c["run"], **{k: c[k] for k in ("repeats", "err_step_min", "err_step_max")}}
                         for c in cells(rows)])


def stats(ctx: Context) -> Stats | None:
    """Tidy ``runs`` (one row per measured cell and repeat, as ``python -m lowbw bench e2e`` wrote them),
    ``cells`` (one per method x rate x workers: its median repeat, see :func:`_median_runs`) and ``probes``
    (per cell, or per (rate, N) group in older files: per-message overhead and compute slow-down)."""
    b, lm, rt = ctx.bench("e2e"), ctx.bench("e2e_lm"), ctx.bench("e2e_lm_realtime")
    if not (b and b.get("rows")) and not (lm and lm.get("rows")):
        return None
    tables: dict = {}
    meta: dict = {"source": "runs/bench/e2e.json", "tolerance": TOLERANCE}
    if b and b.get("rows"):
        tables.update(cells=_median_runs(b["rows"]), runs=pd.DataFrame(b["rows"]))
        if b.get("probes"):
            tables["probes"] = pd.DataFrame(b["probes"])
        meta.update(provenance=b.get("provenance", {}), conditions=b.get("conditions"))
    if lm and lm.get("rows"):
        tables["lm_cells"] = _median_runs(lm["rows"])
        tables["lm_runs"] = pd.DataFrame(lm["rows"])
        meta.update(lm_model=(lm.get("args") or {}).get("model", "?"), lm_conditions=_pooled_conditions(lm),
                    lm_provenance=lm.get("provenance", {}), lm_realtime=int((lm.get("args") or {}).get("realtime", 0)))
        if rt and rt.get("rows") and (rt.get("args") or {}).get("realtime") and not meta["lm_realtime"]:
            # the same cells with the workers under SCHED_RR (``bench e2e --realtime`` into e2e_lm_realtime.json):
            # what co-located workers cost each other's messages under the fair scheduler
            tables["lm_rt_cells"] = _median_runs(rt["rows"])
            tables["lm_rt_runs"] = pd.DataFrame(rt["rows"])
    return Stats(tables, meta)


def _pooled_conditions(doc: dict) -> dict | None:
    """The machine's conditions over every run of an e2e.json that ``--append`` grew (its own run's, then each
    appended run's): the load's mean weighted by each run's seconds, its highest value, busy if any run was, the
    load before the first and after the last."""
    runs = [c for c in [doc.get("conditions"), *((a or {}).get("conditions") for a in doc.get("appended") or [])]
            if c and c.get("load1_mean") is not None]
    if not runs:
        return doc.get("conditions")
    wall = [float(c.get("wall_s") or 1.0) for c in runs]
    return {**runs[0], "load1_mean": sum(c["load1_mean"] * w for c, w in zip(runs, wall)) / sum(wall),
            "load1_max": max(c["load1_max"] for c in runs), "busy": any(c.get("busy") for c in runs),
            "load_after": runs[-1].get("load_after", runs[0].get("load_after")), "wall_s": sum(wall),
            "runs": len(runs)}


def _errors_per_method(cells_df) -> str:
    """``dense $-$2.0\\,\\%, topk1 $+$9.8\\,\\%, ...``: each cell's signed step-time error, in the table's order."""
    return ", ".join(f"{escape(str(r['method']))} {_signed_pct(r['err_step'])}\\,\\%" for _, r in cells_df.iterrows())


def _in_situ_cost(cells_df, runs_df) -> dict[str, float]:
    """The per-layer compressed cells' per-message cost (ms): the clock's, from the probes' exchange in situ
    (median over the cells' median repeats), and the range the testbed runs implied over every repeat."""
    situ = cells_df[cells_df["overhead_in_situ_ms"].notna()] if "overhead_in_situ_ms" in cells_df else cells_df[:0]
    if situ.empty:
        return {}
    runs = runs_df[runs_df["method"].isin(situ["method"]) & runs_df["implied_overhead_ms"].notna()]
    out = {"situ": float(situ["overhead_in_situ_ms"].median())}
    if not runs.empty:
        out.update(implied_min=float(runs["implied_overhead_ms"].min()),
                   implied_max=float(runs["implied_overhead_ms"].max()))
    return out


def _lm_rt_numbers(rt, rt_runs, lm, lm_runs) -> dict[str, str]:
    """The language model's cells with the workers under SCHED_RR beside those under the fair scheduler: how
    many within the tolerance, each method's error, and the per-layer cells' per-message cost both ways."""
    err = rt["err_step"].abs()
    out = {"EEightLmRtCells": str(len(rt)), "EEightLmRtWithin": str(int((err <= TOLERANCE).sum())),
           "EEightLmRtErrPerMethod": _errors_per_method(rt)}
    fair, fast = _in_situ_cost(lm, lm_runs), _in_situ_cost(rt, rt_runs)
    if "situ" in fair and "situ" in fast:
        out["EEightLmRtInSituMs"] = fmt_num(fast["situ"], 3)
        out["EEightLmRtCostRatio"] = fmt_num(fair["situ"] / fast["situ"], 2)  # fair over SCHED_RR
    for prefix, cost in (("EEightLm", fair), ("EEightLmRt", fast)):
        if "implied_min" in cost:
            out[f"{prefix}ImpliedMin"] = fmt_num(cost["implied_min"], 3)
            out[f"{prefix}ImpliedMax"] = fmt_num(cost["implied_max"], 3)
    return out


def _lm_numbers(lm, meta: dict) -> dict[str, str]:
    """The language model's cells: how many, how many within the tolerance, each method's error, the machine's
    load while they ran, and the compute factor of the cells whose workers meet every H > 1 steps (per step
    and over their H steps, medians)."""
    err = lm["err_step"].abs()
    out = {"EEightLmModel": escape(str(meta["lm_model"])), "EEightLmCells": str(len(lm)),
           "EEightLmRepeats": str(int(lm["repeats"].max())),
           "EEightLmWithin": str(int((err <= TOLERANCE).sum())),
           "EEightLmRates": ", ".join(fmt_num(float(r)) for r in sorted(lm["rate_mbit"].unique())),
           "EEightLmWorkers": ", ".join(str(int(n)) for n in sorted(lm["workers"].unique())),
           # how the testbed's workers were scheduled (bench e2e --realtime): as if each had its own CPU, or
           # sharing the cores under the fair scheduler
           "EEightLmScheduling": (f"under SCHED\\_RR (priority {meta['lm_realtime']})" if meta.get("lm_realtime")
                                  else "under the fair scheduler"),
           "EEightLmErrPerMethod": _errors_per_method(lm)}
    cond = meta.get("lm_conditions") or {}
    if cond.get("load1_mean") is not None:
        out["EEightLmLoadMean"] = fmt_num(float(cond["load1_mean"]), 3)
        out["EEightLmLoadMax"] = fmt_num(float(cond["load1_max"]), 3)
        out["EEightLmCores"] = str(cond.get("cores", "?"))
        out["EEightLmBusy"] = "busy" if cond.get("busy") else "not busy"
    if "overhead_in_situ_ms" in lm:
        # per-layer compressed cells whose probes made the exchange in situ (the compressor's real work between
        # tiny real messages): its per-message cost and compression factor against the spin replay's and
        # compressing apart
        situ = lm[lm["overhead_in_situ_ms"].notna()]
        if not situ.empty:
            out["EEightLmInSituMethods"] = escape(", ".join(situ["method"]))
            out["EEightLmInSituMs"] = fmt_num(float(situ["overhead_in_situ_ms"].median()), 3)
            out["EEightLmInSituCompress"] = fmt_num(float(situ["compress_scale"].median()), 3)
            for key, col in (("EEightLmReplayMs", "overhead_sequence_ms"), ("EEightLmImpliedMs", "implied_overhead_ms"),
                             ("EEightLmApartCompress", "compress_scale_apart")):
                if col in situ and situ[col].notna().all():
                    out[key] = fmt_num(float(situ[col].median()), 3)
            if "implied_overhead_ms" in situ and situ["implied_overhead_ms"].notna().all():
                implied, probed = (float(situ[c].median()) for c in ("implied_overhead_ms", "overhead_in_situ_ms"))
                out["EEightLmInSituVsImplied"] = "less" if implied < probed else "more"
    if "steps_per_sync" in lm:
        rare = lm[lm["steps_per_sync"].fillna(1) > 1]
        if not rare.empty:
            out["EEightLmSyncMethods"] = escape(", ".join(rare["method"]))
            out["EEightLmSyncSteps"] = ", ".join(str(int(h)) for h in rare["steps_per_sync"])
            out["EEightLmScalePerStep"] = fmt_num(float(rare["compute_scale_per_step"].median()), 3)
            out["EEightLmScaleOverSync"] = fmt_num(float(rare["compute_scale"].median()), 3)
            out["EEightLmSyncComputePred"] = fmt_num(1e3 * float(rare["predicted_compute_s"].median()), 3)
            out["EEightLmSyncComputeMeas"] = fmt_num(1e3 * float(rare["measured_compute_s"].median()), 3)
    return out


def numbers(st: Stats) -> dict[str, str]:
    """The MLP's numbers where its cells were measured, the language model's where its were."""
    out = {"EEightTolerance": fmt_num(100 * TOLERANCE)}
    if "cells" in st.tables:
        out.update(_mlp_numbers(st))
    if "lm_cells" in st.tables:
        out.update(_lm_numbers(st.tables["lm_cells"], st.meta))
    if "lm_rt_cells" in st.tables:
        out.update(_lm_rt_numbers(st.tables["lm_rt_cells"], st.tables["lm_rt_runs"], st.tables["lm_cells"],
                                  st.tables["lm_runs"]))
    return out


def _mlp_numbers(st: Stats) -> dict[str, str]:
    df = st.tables["cells"]
    workers = sorted(int(n) for n in df["workers"].unique())
    n0 = workers[0]
    out: dict[str, str] = {}
    err = df["err_step"].abs()
    small = df[df["workers"] == n0]
    target = small[(small["rate_mbit"] <= 100) | small["link_bound"]]
    out["EEightCells"] = str(len(df))
    if int(df["repeats"].max()) > 1:  # cells measured more than once: the median repeat, and the range
        rep = df[df["repeats"] > 1]
        out["EEightRepeatCells"] = str(len(rep))
        out["EEightRepeats"] = str(int(rep["repeats"].max()))
        out["EEightRepeatRange"] = fmt_num(100 * float((rep["err_step_max"] - rep["err_step_min"]).max()), 2)
    out["EEightSmallN"] = str(n0)
    out["EEightWithinTen"] = str(int((err <= TOLERANCE).sum()))
    fast = small[small["rate_mbit"] == small["rate_mbit"].max()]
    if not fast.empty and float(fast["rate_mbit"].iloc[0]) > 100:
        # at the fastest rate only link-bound cells are in the target; the others' steps are CPU time
        bound = fast["link_bound"].astype(bool)
        out["EEightFastRate"] = fmt_num(float(fast["rate_mbit"].iloc[0]))
        out["EEightFastLinkBound"] = escape(", ".join(fast[bound]["method"])) or "none"
        out["EEightFastCPUBound"] = escape(", ".join(fast[~bound]["method"])) or "none"
    if not target.empty:
        out["EEightTargetCells"] = str(len(target))
        out["EEightTargetWorst"] = fmt_num(100 * float(target["err_step"].abs().max()), 2)
        out["EEightTargetWithin"] = str(int((target["err_step"].abs() <= TOLERANCE).sum()))
    worst = df.assign(a=err).sort_values("a").iloc[-1]
    out["EEightWorstErr"] = fmt_num(100 * float(worst["err_step"]), 2)
    out["EEightWorstMethod"] = escape(str(worst["method"]))
    out["EEightWorstWhere"] = f"{fmt_num(worst['rate_mbit'])}\\,Mbit/s, N={int(worst['workers'])}"
    out["EEightNominalWorst"] = fmt_num(100 * float(small["err_step_nominal"].abs().max()), 2)
    nom = small.assign(a=small["err_step_nominal"].abs()).sort_values("a").iloc[-1]
    out["EEightNominalWorstMethod"] = escape(str(nom["method"]))
    probes = st.tables.get("probes")
    if "overhead_gap_ms" in df and df["overhead_gap_ms"].notna().any():
        # the clock's per-message cost per cell: the probes' cost after the cell's own CPU work between calls
        out["EEightOverheadMs"] = fmt_num(float(df["overhead_ms"].median()), 2)
        out["EEightOverheadMin"] = fmt_num(float(df["overhead_ms"].min()), 2)
        out["EEightOverheadMax"] = fmt_num(float(df["overhead_ms"].max()), 2)
        many = df[df["alpha_terms_per_step"] >= 8]  # the per-layer cells: many calls, short gaps
        if not many.empty:
            out["EEightGapMin"] = fmt_num(float(many["overhead_gap_ms"].min()), 2)
            out["EEightGapMax"] = fmt_num(float(many["overhead_gap_ms"].max()), 2)
            if "overhead_last_in_ms" in many and many["overhead_last_in_ms"].notna().all():
                # their calls replayed in order against the curve read at their mean gap, both timed on the
                # worker that came last into each call (the calls alone); then as the clock takes them, on the
                # slowest worker (its waits for later peers included)
                below = many["overhead_last_in_ms"] < many["overhead_at_gap_ms"]
                out["EEightReplayPaired"] = str(len(many))
                out["EEightReplayBelow"] = str(int(below.sum()))
                out["EEightReplayBelowPct"] = fmt_num(
                    100 * float((1 - many["overhead_last_in_ms"] / many["overhead_at_gap_ms"]).median()), 2)
                out["EEightReplayMin"] = fmt_num(float(many["overhead_ms"].min()), 2)
                out["EEightReplayMax"] = fmt_num(float(many["overhead_ms"].max()), 2)
    if probes is not None:
        key = "EEightBackToBack" if "EEightOverheadMs" in out else "EEightOverhead"
        out[f"{key}Ms"] = fmt_num(float(probes["overhead_ms"].median()), 2)
        out[f"{key}Min"] = fmt_num(float(probes["overhead_ms"].min()), 2)
        out[f"{key}Max"] = fmt_num(float(probes["overhead_ms"].max()), 2)
        for n, w in E8_WORKERS.items():  # the other N's slow-downs stay in the probes table
            p = probes[probes["workers"] == n]
            if not p.empty:
                out[f"EEightComputeScale{w}"] = fmt_num(float(p["compute_scale"].median()), 2)
                out[f"EEightComputeScale{w}Min"] = fmt_num(float(p["compute_scale"].min()), 2)
                out[f"EEightComputeScale{w}Max"] = fmt_num(float(p["compute_scale"].max()), 2)
                cs = p["compress_scale"].dropna() if "compress_scale" in p else p["compute_scale"].iloc[:0]
                if not cs.empty:  # compression's own factor, where the probes measured it
                    out[f"EEightCompressScale{w}"] = fmt_num(float(cs.median()), 2)
    if "implied_overhead_ms" in df:
        imp = df["implied_overhead_ms"].dropna()
        if not imp.empty:
            out["EEightImpliedMin"] = fmt_num(float(imp.min()), 2)
            out["EEightImpliedMax"] = fmt_num(float(imp.max()), 2)
            out["EEightImpliedCells"] = str(len(imp))
    if "shaper_burst_bytes" in df and (df["shaper_burst_bytes"].fillna(0) > 0).any():
        out["EEightBucketKB"] = fmt_num(float(df["shaper_burst_bytes"].max()) / 1e3, 3)
        out["EEightBucketCells"] = str(int((df["shaper_burst_bytes"].fillna(0) > 0).sum()))
    if "ddp_hook" in small and "measured_compute_s" in small:
        ddp = small[small["ddp_hook"].fillna(False).astype(bool)]
        if not ddp.empty:  # DDP's own work per step, which the probe's DDP compute does not fully reproduce
            out["EEightDDPComputeMeasured"] = fmt_num(1e3 * float(ddp["measured_compute_s"].median()), 2)
            out["EEightDDPComputePredicted"] = fmt_num(1e3 * float(ddp["predicted_compute_s"].median()), 2)
    out["EEightLossIdentical"] = str(int(df["loss_identical"].astype(bool).sum()))
    ttt = df[df["err_ttt"].notna()]
    if not ttt.empty:
        out["EEightTTTCells"] = str(len(ttt))
        out["EEightTTTWorst"] = fmt_num(100 * float(ttt["err_ttt"].abs().max()), 2)
    prov = st.meta["provenance"]
    out["EEightDate"] = escape(str((st.meta.get("conditions") or prov).get("date", "?"))[:10])
    out["EEightCommit"] = escape(short_commit(commit_of(prov) or "?"))
    out["EEightHost"] = escape(f"{prov.get('host', '?')}, a {cores_of(prov) or '?'}-core {prov.get('cpu', '?')},")
    out["EEightEmulation"] = escape(", ".join(sorted({str(e) for e in df["emulation"].dropna()})))
    by_method = df.assign(a=err).groupby("method", sort=False)["a"].max()
    out["EEightWorstPerMethod"] = ", ".join(f"{escape(m)} {fmt_num(100 * v, 2)}\\,\\%" for m, v in by_method.items())
    return out


def _all_cells(st: Stats):
    """The MLP's cells, then the language model's (their methods named with the model)."""
    parts = [st.tables["cells"]] if "cells" in st.tables else []
    if "lm_cells" in st.tables:
        lm = st.tables["lm_cells"]
        parts.append(lm.assign(method=lm["method"] + f" ({st.meta['lm_model']})"))
    return pd.concat(parts, ignore_index=True)


def table(st: Stats) -> str:
    """One row per method: the MLP's cells, then the language model's."""
    df = _all_cells(st)
    rates = sorted(float(r) for r in df["rate_mbit"].unique())
    cond, prov = ((st.meta.get("conditions"), st.meta.get("provenance")) if "cells" in st.tables
                  else (st.meta.get("lm_conditions"), st.meta.get("lm_provenance")))
    more = ""
    if "cells" in st.tables and "lm_cells" in st.tables:  # the LM's cells: a file, a machine and a run of their own
        more = f" {escape(st.meta['lm_model'])} rows:" + caption(st.meta.get("lm_conditions"),
                                                                  st.meta.get("lm_provenance"))
    return _table(df, rates, sorted(int(n) for n in df["workers"].unique()), cond, prov, more)


def figure(st: Stats):
    return _figure(_all_cells(st))


E8 = Experiment("e8", "E8 simulator vs testbed", stats, numbers, table, figure, "runs/bench/e2e.json absent")
