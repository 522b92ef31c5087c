"""Training runs -> per-group statistics, re-timed at any link.

The sim backend's virtual clock is compute + (de)compression (measured) + communication (alpha-beta model
at the run's link). Communication is linear in the link's parameters, so every metrics line carries the
cumulative coefficients ``comm_alpha_terms`` (number of latency terms on the critical path) and
``comm_beta_bytes`` (bytes on the critical path): time at another link = compute + compress +
A * alpha + B * 8 / bandwidth. This is how one run answers for every bandwidth (E3, E4) without rerunning.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from lowbw.report.common import fmt_duration
from lowbw.report.experiment import MissingData
from lowbw.report.stats import censored, mean_std, welch
from lowbw.train.targets import Target, parse_target

__all__ = ["retime", "time_to_target", "eval_lines", "run_times", "group_times", "group_accuracy",
           "matching", "require_baseline", "ttt_cell"]


def retime(m: pd.DataFrame, mbit: float | None = None, latency_ms: float | None = None) -> pd.Series:
    """Virtual time (s) of each metrics line at a link of ``mbit`` Mbit/s and ``latency_ms`` one-way latency.

    ``mbit=None`` returns the time at the run's own link (``t_virtual``).
    """
    if mbit is None:
        return m["t_virtual"].astype(float)
    if "comm_alpha_terms" not in m or "comm_beta_bytes" not in m:
        raise ValueError("metrics lack comm_alpha_terms/comm_beta_bytes: cannot re-time at another link")
    alpha = (latency_ms or 0.0) / 1e3
    return (m["t_virtual_compute"].astype(float) + m["t_virtual_compress"].astype(float)
            + m["comm_alpha_terms"].astype(float) * alpha + m["comm_beta_bytes"].astype(float) * 8.0 / (mbit * 1e6))


def eval_lines(m: pd.DataFrame, metric: str = "test_acc") -> pd.DataFrame:
    """The metrics lines that carry an evaluation of ``metric``, in step order."""
    if metric not in m:
        return m.iloc[0:0]
    return m[m[metric].notna()].sort_values("step")


def _target(target: float | Target) -> Target:
    """A bare number is a test accuracy to reach (as in the config's ``targets:``)."""
    return target if isinstance(target, Target) else parse_target(float(target))


def first_at_target(m: pd.DataFrame, target: float | Target) -> pd.DataFrame:
    """The first metrics line whose evaluation reached ``target`` (a :class:`~lowbw.train.targets.Target`, or a
    test accuracy); an empty frame if none did."""
    t = _target(target)
    ev = eval_lines(m, t.metric)
    hit = ev[t.metric] >= t.value if t.op == ">=" else ev[t.metric] <= t.value
    return ev[hit].iloc[:1]


def time_to_target(m: pd.DataFrame, target: float | Target, mbit: float | None = None,
                   latency_ms: float | None = None) -> float:
    """Virtual seconds until the first evaluation that reached ``target`` (NaN if never)."""
    hit = first_at_target(m, target)
    if hit.empty:
        return float("nan")
    return float(retime(hit, mbit, latency_ms).iloc[0])


def run_times(runs: pd.DataFrame, metrics: pd.DataFrame, by: list[str], target: float | Target, mbits: list[float],
              latency_ms: float) -> pd.DataFrame:
    """Tidy: one row per run and bandwidth -- ``*by, seed, run, bandwidth_mbit, ttt_s`` (virtual seconds to
    ``target`` re-timed at that bandwidth; NaN: never reached)."""
    rows = []
    for _, r in runs.iterrows():
        m = metrics[metrics["run"] == r["run"]]
        for mb in mbits:
            rows.append({**{k: r[k] for k in by}, "seed": r["seed"], "run": r["run"], "bandwidth_mbit": float(mb),
                         "ttt_s": time_to_target(m, target, mb, latency_ms)})
    return pd.DataFrame(rows, columns=[*by, "seed", "run", "bandwidth_mbit", "ttt_s"])


def group_times(per_run: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    """Tidy: one row per group and bandwidth, over all its seeds (a seed that never reached the target counts,
    :func:`lowbw.report.stats.censored`): ``ttt_mean_s``/``ttt_std_s`` only where every seed reached it (NaN
    otherwise: a mean over the seeds that arrived is never taken), ``ttt_median_s`` and its bootstrap interval
    ``ttt_lo_s``/``ttt_hi_s`` (inf: half or more never arrived), ``seeds_reached`` and ``seeds``."""
    rows = []
    for key, g in per_run.groupby([*by, "bandwidth_mbit"], sort=False):
        t = g["ttt_s"].to_numpy(dtype=float)
        c = censored(t)
        rows.append({**dict(zip([*by, "bandwidth_mbit"], key)), "ttt_mean_s": c.mean,
                     "ttt_std_s": mean_std(t).std if c.all_arrived else math.nan, "ttt_median_s": c.median,
                     "ttt_lo_s": c.lo, "ttt_hi_s": c.hi, "seeds_reached": c.arrived, "seeds": c.n})
    return pd.DataFrame(rows)


def ttt_cell(r) -> str:
    """A table cell for one group's time to target (a row of :func:`group_times`): the mean when every seed
    reached the target; else the median over all seeds with the arrivals, ``(k/n)``, or ``--`` when that
    median is not reached (half or more never arrived)."""
    k, n = int(r["seeds_reached"]), int(r["seeds"])
    if k == n and n:
        return fmt_duration(r["ttt_mean_s"])
    med = float(r["ttt_median_s"])
    return ("--" if not math.isfinite(med) else "median " + fmt_duration(med)) + (f" ({k}/{n})" if k else "")


def matching(runs: pd.DataFrame, config: dict[str, Any]) -> np.ndarray:
    """Which of ``runs`` have every key of ``config`` at its value (a boolean mask over the rows)."""
    return np.logical_and.reduce([runs[k] == v for k, v in config.items()])


def require_baseline(runs: pd.DataFrame, baseline: dict[str, Any], source: str, within: tuple[str, ...] = ()) -> None:
    """Raise :class:`~lowbw.report.experiment.MissingData` unless ``runs`` (from ``source``, e.g. ``runs/e4_lm``)
    hold a completed run of the ``baseline`` group, and one for every value of the ``within`` columns (e.g. each
    number of workers, where the comparison is made within it): every comparison needs its baseline."""
    is_base = matching(runs, baseline)
    cells = sorted(set(zip(*(runs[k] for k in within)))) if within else [()]
    have = set(zip(*(runs.loc[is_base, k] for k in within))) if within else ({()} if is_base.any() else set())
    lacking = [c for c in cells if c not in have]
    if lacking:
        what = ", ".join(f"{k}={v}" for k, v in baseline.items())
        where = " with " + " or ".join(", ".join(f"{k}={v}" for k, v in zip(within, c)) for c in lacking) \
            if within else ""
        raise MissingData(f"{source} has no completed run of its baseline {what}{where}")


def group_accuracy(runs: pd.DataFrame, by: list[str], baseline: dict[str, Any] | None = None,
                   metric: str = "test_acc") -> pd.DataFrame:
    """Tidy: one row per group (over seeds) -- the final ``metric`` (``test_acc``: fractions; ``val_loss``:
    nats/char) as ``<metric>_mean``/``<metric>_std``, ``seeds``, ``bytes_per_worker_step`` (bytes sent per
    worker and step, mean over seeds), ``bytes_per_worker_epoch`` (per epoch of the training data), and against
    the ``baseline`` group Welch's ``p_vs_baseline`` and ``significant`` (p < 0.05)."""
    rows = []
    base_acc = None
    final = f"final_{metric}"
    if baseline is not None:
        base_acc = runs.loc[matching(runs, baseline), final].to_numpy(dtype=float)
    for key, g in runs.groupby(by, sort=False):
        key = key if isinstance(key, tuple) else (key,)
        acc = mean_std(g[final])
        row: dict[str, Any] = dict(zip(by, key))
        row.update({f"{metric}_mean": acc.mean, f"{metric}_std": acc.std, "seeds": acc.n,
                    "bytes_per_worker_step": float((g["bytes_sent_per_worker"] / g["step"].clip(lower=1)).mean())})
        if "epoch" in g:  # per epoch: what a larger batch saves (its steps send as much each, but fewer of them)
            row["bytes_per_worker_epoch"] = float((g["bytes_sent_per_worker"] / g["epoch"].astype(float)).mean())
        if base_acc is not None:
            t = welch(g[final].to_numpy(dtype=float), base_acc)
            row.update(p_vs_baseline=t.p, significant=t.significant)
        rows.append(row)
    return pd.DataFrame(rows)
