"""E3 -- bandwidth against training time, dense: the theoretical minimum training time per model at
accelerator speed (runs/bench/models.json + the cost model) and the communication share of the measured
dense runs."""

from __future__ import annotations

from lowbw.report.build import Context, Section, missing_section
from lowbw.report.common import PRETTY, fmt_duration, plotting, report_links, training_runs
from lowbw.report.latex import booktabs, escape, fmt_num, macro_name

__all__ = ["e3", "accel_sample_s", "ACCEL_REF"]

E3_MODELS = ("resnet20", "vgg16", "resnet50", "inception_v4", "vgg16_imagenet")


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


def e3_minimum(ctx: Context) -> tuple[list[list[str]], dict[str, str], object] | None:
    """Theoretical minimum training time per model and bandwidth (from bench/models.json + cost model), with
    accelerator-class compute (:data:`ACCEL_REF`); this machine's CPU compute is a labelled column."""
    import pandas as pd

    from lowbw.net.costmodel import LinkParams, min_training_time

    bench = ctx.bench("models")
    if not bench:
        return None
    cfg = ctx.config.get("report", {})
    n = int(cfg.get("min_time_workers", 8))
    bws = list(cfg.get("bandwidths_mbit", [1, 10, 100, 1000, 10000]))
    accel = accel_sample_s(bench["rows"])
    rows, numbers, recs = [], {}, []
    for r in bench["rows"]:
        if r["model"] not in E3_MODELS:
            continue
        cpu = r["sample_s"] * r["ref_global_batch"] / n  # per-worker share of the global batch, this CPU
        compute = accel.get(r["model"], r["sample_s"]) * r["ref_global_batch"] / n
        cells = [escape(PRETTY.get(r["model"], r["model"])), fmt_num(r["params"] / 1e6, 3),
                 fmt_num(r["grad_bytes"] / 1e6, 3), fmt_duration(r["ref_steps"] * cpu),
                 fmt_duration(r["ref_steps"] * compute) if accel else "--"]
        for bw in bws:
            m = min_training_time(r["ref_steps"], compute, r["grad_bytes"], n, LinkParams(0.0, bw * 1e6))
            cells.append(fmt_duration(m["min_s"]) + ("" if m["bound"] == "compute" else r"$^\dagger$"))
            recs.append({"model": PRETTY.get(r["model"], r["model"]), "mbit": bw, "days": m["min_s"] / 86400,
                         "compute_days": m["compute_bound_s"] / 86400})
            numbers[macro_name("EThree", r["model"], "min", bw)] = fmt_duration(m["min_s"])
        numbers[macro_name("EThree", r["model"], "computebound")] = fmt_duration(r["ref_steps"] * cpu)
        if accel:
            numbers[macro_name("EThree", r["model"], "computeboundaccel")] = fmt_duration(r["ref_steps"] * compute)
        rows.append(cells)
    numbers["EThreeWorkers"] = str(n)
    numbers["EThreeAccel"] = escape(ACCEL_REF["device"]) if accel else escape("this machine's CPU")
    plt, sns = plotting()
    df = pd.DataFrame(recs)
    fig, ax = plt.subplots(figsize=(4.2, 2.8))
    sns.lineplot(data=df, x="mbit", y="days", hue="model", marker="o", ax=ax)
    ax.set(xscale="log", yscale="log", xlabel="bandwidth per worker (Mbit/s)",
           ylabel="minimum training time (days)")
    ax.legend(fontsize=7)
    header = ["Model", "Params (M)", "Grad (MB)", "Compute (this CPU)", "Compute (accel.)"] + [
        f"{fmt_num(b)} Mbit/s" for b in bws]
    return [header] + rows, numbers, fig


