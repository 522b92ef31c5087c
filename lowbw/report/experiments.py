"""One function per experiment of the paper: ``eN(ctx) -> Section`` (table, figure, findings, numbers).

Each reads only measured data (``runs/bench/*.json`` and training run directories) and formats it; any
experiment whose inputs are absent in the current profile produces a section that says so.
"""

from __future__ import annotations

from collections.abc import Callable

from lowbw.report.build import Context, Section, missing_section
from lowbw.report.latex import booktabs, escape, fmt_num, macro_name

__all__ = ["ALL", "fmt_duration"]


def fmt_duration(seconds: float) -> str:
    """Seconds -> '850 ms', '12.3 s', '4.2 min', '3.1 h', '2.4 d', '1.3 y'."""
    if seconds != seconds:
        return "--"
    for unit, size in (("y", 365 * 86400), ("d", 86400), ("h", 3600), ("min", 60), ("s", 1)):
        if seconds >= size:
            return f"{fmt_num(seconds / size, 2 if seconds / size < 10 else 3)} {unit}"
    return f"{fmt_num(seconds * 1e3, 2)} ms"


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import seaborn as sns

    sns.set_theme(context="paper", style="whitegrid", font_scale=0.9)
    return plt, sns


# --------------------------------------------------------------------------------------------- E3
E3_MODELS = ("resnet20", "vgg16", "resnet50", "inception_v4", "vgg16_imagenet")
PRETTY = {"mlp": "MLP", "cnn": "Small CNN", "resnet20": "ResNet-20", "vgg16": "VGG-16 (CIFAR)",
          "resnet50": "ResNet-50", "inception_v4": "Inception-v4", "vgg16_imagenet": "VGG-16 (ImageNet)"}


def e3_minimum(ctx: Context) -> tuple[list[list[str]], dict[str, str], object] | None:
    """Theoretical minimum training time per model and bandwidth (from bench/models.json + cost model)."""
    import pandas as pd

    from lowbw.net.costmodel import LinkParams, min_training_time

    bench = ctx.bench("models")
    if not bench:
        return None
    cfg = ctx.config.get("report", {})
    n = int(cfg.get("min_time_workers", 8))
    bws = list(cfg.get("bandwidths_mbit", [1, 10, 100, 1000, 10000]))
    rows, numbers, recs = [], {}, []
    for r in bench["rows"]:
        if r["model"] not in E3_MODELS:
            continue
        compute = r["sample_s"] * r["ref_global_batch"] / n  # per-worker share of the global batch
        cells = [escape(PRETTY.get(r["model"], r["model"])), fmt_num(r["params"] / 1e6, 3),
                 fmt_num(r["grad_bytes"] / 1e6, 3), fmt_duration(r["ref_steps"] * compute)]
        for bw in bws:
            m = min_training_time(r["ref_steps"], compute, r["grad_bytes"], n, LinkParams(0.0, bw * 1e6))
            cells.append(fmt_duration(m["min_s"]) + ("" if m["bound"] == "compute" else r"$^\dagger$"))
            recs.append({"model": PRETTY.get(r["model"], r["model"]), "mbit": bw, "days": m["min_s"] / 86400,
                         "compute_days": m["compute_bound_s"] / 86400})
            numbers[macro_name("EThree", r["model"], "min", bw)] = fmt_duration(m["min_s"])
        numbers[macro_name("EThree", r["model"], "computebound")] = fmt_duration(r["ref_steps"] * compute)
        rows.append(cells)
    numbers["EThreeWorkers"] = str(n)
    plt, sns = _plt()
    df = pd.DataFrame(recs)
    fig, ax = plt.subplots(figsize=(4.2, 2.8))
    sns.lineplot(data=df, x="mbit", y="days", hue="model", marker="o", ax=ax)
    ax.set(xscale="log", yscale="log", xlabel="bandwidth per worker (Mbit/s)",
           ylabel="minimum training time (days)")
    ax.legend(fontsize=7)
    header = ["Model", "Params (M)", "Grad (MB)", "Compute-bound"] + [f"{fmt_num(b)} Mbit/s" for b in bws]
    return [header] + rows, numbers, fig


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
        f"Theoretical minimum training time of the reference schedules with {n} workers: computation measured "
        f"on this machine ({escape(prov['cpu'])}), communication at the bandwidth-optimal all-reduce bound, fully "
        r"overlapped. $^\dagger$: communication-bound.", "tab:e3", size=r"\scriptsize")
    findings = (
        f"With {n} workers and communication perfectly overlapped, ResNet-50's reference schedule needs at least "
        r"\EThreeResnetFiveZeroMinOne{} at 1\,Mbit/s and \EThreeResnetFiveZeroMinOneZeroZeroZero{} at "
        r"1\,Gbit/s per worker, against \EThreeResnetFiveZeroComputebound{} of pure computation on this "
        r"machine (Table~\ref{tab:e3})."
    )
    return Section("e3", table, findings, numbers, fig)


def _missing(key: str, title: str) -> Callable[[Context], Section]:
    return lambda ctx: missing_section(key, title, "not implemented in the report yet")


ALL: dict[str, Callable[[Context], Section]] = {
    "e1": _missing("e1", "E1 collectives"),
    "e2": _missing("e2", "E2 compressors"),
    "e3": e3,
    "e4": _missing("e4", "E4 compression in training"),
    "e5": _missing("e5", "E5 batch size"),
    "e6": _missing("e6", "E6 local SGD and data assignment"),
    "e7": _missing("e7", "E7 fluctuating bandwidth"),
}
