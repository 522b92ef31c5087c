"""E3 -- bandwidth against training time, dense: the theoretical minimum training time per model at
accelerator speed (``runs/bench/models.json`` + the cost model) and the communication share of the measured
dense runs (``runs/e3_dense``)."""

from __future__ import annotations

import pandas as pd

from lowbw.net.costmodel import LinkParams, min_training_time
from lowbw.report.catalog import E3_RUN_MODELS, word
from lowbw.report.common import fmt_duration, plotting, report_links, training_runs
from lowbw.report.conditions import MARK, caption
from lowbw.report.experiment import Context, Experiment, Stats
from lowbw.report.figures import legend_below
from lowbw.report.latex import booktabs, escape, fmt_num
from lowbw.report.training import retime
from lowbw.train.workload_specs import pretty_model

__all__ = ["E3", "accel_sample_s", "ACCEL_REF"]

E3_MODELS = ("resnet20", "vgg16", "resnet50", "inception_v4", "vgg16_imagenet")
PROSE_MODEL = "resnet50"  # the model the findings quote (the last measured one if absent)

# Accelerator-class compute: the blog seed's table (RTX 2080 Ti, batch 32): ResNet-50 330 ms per iteration.
# Other models: that time scaled by the models' compute ratio measured on this machine (an estimate, labelled).
ACCEL_REF = {"model": "resnet50", "device": "RTX 2080 Ti", "sample_s": 0.330 / 32,
             "source": "blog seed, iteration time at batch 32"}


def accel_sample_s(rows: list[dict]) -> dict[str, float]:
    """Seconds per training sample on an accelerator for every model of models.json ({} without ResNet-50)."""
    ref = next((r for r in rows if r["model"] == ACCEL_REF["model"]), None)
    if ref is None:
        return {}
    return {r["model"]: ACCEL_REF["sample_s"] * r["sample_s"] / ref["sample_s"] for r in rows}


def _minimum(bench: dict, n: int, bws: list[float]):
    """Tidy: one row per (model, bandwidth): the minimum training time ``min_s`` of the reference schedule
    with ``n`` workers (compute at accelerator speed, all-reduce at the bandwidth-optimal bound, fully
    overlapped), what bounds it, and the pure compute times on the accelerator and on this CPU."""
    accel = accel_sample_s(bench["rows"])
    recs = []
    for r in bench["rows"]:
        if r["model"] not in E3_MODELS:
            continue
        cpu = r["sample_s"] * r["ref_global_batch"] / n  # per-worker share of the global batch, this CPU
        compute = accel.get(r["model"], r["sample_s"]) * r["ref_global_batch"] / n
        for bw in bws:
            m = min_training_time(r["ref_steps"], compute, r["grad_bytes"], n, LinkParams(0.0, bw * 1e6))
            recs.append({"model": r["model"], "params_m": r["params"] / 1e6, "grad_mb": r["grad_bytes"] / 1e6,
                         "bandwidth_mbit": float(bw), "min_s": m["min_s"], "bound": m["bound"],
                         "compute_cpu_s": r["ref_steps"] * cpu,
                         "busy": bool((r.get("conditions") or {}).get("busy")),
                         "compute_accel_s": r["ref_steps"] * compute if accel else float("nan")})
    return pd.DataFrame(recs), bool(accel)


def _dense_split(ctx: Context, mbits: list[float], lat: float):
    """Tidy: one row per (model, bandwidth): the share of a step spent communicating (%) and the step time
    (ms) of the measured dense runs re-timed at that bandwidth, mean over seeds; None without runs."""
    runs, mets = training_runs(ctx, ["e3_dense"])
    if runs is None:
        return None, None
    recs = []
    for _, r in runs.iterrows():
        word(E3_RUN_MODELS, r["model"], "E3 dense run model")
        last = mets[mets["run"] == r["run"]].sort_values("step").iloc[[-1]]
        compute = float(last["t_virtual_compute"].iloc[0] + last["t_virtual_compress"].iloc[0])
        for mb in mbits:
            total = float(retime(last, mb, lat).iloc[0])
            recs.append({"model": r["model"], "bandwidth_mbit": float(mb),
                         "comm_share_pct": 100 * (total - compute) / total, "step_ms": 1e3 * total / r["step"]})
    agg = pd.DataFrame(recs).groupby(["model", "bandwidth_mbit"], as_index=False).mean(numeric_only=True)
    return agg, int(runs["workers"].iloc[0])


def stats(ctx: Context) -> Stats | None:
    bench = ctx.bench("models")
    if not bench:
        return None
    n = int((ctx.config.get("report") or {}).get("min_time_workers", 8))
    mbits, lat, _ = report_links(ctx)
    minimum, has_accel = _minimum(bench, n, mbits)
    split, dense_workers = _dense_split(ctx, mbits, lat)
    tables = {"minimum": minimum} | ({"dense_split": split} if split is not None else {})
    return Stats(tables, {"source": "runs/bench/models.json, runs/e3_dense", "provenance": bench["provenance"],
                          "conditions": bench.get("conditions"),
                          "workers": n, "accel": ACCEL_REF if has_accel else None, "dense_workers": dense_workers,
                          "latency_ms": lat})


