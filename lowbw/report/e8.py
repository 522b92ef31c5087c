"""E8 -- does the simulator tell the truth? ``runs/bench/e2e.json`` (``python -m lowbw bench e2e``) ->
the paper's figure (predicted vs measured step time and time-to-accuracy), table and findings."""

from __future__ import annotations

from typing import Any

from lowbw.report.build import Context, Section, missing_section
from lowbw.report.latex import booktabs, escape, fmt_num

__all__ = ["e8"]

TOLERANCE = 0.10  # the target: |predicted - measured| / measured


def _pct(x: float | None, digits: int = 2) -> str:
    return "--" if x is None else fmt_num(100 * x, digits)


def _signed_pct(x: float | None) -> str:
    if x is None:
        return "--"
    return ("$+$" if x >= 0 else "$-$") + fmt_num(abs(100 * x), 2)


def _table(df, rates: list[float], workers: list[int]) -> str:
    rows = []
    for method in list(dict.fromkeys(df["method"])):
        cells = [escape(method)]
        for r in rates:
            for n in workers:
                x = df[(df["method"] == method) & (df["rate_mbit"] == r) & (df["workers"] == n)]
                cells.append(_signed_pct(x["err_step"].iloc[0]) if not x.empty else "--")
        x2 = df[(df["method"] == method) & (df["workers"] == min(workers))]
        worst_nom = x2["err_step_nominal"].abs().max() if not x2.empty else None
        cells.append(_pct(worst_nom, 2))
        rows.append(cells)
    header = ["Method"] + [f"{fmt_num(r)}\\,Mbit/s, N={n}" for r in rates for n in workers] \
        + [f"uncalibr., N={min(workers)}"]
    return booktabs(rows, header,
                    r"E8: error of the simulator's step time against a real run on shaped links, "
                    r"$(t_\mathrm{sim} - t_\mathrm{testbed})/t_\mathrm{testbed}$ in \% (same config, seed and "
                    r"steps; testbed: one process per worker, every byte through a tc-shaped link). Last column: "
                    r"the worst error of the uncalibrated clock (ideal software stack, nominal rate, a machine "
                    r"per worker) at the smallest N.", "tab:e8", size=r"\scriptsize")


def _figure(df):
    from lowbw.report.common import plotting

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
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], ls="", marker=markers[m], color="k", label=m, markerfacecolor="none") for m in methods]
    handles += [Line2D([], [], ls="", marker="s", color=colours[r], label=f"{fmt_num(r)} Mbit/s") for r in rates]
    if df["workers"].nunique() > 1:
        handles.append(Line2D([], [], ls="", marker="o", color="k", markerfacecolor="none",
                              label=f"hollow: N={int(df['workers'].max())}"))
    fig.legend(handles=handles, loc="lower center", ncol=min(6, len(handles)), fontsize=6.5, frameon=False,
               bbox_to_anchor=(0.5, -0.08))
    axes[0].set_title("per step (grey: $\\pm$10%)", fontsize=8)
    axes[1].set_title("to the target accuracy", fontsize=8)
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    return fig