def e3_measured_split(ctx: Context):
    """Dense quick-profile runs: share of a step spent communicating at every report bandwidth."""
    import pandas as pd

    from lowbw.report.training import retime

    runs, mets = training_runs(ctx, ["e3_dense"])
    if runs is None:
        return None
    mbits, lat, _ = report_links(ctx)
    recs, numbers = [], {}
    for _, r in runs.iterrows():
        last = mets[mets["run"] == r["run"]].sort_values("step").iloc[[-1]]
        compute = float(last["t_virtual_compute"].iloc[0] + last["t_virtual_compress"].iloc[0])
        for mb in mbits:
            total = float(retime(last, mb, lat).iloc[0])
            recs.append({"model": PRETTY.get(r["model"], r["model"]), "key": r["model"], "mbit": mb,
                         "comm_share": 100 * (total - compute) / total, "step_ms": 1e3 * total / r["step"]})
    df = pd.DataFrame(recs)
    agg = df.groupby(["key", "model", "mbit"], as_index=False).mean(numeric_only=True)
    for _, a in agg.iterrows():
        numbers[macro_name("EThree", a["key"], "comm", fmt_num(a["mbit"]).replace("{,}", ""))] = fmt_num(
            a["comm_share"], 3)
    lo, hi = min(mbits), max(mbits)
    parts = []
    for key, g in agg.groupby("key"):
        m_lo = "\\" + macro_name("EThree", key, "comm", fmt_num(lo).replace("{,}", ""))
        m_hi = "\\" + macro_name("EThree", key, "comm", fmt_num(hi).replace("{,}", ""))
        parts.append(f"{escape(g['model'].iloc[0])} {m_lo}\\,\\% at {fmt_num(lo)}\\,Mbit/s and {m_hi}\\,\\% at "
                     f"{fmt_num(hi)}\\,Mbit/s")
    n = int(runs["workers"].iloc[0])
    sentence = (f"In the measured dense runs of the quick profile ({n} workers, ring all-reduce, no overlap), the "
                "share of a step spent communicating is " + "; ".join(parts) + ".")
    return numbers, sentence, agg


def e3(ctx: Context) -> Section:
    got = e3_minimum(ctx)
    if got is None:
        return missing_section("e3", "E3 dense training time", "runs/bench/models.json absent")
    table_rows, numbers, fig = got
    header, rows = table_rows[0], table_rows[1:]
    prov = ctx.bench("models")["provenance"]
    n = numbers["EThreeWorkers"]
    table = booktabs(
        rows, header,
        f"Theoretical minimum training time of the reference schedules with {n} workers: computation of an "
        r"accelerator (\EThreeAccel: ResNet-50's published 330\,ms per iteration at batch 32, the other models "
        f"scaled by their compute ratio measured on this machine), communication at the bandwidth-optimal "
        r"all-reduce bound, fully overlapped. $^\dagger$: communication-bound. For reference, the pure "
        f"computation on this machine's CPU ({escape(prov['cpu'])}).", "tab:e3", size=r"\scriptsize")
    bws = list((ctx.config.get("report") or {}).get("bandwidths_mbit", [1, 10, 100, 1000, 10000]))
    present = [r["model"] for r in ctx.bench("models")["rows"] if r["model"] in E3_MODELS]
    model = "resnet50" if "resnet50" in present else present[-1]
    lo, hi = min(bws), max(bws)
    m_lo = "\\" + macro_name("EThree", model, "min", lo)
    m_hi = "\\" + macro_name("EThree", model, "min", hi)
    m_cb = "\\" + macro_name("EThree", model, "computebound")
    accel_key = macro_name("EThree", model, "computeboundaccel")
    m_acc = "\\" + accel_key if accel_key in numbers else m_cb
    findings = (
        f"With {n} workers computing at the speed of an \\EThreeAccel{{}} and communication perfectly "
        f"overlapped, {escape(PRETTY.get(model, model))}'s reference "
        f"schedule needs at least {m_lo}{{}} at {fmt_num(lo)}\\,Mbit/s and {m_hi}{{}} at {fmt_num(hi)}\\,Mbit/s "
        f"per worker, against {m_acc}{{}} of pure computation (Table~\\ref{{tab:e3}}; "
        "$^\\dagger$ marks the settings where communication, not computation, bounds the time); on this "
        f"machine's CPU the computation alone would take {m_cb}."
    )
    split = e3_measured_split(ctx)
    if split is not None:
        sn, sentence, df = split
        numbers.update(sn)
        findings += " " + sentence
        import seaborn as sns

        fig.set_size_inches(7.2, 2.8)
        fig.axes[0].set_position([0.08, 0.15, 0.38, 0.75])
        a1 = fig.add_axes([0.58, 0.15, 0.38, 0.75])
        sns.lineplot(data=df, x="mbit", y="comm_share", hue="model", marker="o", ax=a1)
        a1.set(xscale="log", xlabel="bandwidth per worker (Mbit/s)", ylabel="communication share of a step (%)",
               title="measured dense runs (quick profile)")
        a1.legend(fontsize=7)
    return Section("e3", table, findings, numbers, fig)
