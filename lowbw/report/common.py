"""What several experiments of the report share: units, the plotting style, the training runs of an
experiment, the report's link settings, the models' printed names."""

from __future__ import annotations

import matplotlib
import matplotlib.pyplot as plt
import pandas as pd
import seaborn as sns

from lowbw.report.experiment import Context
from lowbw.report.latex import fmt_num
from lowbw.runs.results import load_metrics, load_runs

__all__ = ["fmt_duration", "plotting", "training_runs", "report_links", "target_acc"]


def fmt_duration(seconds: float) -> str:
    """Seconds -> '850 ms', '12.3 s', '4.2 min', '3.1 h', '2.4 d', '1.3 y'."""
    if seconds != seconds:
        return "--"
    for unit, size in (("y", 365 * 86400), ("d", 86400), ("h", 3600), ("min", 60), ("s", 1)):
        if seconds >= size:
            return f"{fmt_num(seconds / size, 2 if seconds / size < 10 else 3)} {unit}"
    return f"{fmt_num(seconds * 1e3, 2)} ms"


def plotting():
    """matplotlib (Agg) and seaborn in the paper's style."""
    matplotlib.use("Agg")
    sns.set_theme(context="paper", style="whitegrid", font_scale=0.9)
    return plt, sns


def training_runs(ctx: Context, experiments: list[str]):
    """(runs, metrics) DataFrames of the named experiments' completed runs, or (None, None)."""
    runs, mets = [], []
    for e in experiments:
        d = ctx.runs_dir / e
        if d.is_dir():
            runs.append(load_runs(d).assign(experiment=e))
            mets.append(load_metrics(d).assign(experiment=e))
    if not runs:
        return None, None
    return pd.concat(runs, ignore_index=True), pd.concat(mets, ignore_index=True)


def report_links(ctx: Context) -> tuple[list[float], float, float]:
    """(bandwidths to re-time at in Mbit/s, latency in ms, the focus bandwidth) of the report config."""
    r = ctx.config.get("report") or {}
    return list(r.get("bandwidths_mbit", [1, 10, 100, 1000])), float(r.get("latency_ms", 0.5)), float(
        r.get("focus_mbit", 10))


def target_acc(ctx: Context, runs) -> float:
    """The target test accuracy (fraction) of the runs' dataset (``targets:`` of the config; 0.9 if unset)."""
    ds = runs["dataset"].iloc[0]
    return float((ctx.config.get("targets") or {}).get(ds, 0.9))
