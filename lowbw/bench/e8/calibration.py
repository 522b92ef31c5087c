"""The calibration of the virtual clock that E8's probe yields for one cell: the probe's samples pooled
(:func:`probe_summary`), the per-message cost read at the cell's CPU gap (:func:`overhead_at`), the compute
factor of workers that wait for each other once every H steps (:func:`compute_scale_over`), and the facts of
the cell's uncalibrated sim run these need (calls, CPU work and bytes per step, steps between
synchronisations, the sequence of calls the probe replays)."""

from __future__ import annotations

import math
import statistics
from pathlib import Path
from typing import Any

from lowbw.bench.e8.grid import GOODPUT, metrics_lines, train_window
from lowbw.measure.colocation import compute_scale_over

__all__ = ["probe_summary", "overhead_at", "compute_scale_over", "cell_calls_per_step", "cell_gap_ms",
           "cell_wire_s", "cell_sequence", "cell_steps_per_sync", "cell_calibration"]


# ----------------------------------------------------------------------------------------------- the probe's samples
def probe_summary(samples: list[dict[str, Any]], workers: int) -> dict[str, Any]:
    """The pooled samples of several probes: the per-message overhead curve (mean ms against the busy gap
    before each call, ms; ``overhead_ms`` its back-to-back point), the compute factor of a synchronous step
    (mean of each rep's slowest worker / mean alone)."""
    per_gap: dict[float, list[float]] = {}
    for s in samples:
        by_gap = s.get("allgather_by_gap_s") or {"0": s.get("allgather_s", [])}  # files before the curve
        for gap, xs in by_gap.items():
            per_gap.setdefault(float(gap), []).extend(xs)
    rounds = 2 * (workers - 1)
    # the mean, not the median: a step's communication is a sum of per-message costs, hiccups included
    curve = [[gap, statistics.fmean(xs) / rounds * 1e3 if workers > 1 else 0.0]
             for gap, xs in sorted(per_gap.items()) if xs]
    seq = [x for s in samples for x in s.get("sequence_s", [])]  # per rep, the mean call of the sequence
    last_in = [x for s in samples for x in s.get("sequence_last_in_s", [])]
    by_call = [s["sequence_by_call_s"] for s in samples if s.get("sequence_by_call_s")]
    pp = [x for s in samples for x in s.get("pingpong_s", [])]
    alone = [x for s in samples for x in s["compute_alone_s"]]
    together = [x for s in samples for x in s["compute_together_s"]]
    c_alone = [x for s in samples for x in s.get("compress_alone_s", [])]
    c_together = [x for s in samples for x in s.get("compress_together_s", [])]
    ex_work = [x for s in samples for x in s.get("exchange_work_s", [])]
    ex_calls = [x / s["exchange_calls"] for s in samples for x in s.get("exchange_calls_s", [])]  # per call
    c_apart = (statistics.fmean(c_together) / statistics.fmean(c_alone) if c_alone and c_together else None)
    return {"overhead_ms": curve[0][1], "overhead_curve": curve,
            "overhead_pingpong_ms": statistics.median(pp) * 1e3 if pp else None,
            # the per-message cost of the cell's own sequence of calls and CPU gaps (None: not probed)
            "overhead_sequence_ms": statistics.fmean(seq) / rounds * 1e3 if seq and workers > 1 else None,
            "overhead_by_call_ms": ([statistics.fmean(xs) / rounds * 1e3 for xs in zip(*by_call)]
                                    if by_call and workers > 1 else None),
            # the calls alone (each timed on the rank that came last into it), without the waits for a peer
            "overhead_sequence_last_in_ms": (statistics.fmean(last_in) / rounds * 1e3
                                             if last_in and workers > 1 else None),
            # means, as the clock sums a step's compute; per rep the slowest of the N (a synchronous step
            # waits for it), so hiccups on any worker count as they do in the cell
            "compute_alone_s": statistics.fmean(alone), "compute_together_s": statistics.fmean(together),
            "compute_scale": statistics.fmean(together) / statistics.fmean(alone),
            # the same for the cell's compression (None: not probed, the clock then takes compute_scale): in
            # the cell's exchange in situ where the probe made it (its work between real messages), else
            # compressing with no messages in between (compress_scale_apart, recorded either way)
            "compress_scale": (statistics.fmean(ex_work) / statistics.fmean(c_alone) if ex_work and c_alone
                               else c_apart),
            "compress_scale_apart": c_apart,
            # the per-message cost of the cell's exchange in situ: the compressor's real work between tiny real
            # messages, timed inside the calls of the worker whose work took longest (None: not made)
            "overhead_exchange_ms": (statistics.fmean(ex_calls) / rounds * 1e3 if ex_calls and workers > 1
                                     else None),
            "samples": samples}


def overhead_at(curve: list[list[float]], gap_ms: float) -> float:
    """The per-message overhead (ms) after ``gap_ms`` of CPU work: linear between the probed gaps of
    ``curve`` ([[gap_ms, overhead_ms], ...], sorted), the end values beyond them."""
    if not curve:
        raise ValueError("empty overhead curve")
    if gap_ms <= curve[0][0]:
        return float(curve[0][1])
    for (g0, o0), (g1, o1) in zip(curve, curve[1:]):
        if gap_ms <= g1:
            return float(o0 + (o1 - o0) * (gap_ms - g0) / (g1 - g0))
    return float(curve[-1][1])