def numbers(st: Stats) -> dict[str, str]:
    mn = st.tables["minimum"]
    present = list(dict.fromkeys(mn["model"]))
    model = PROSE_MODEL if PROSE_MODEL in present else present[-1]
    lo, hi = mn["bandwidth_mbit"].min(), mn["bandwidth_mbit"].max()
    m = mn[mn["model"] == model].set_index("bandwidth_mbit")
    accel = st.meta["accel"] is not None
    out = {"EThreeWorkers": str(st.meta["workers"]), "EThreeModel": escape(pretty_model(model)),
           "EThreeAccel": escape(ACCEL_REF["device"]) if accel else escape("the measuring CPU"),
           "EThreeLowMbit": fmt_num(lo), "EThreeHighMbit": fmt_num(hi),
           "EThreeMinLow": fmt_duration(m.loc[lo, "min_s"]), "EThreeMinHigh": fmt_duration(m.loc[hi, "min_s"]),
           "EThreeComputeCpu": fmt_duration(m["compute_cpu_s"].iloc[0]),
           "EThreeComputeAccel": fmt_duration(m["compute_accel_s" if accel else "compute_cpu_s"].iloc[0])}
    if "dense_split" in st.tables:
        sp = st.tables["dense_split"]
        out["EThreeDenseWorkers"] = str(st.meta["dense_workers"])
        for key, g in sp.groupby("model"):
            g = g.set_index("bandwidth_mbit")["comm_share_pct"]
            w = word(E3_RUN_MODELS, key, "E3 dense run model")
            out[f"EThreeComm{w}Low"] = fmt_num(g.loc[g.index.min()], 3)
            out[f"EThreeComm{w}High"] = fmt_num(g.loc[g.index.max()], 3)
    return out


def table(st: Stats) -> str:
    mn = st.tables["minimum"]
    bws = sorted(mn["bandwidth_mbit"].unique())
    accel = st.meta["accel"] is not None
    rows, marked = [], 0
    for model, g in mn.groupby("model", sort=False):
        g = g.set_index("bandwidth_mbit")
        r = g.iloc[0]
        busy = bool(r.get("busy", False))
        marked += busy
        rows.append([escape(pretty_model(model)), fmt_num(r["params_m"], 3), fmt_num(r["grad_mb"], 3),
                     fmt_duration(r["compute_cpu_s"]) + (MARK if busy else ""),
                     fmt_duration(r["compute_accel_s"]) if accel else "--"]
                    + [fmt_duration(g.loc[bw, "min_s"]) + ("" if g.loc[bw, "bound"] == "compute" else r"$^\dagger$")
                       for bw in bws])
    header = ["Model", "Params (M)", "Grad (MB)", "Compute (this CPU)", "Compute (accel.)"] + [
        f"{fmt_num(b)} Mbit/s" for b in bws]
    return booktabs(
        rows, header,
        f"Theoretical minimum training time of the reference schedules with {st.meta['workers']} workers: "
        r"computation of an accelerator (\EThreeAccel: ResNet-50's published 330\,ms per iteration at batch 32, "
        "the other models scaled by their compute ratio measured on the CPU below), communication at the "
        r"bandwidth-optimal all-reduce bound, fully overlapped. $^\dagger$: communication-bound. For reference, "
        f"the pure computation on the CPU that measured them ({escape(st.meta['provenance']['cpu'])})."
        + caption(st.meta.get("conditions"), st.meta["provenance"], marked), "tab:e3",
        size=r"\scriptsize")


def figure(st: Stats):
    """Left: minimum training time per reference model against bandwidth; right (where measured): the
    communication share of the measured dense runs. One colour per model across both panels and one legend
    below them: inside the left panel it covered the smallest model's line."""
    plt, sns = plotting()
    split = st.tables.get("dense_split")
    fig, axes = plt.subplots(1, 2 if split is not None else 1, figsize=(7.2 if split is not None else 4.2, 2.8),
                             squeeze=False)
    mn = st.tables["minimum"]
    d = mn.assign(model=[pretty_model(m) for m in mn["model"]], days=mn["min_s"] / 86400)
    s = split.assign(model=[pretty_model(m) for m in split["model"]]) if split is not None else None
    models = list(dict.fromkeys(list(d["model"]) + (list(s["model"]) if s is not None else [])))
    palette = dict(zip(models, sns.color_palette("deep", len(models))))
    sns.lineplot(data=d, x="bandwidth_mbit", y="days", hue="model", palette=palette, marker="o", ax=axes[0, 0])
    axes[0, 0].set(xscale="log", yscale="log", xlabel="bandwidth per worker (Mbit/s)",
                   ylabel="minimum training time (days)")
    if s is not None:
        sns.lineplot(data=s, x="bandwidth_mbit", y="comm_share_pct", hue="model", palette=palette, marker="o",
                     ax=axes[0, 1])
        axes[0, 1].set(xscale="log", xlabel="bandwidth per worker (Mbit/s)",
                       ylabel="communication share of a step (%)", title="measured dense runs")
    entries = {}
    for ax in axes.flat:
        entries.update(zip(*reversed(ax.get_legend_handles_labels())))
        ax.get_legend().remove()
    legend_below(fig, list(entries.values()), list(entries), max_cols=len(entries))
    return fig


E3 = Experiment("e3", "E3 dense training time", stats, numbers, table, figure, "runs/bench/models.json absent")