def e8(ctx: Context) -> Section:
    """Simulated vs measured training on shaped links (see lowbw.bench.e2e)."""
    import pandas as pd

    b = ctx.bench("e2e")
    if not b or not b.get("rows"):
        return missing_section("e8", "E8 simulator vs testbed", "runs/bench/e2e.json absent")
    df = pd.DataFrame(b["rows"])
    rates = sorted(float(r) for r in df["rate_mbit"].unique())
    workers = sorted(int(n) for n in df["workers"].unique())
    n0 = workers[0]
    numbers: dict[str, Any] = {}
    err = df["err_step"].abs()
    small = df[df["workers"] == n0]
    target = small[(small["rate_mbit"] <= 100) | small["link_bound"]]
    numbers["EEightCells"] = str(len(df))
    numbers["EEightSmallN"] = str(n0)
    numbers["EEightWithinTen"] = str(int((err <= TOLERANCE).sum()))
    if not target.empty:
        numbers["EEightTargetCells"] = str(len(target))
        numbers["EEightTargetWorst"] = fmt_num(100 * float(target["err_step"].abs().max()), 2)
        numbers["EEightTargetWithin"] = str(int((target["err_step"].abs() <= TOLERANCE).sum()))
    worst = df.assign(a=err).sort_values("a").iloc[-1]
    numbers["EEightWorstErr"] = fmt_num(100 * float(worst["err_step"]), 2)
    numbers["EEightWorstMethod"] = escape(str(worst["method"]))
    numbers["EEightWorstWhere"] = f"{fmt_num(worst['rate_mbit'])}\\,Mbit/s, N={int(worst['workers'])}"
    numbers["EEightNominalWorst"] = fmt_num(100 * float(small["err_step_nominal"].abs().max()), 2)
    nom = small.assign(a=small["err_step_nominal"].abs()).sort_values("a").iloc[-1]
    numbers["EEightNominalWorstMethod"] = escape(str(nom["method"]))
    probes = pd.DataFrame(b.get("probes", []))
    if not probes.empty:
        numbers["EEightOverheadMs"] = fmt_num(float(probes["overhead_ms"].median()), 2)
        numbers["EEightOverheadMin"] = fmt_num(float(probes["overhead_ms"].min()), 2)
        numbers["EEightOverheadMax"] = fmt_num(float(probes["overhead_ms"].max()), 2)
        for n in workers:
            p = probes[probes["workers"] == n]
            if not p.empty:
                key = {2: "Two", 3: "Three", 4: "Four", 8: "Eight"}.get(n, str(n))
                numbers[f"EEightComputeScale{key}"] = fmt_num(float(p["compute_scale"].median()), 2)
    if "implied_overhead_ms" in df:
        imp = df["implied_overhead_ms"].dropna()
        if not imp.empty:
            numbers["EEightImpliedMin"] = fmt_num(float(imp.min()), 2)
            numbers["EEightImpliedMax"] = fmt_num(float(imp.max()), 2)
            numbers["EEightImpliedCells"] = str(len(imp))
    same = df["loss_identical"].astype(bool)
    numbers["EEightLossIdentical"] = str(int(same.sum()))
    ttt = df[df["err_ttt"].notna()]
    if not ttt.empty:
        numbers["EEightTTTCells"] = str(len(ttt))
        numbers["EEightTTTWorst"] = fmt_num(100 * float(ttt["err_ttt"].abs().max()), 2)
    prov = b.get("provenance", {})
    numbers["EEightDate"] = escape(str(prov.get("date", "?"))[:10])
    numbers["EEightCommit"] = escape(str(prov.get("commit", "?"))[:10])
    numbers["EEightEmulation"] = escape(", ".join(sorted({str(e) for e in df["emulation"].dropna()})))
    by_method = df.assign(a=err).groupby("method", sort=False)["a"].max()
    worst_list = ", ".join(f"{escape(m)} {fmt_num(100 * v, 2)}\\,\\%" for m, v in by_method.items())

    parts = [
        r"We ran the same configuration, seed and number of steps on the simulator and on the testbed in "
        r"\EEightCells{} cells (links emulated with \EEightEmulation; measured \EEightDate{} at commit "
        r"\EEightCommit).",
        r"Probes before and after the testbed runs of each (rate, $N$) group measure two properties of this host "
        r"that the virtual clock did not know: the software's cost per message (median \EEightOverheadMs\,ms, "
        r"\EEightOverheadMin--\EEightOverheadMax\,ms across groups: Python, gloo and wake-ups on a 2-core "
        r"virtual machine) and how much slower the workers compute when they run at once on shared cores.",
    ]
    if "EEightComputeScaleFour" in numbers:
        parts.append(r"With four workers on two cores the model's step computes \EEightComputeScaleFour{} times "
                     r"slower than alone (two workers: \EEightComputeScaleTwo); the calibrated clock multiplies "
                     r"compute and compression by this factor, so the $N=4$ cells test a core-sharing model, not "
                     r"a machine per worker.")
    if "EEightTargetWorst" in numbers:
        parts.append(r"With both, the simulated step time is within 10\,\% in \EEightTargetWithin{} of the "
                     r"\EEightTargetCells{} cells with $N=\EEightSmallN$ at 10 and 100\,Mbit/s (and at "
                     r"1\,Gbit/s where the link dominates); the worst is \EEightTargetWorst\,\%.")
    parts.append(r"Over all cells \EEightWithinTen{} of \EEightCells{} are within 10\,\%; the largest error is "
                 r"\EEightWorstErr\,\% (\EEightWorstMethod, \EEightWorstWhere). Worst error per method: "
                 + worst_list + ".")
    parts.append(r"The uncalibrated clock (ideal stack, nominal rate) was off by up to \EEightNominalWorst\,\% "
                 r"(\EEightNominalWorstMethod): per-layer compressed exchanges send many small messages, and each "
                 r"costs the stack far more than its bytes.")
    if "EEightImpliedMin" in numbers:
        parts.append(r"Where a step sends many small messages, the per-message cost decides: the cost that the "
                     r"measured communication implies in those \EEightImpliedCells{} cells ((measured minus "
                     r"modelled wire time) over the latency terms) ranges from \EEightImpliedMin{} to "
                     r"\EEightImpliedMax\,ms, while the probes measured \EEightOverheadMin--\EEightOverheadMax\,ms; "
                     r"this spread, not the bytes, is what the clock misses there.")
    if "EEightTTTWorst" in numbers:
        parts.append(r"Time to the target accuracy, reached in \EEightTTTCells{} cells, is predicted within "
                     r"\EEightTTTWorst\,\%.")
    parts.append(r"Sim and testbed computed the same losses bit for bit in \EEightLossIdentical{} of "
                 r"\EEightCells{} cells.")
    return Section("e8", _table(df, rates, workers), " ".join(parts), numbers, _figure(df))
