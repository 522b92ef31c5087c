"""E8's one cell (:mod:`lowbw.bench.e2e`): what its sim run says about it (calls, CPU work and bytes per step,
the sequence of calls the probe replays, the probe's calibration for it), and its row of e2e.json from its
sim and procs run directories."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

from lowbw.bench.e2e_probe import overhead_at

__all__ = ["cell_calls_per_step", "cell_gap_ms", "cell_wire_s", "cell_sequence", "cell_calibration", "cell_dir",
           "cell_row", "GOODPUT", "WARMUP_STEPS"]

GOODPUT = 1448 / 1514  # RunConfig.link_goodput's default
WARMUP_STEPS = 10  # steps excluded from the per-step figures (TCP slow start, first-touch allocations)


# ----------------------------------------------------------------------------------------------- its sim run
def _per_step(sim_dir: Path, steps: int, workers: int) -> tuple[float, float, float]:
    """(calls, CPU seconds of compute, of compression) per step of a cell's sim run; a call is 2 (N-1)
    latency terms (an all-gather's sizes and payload, a ring all-reduce's two phases)."""
    s0, s1 = _train_lines(_lines(sim_dir), steps)
    n = s1["step"] - s0["step"]
    compute, compress = ((s1[f"t_virtual_{k}"] - s0[f"t_virtual_{k}"]) / n for k in ("compute", "compress"))
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
    s0, s1 = _train_lines(_lines(sim_dir), steps)
    return ((s1["comm_beta_bytes"] - s0["comm_beta_bytes"]) / (s1["step"] - s0["step"]) * 8
            / (rate * 1e6 * GOODPUT))


def cell_sequence(exchange: list[tuple[str, float]], sim_dir: Path, steps: int, workers: int
                  ) -> list[tuple[str, float]]:
    """The calls of one of the cell's exchanges, each with the CPU work before it (ms) as its sim run does the
    work: ``exchange`` (:func:`lowbw.bench.e2e_calls.call_sequence`: the compressor's own gaps) scaled to the
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


def cell_calibration(probe_res: dict[str, Any], sim_dir: Path, steps: int, workers: int) -> dict[str, Any]:
    """The probe's calibration for one cell: ``overhead_ms`` = the per-message cost of the cell's own sequence
    of calls and CPU gaps where the probe replayed it, otherwise the curve read at the cell's mean gap."""
    gap = cell_gap_ms(sim_dir, steps, workers)
    curve = probe_res.get("overhead_curve") or [[0.0, probe_res["overhead_ms"]]]
    at_gap, seq = overhead_at(curve, gap), probe_res.get("overhead_sequence_ms")
    return {**probe_res, "overhead_ms": at_gap if seq is None else seq, "overhead_gap_ms": gap,
            "overhead_at_gap_ms": at_gap}


# ----------------------------------------------------------------------------------------------- one cell
def cell_dir(runs_dir: str | os.PathLike, method: str, workers: int, rate: float, repeat: int = 0) -> Path:
    """Where a cell's sim and procs runs go: ``{method}_n{N}_r{rate}``, ``.../rep{k}`` for a repeat k >= 1."""
    d = Path(runs_dir) / f"{method}_n{workers}_r{rate:g}"
    return d / f"rep{repeat}" if repeat else d


def _lines(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines() if x.strip()]


def _train_lines(lines: list[dict[str, Any]], steps: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """The metrics lines at the end of the warm-up and at the last step of the loop (before the run's final
    averaging/evaluation)."""
    first = next(x for x in lines if x["step"] >= min(WARMUP_STEPS, steps - 1))
    last = next(x for x in lines if x["step"] >= steps)
    return first, last


def _ttt(lines: list[dict[str, Any]], target: float | str, key) -> tuple[int | None, float | None]:
    """The first evaluation that reaches ``target`` (a test accuracy, or a target string such as
    ``"val_loss<=2.5"``, :func:`lowbw.train.targets.parse_target`): its step and ``key`` of its line."""
    from lowbw.train.targets import parse_target

    t = parse_target(target)
    for x in lines:
        if x.get(t.metric) is not None and t.reached(x):
            return x["step"], key(x)
    return None, None


def _rel(pred: float | None, meas: float | None) -> float | None:
    if pred is None or meas is None or meas <= 0:
        return None
    return (pred - meas) / meas


def cell_row(sim_dir: Path, procs_dir: Path, *, method: str, workers: int, rate: float, steps: int,
             target: float | str,
             probe_res: dict[str, Any], cfg: dict[str, Any]) -> dict[str, Any]:
    """One row of e2e.json from the two run directories (see the module docstring)."""
    s_lines, p_lines = _lines(sim_dir), _lines(procs_dir)
    s0, s1 = _train_lines(s_lines, steps)
    p0, p1 = _train_lines(p_lines, steps)
    n = s1["step"] - s0["step"]
    if p1["step"] - p0["step"] != n:
        raise RuntimeError(f"{method}: sim and procs logged different steps ({s0['step']}..{s1['step']} vs "
                           f"{p0['step']}..{p1['step']})")

    def d(a, b, k):
        return (b[k] - a[k]) / n

    pred = {k: d(s0, s1, f"t_virtual_{k}") for k in ("compute", "compress", "comm")}
    pred_step = d(s0, s1, "t_virtual")
    meas = {k: d(p0, p1, f"t_{k}") for k in ("compute", "compress", "comm")}
    meas_step = d(p0, p1, "t_step") - d(p0, p1, "t_meta")
    # the uncalibrated clock: ideal stack (alpha = latency_ms), nominal rate, a machine per worker
    alpha_terms = d(s0, s1, "comm_alpha_terms")
    beta_bytes = d(s0, s1, "comm_beta_bytes")
    scale = float(cfg["clock_compute_scale"])
    cscale = float(cfg.get("clock_compress_scale") or 0.0) or scale
    nominal_comm = alpha_terms * cfg["latency_ms"] / 1e3 + beta_bytes * 8 / (rate * 1e6)
    nominal_step = pred["compute"] / scale + pred["compress"] / cscale + nominal_comm
    s_ttt_step, s_ttt = _ttt(s_lines, target, lambda x: x["t_virtual"])
    p_ttt_step, p_ttt = _ttt(p_lines, target, lambda x: x["t_step"] - x["t_meta"])
    fl_s, fl_p = s1.get("loss"), p1.get("loss")
    # the link, not the CPU, is the bottleneck where the step's bytes at the link's goodput take half of it
    # (a per-layer step's per-message software cost is CPU time, however much of the step it takes)
    wire = beta_bytes * 8 / (rate * 1e6 * cfg.get("link_goodput", GOODPUT))
    link_bound = wire >= 0.5 * pred_step
    return {
        "method": method, "workers": workers, "rate_mbit": rate, "steps": steps, "window": [s0["step"], s1["step"]],
        "ddp_hook": bool(cfg.get("ddp_hook", False)), "sync": cfg.get("sync", "sync"),
        "predicted_step_s": pred_step, "measured_step_s": meas_step, "err_step": _rel(pred_step, meas_step),
        "predicted_comm_s": pred["comm"], "measured_comm_s": meas["comm"], "err_comm": _rel(pred["comm"], meas["comm"]),
        "predicted_compute_s": pred["compute"], "measured_compute_s": meas["compute"],
        "predicted_compress_s": pred["compress"], "measured_compress_s": meas["compress"],
        "nominal_step_s": nominal_step, "err_step_nominal": _rel(nominal_step, meas_step),
        "bookkeeping_s": d(p0, p1, "t_meta"),
        "alpha_terms_per_step": alpha_terms, "beta_bytes_per_step": beta_bytes,
        # the per-message cost the measured communication implies, for steps with many messages:
        # (measured comm - modelled wire time) / latency terms
        "implied_overhead_ms": (meas["comm"] - wire) / alpha_terms * 1e3 if alpha_terms >= 8 else None,
        "bytes_per_step": d(s0, s1, "bytes_sent"), "bytes_per_step_procs": d(p0, p1, "bytes_sent"),
        "predicted_wire_s": wire, "link_bound": link_bound,
        "final_loss_sim": fl_s, "final_loss_procs": fl_p,
        "loss_identical": fl_s is not None and fl_s == fl_p,
        "max_loss_diff": max((abs(a["loss"] - b["loss"]) for a, b in zip(s_lines, p_lines)
                              if a.get("loss") is not None and b.get("loss") is not None), default=None),
        "target": target, "ttt_step_sim": s_ttt_step, "ttt_step_procs": p_ttt_step,
        "predicted_ttt_s": s_ttt, "measured_ttt_s": p_ttt, "err_ttt": _rel(s_ttt, p_ttt),
        "overhead_ms": probe_res["overhead_ms"], "overhead_gap_ms": probe_res.get("overhead_gap_ms"),
        # the curve's cost at the cell's mean gap, beside the replayed sequence's (overhead_ms, where replayed)
        "overhead_at_gap_ms": probe_res.get("overhead_at_gap_ms"),
        "overhead_replayed": probe_res.get("overhead_sequence_ms") is not None,
        "overhead_last_in_ms": probe_res.get("overhead_sequence_last_in_ms"),  # the replay's calls alone
        "compute_scale": scale, "compress_scale": cscale,
        "shaper_burst_bytes": float(cfg.get("clock_shaper_burst_bytes") or 0.0),
        "emulation": probe_res.get("emulation"),
    }