# ----------------------------------------------------------------------------------------------- the cell's sim run
def _per_step(sim_dir: Path, steps: int, workers: int) -> tuple[float, float, float]:
    """(calls, CPU seconds of compute, of compression) per step of a cell's sim run: the calls the run counted
    (``messages``); in a run from before that count, its latency terms / 2 (N-1) (an all-gather's sizes and
    payload, a ring all-reduce's two phases)."""
    s0, s1 = train_window(metrics_lines(sim_dir), steps)
    n = s1["step"] - s0["step"]
    compute, compress = ((s1[f"t_virtual_{k}"] - s0[f"t_virtual_{k}"]) / n for k in ("compute", "compress"))
    if "messages" in s0 and "messages" in s1:
        return (s1["messages"] - s0["messages"]) / n, compute, compress
    return (s1["comm_alpha_terms"] - s0["comm_alpha_terms"]) / (2 * (workers - 1)) / n, compute, compress


def cell_calls_per_step(sim_dir: Path, steps: int, workers: int) -> float:
    """The cell's calls per step, from its sim run."""
    return _per_step(sim_dir, steps, workers)[0]


def cell_gap_ms(sim_dir: Path, steps: int, workers: int) -> float:
    """The cell's mean CPU work between consecutive calls (ms), from its sim run: (compute + compress per
    step) / (calls per step); infinite for a cell without calls."""
    calls, compute, compress = _per_step(sim_dir, steps, workers)
    return (compute + compress) / calls * 1e3 if calls > 0 else math.inf


def cell_wire_s(sim_dir: Path, steps: int, workers: int, rate: float) -> float:
    """The cell's critical-path bytes per step at the link's goodput (s), from its sim run."""
    s0, s1 = train_window(metrics_lines(sim_dir), steps)
    return ((s1["comm_beta_bytes"] - s0["comm_beta_bytes"]) / (s1["step"] - s0["step"]) * 8
            / (rate * 1e6 * GOODPUT))


def cell_steps_per_sync(sim_dir: Path, steps: int, workers: int, calls_per_exchange: int) -> int:
    """Steps between two exchanges of the cell (its workers wait for each other only there): an exchange's
    calls (:func:`lowbw.bench.e8.calls.call_sequence`) / the sim run's calls per step, rounded; 1 for a
    synchronous step, about H for DiLoCo or local SGD; the run's steps for a cell without calls."""
    calls = cell_calls_per_step(sim_dir, steps, workers)
    if calls <= 0:
        return steps
    return max(1, round(calls_per_exchange / calls))


def cell_sequence(exchange: list[tuple[str, float]], sim_dir: Path, steps: int, workers: int
                  ) -> list[tuple[str, float]]:
    """The calls of one of the cell's exchanges, each with the CPU work before it (ms) as its sim run does the
    work: ``exchange`` (:func:`lowbw.bench.e8.calls.call_sequence`: the compressor's own gaps) scaled to the
    sim's compression per exchange, and the step's compute before the first call (an exchange every
    L / c steps, L calls in it, c calls per step). Empty for a cell without calls."""
    calls, compute, compress = _per_step(sim_dir, steps, workers)
    if calls <= 0:
        return []
    per_exchange = len(exchange) / calls  # steps per exchange
    work = sum(g for _, g in exchange)
    scale = compress * 1e3 * per_exchange / work if work > 0 else 0.0
    return [(op, g * scale + (compute * 1e3 * per_exchange if j == 0 else 0.0))
            for j, (op, g) in enumerate(exchange)]


# ----------------------------------------------------------------------------------------------- one cell's calibration
def cell_calibration(probe_res: dict[str, Any], sim_dir: Path, steps: int, workers: int) -> dict[str, Any]:
    """The probe's calibration for one cell: ``overhead_ms`` = the per-message cost of the cell's exchange in
    situ where the probe made it (``overhead_exchange_ms``), else of the cell's own sequence of calls and CPU
    gaps where the probe replayed it, otherwise the curve read at the cell's mean gap;
    ``compute_scale`` = :func:`compute_scale_over` the cell's ``steps_per_sync`` (recorded in ``probe_res``;
    1 where absent) where the probe has per-rank times, else the synchronous step's
    (``compute_scale_per_step``, the probe's own)."""
    gap = cell_gap_ms(sim_dir, steps, workers)
    curve = probe_res.get("overhead_curve") or [[0.0, probe_res["overhead_ms"]]]
    at_gap, seq = overhead_at(curve, gap), probe_res.get("overhead_sequence_ms")
    situ = probe_res.get("overhead_exchange_ms")
    period = int(probe_res.get("steps_per_sync") or 1)
    per_step = probe_res["compute_scale"]
    over = compute_scale_over(probe_res.get("samples") or [], period) if period > 1 else None
    overhead = situ if situ is not None else (at_gap if seq is None else seq)
    return {**probe_res, "overhead_ms": overhead, "overhead_gap_ms": gap,
            "overhead_at_gap_ms": at_gap, "steps_per_sync": period, "compute_scale_per_step": per_step,
            "compute_scale": per_step if over is None else over}
