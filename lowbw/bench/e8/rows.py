"""The report of E8's check: one cell's row of e2e.json from its sim and procs run directories
(:func:`cell_row`), each cell's median over its repeats (:func:`cells`), the summary against the 10% target
(:func:`summarise`) and the text table the command prints."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from lowbw.bench.e8.grid import GOODPUT, metrics_lines, train_window
from lowbw.train.targets import parse_target

__all__ = ["cell_row", "cells", "summarise", "print_table", "fmt_row", "TOLERANCE"]

TOLERANCE = 0.10  # the target: |predicted - measured| / measured per cell


def _ttt(lines: list[dict[str, Any]], target: float | str, key) -> tuple[int | None, float | None]:
    """The first evaluation that reaches ``target`` (a test accuracy, or a target string such as
    ``"val_loss<=2.5"``, :func:`lowbw.train.targets.parse_target`): its step and ``key`` of its line."""
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
    """One row of e2e.json from the two run directories, over the steps of :func:`train_window`:
    ``predicted_step_s`` = d t_virtual / d step (sim), ``measured_step_s`` = d (t_step - t_meta) / d step (procs,
    rank 0's wall clock; t_meta, lowbw's own bookkeeping exchanges, is not training), ``err_step`` = (pred -
    meas) / meas; the same split into compute, compress and comm; the uncalibrated clock's prediction
    (``nominal_step_s``); time-to-target at the first evaluation that reaches ``target`` (training time,
    evaluations excluded); the calibration the sim ran with."""
    s_lines, p_lines = metrics_lines(sim_dir), metrics_lines(procs_dir)
    s0, s1 = train_window(s_lines, steps)
    p0, p1 = train_window(p_lines, steps)
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
        # the exchange made in situ (the compressor's real work between tiny real messages): its per-message
        # cost is overhead_ms, and its work's slow-down the compress_scale
        "overhead_in_situ_ms": probe_res.get("overhead_exchange_ms"),
        "overhead_sequence_ms": probe_res.get("overhead_sequence_ms"),
        "overhead_last_in_ms": probe_res.get("overhead_sequence_last_in_ms"),  # the replay's calls alone
        "compute_scale": scale, "compress_scale": cscale,
        "compress_scale_apart": probe_res.get("compress_scale_apart"),  # compressing with no message between
        # the synchronous step's factor, and the steps between the cell's synchronisations it was taken over
        "compute_scale_per_step": probe_res.get("compute_scale_per_step", scale),
        "steps_per_sync": probe_res.get("steps_per_sync", 1),
        "shaper_burst_bytes": float(cfg.get("clock_shaper_burst_bytes") or 0.0),
        "emulation": probe_res.get("emulation"),
    }


def cells(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One entry per cell (method, workers, rate): its repeats' median ``err_step`` (the lower middle one of an
    even count: a repeat that was measured), that repeat's row as ``run``, their range and count; a cell is
    link-bound if any repeat is."""
    by_cell: dict[tuple, list[dict[str, Any]]] = {}
    for r in rows:
        by_cell.setdefault((r["method"], r["workers"], r["rate_mbit"]), []).append(r)
    out = []
    for (m, n, rate), rs in by_cell.items():
        ranked = sorted((r for r in rs if r["err_step"] is not None), key=lambda r: r["err_step"])
        mid = ranked[(len(ranked) - 1) // 2] if ranked else rs[0]
        out.append({"method": m, "workers": n, "rate_mbit": rate, "repeats": len(rs),
                    "err_step": mid["err_step"], "run": mid,
                    "err_step_min": ranked[0]["err_step"] if ranked else None,
                    "err_step_max": ranked[-1]["err_step"] if ranked else None,
                    "link_bound": any(r["link_bound"] for r in rs)})
    return out


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Worst |err_step| per method, and the target: |err_step| <= :data:`TOLERANCE` at N = 2 at 10 and
    100 Mbit/s, and at 1000 where link-bound, per cell the median over its repeats."""
    by_method: dict[str, float] = {}
    cs = cells(rows)
    for c in cs:
        if c["err_step"] is not None:
            by_method[c["method"]] = max(by_method.get(c["method"], 0.0), abs(c["err_step"]))
    target_cells = [c for c in cs if c["workers"] == 2 and (c["rate_mbit"] <= 100 or c["link_bound"])]
    worst = max((abs(c["err_step"]) for c in target_cells if c["err_step"] is not None), default=None)
    return {"worst_abs_err_step_by_method": by_method, "repeats": max((c["repeats"] for c in cs), default=0),
            "target": {"what": "|err_step| <= 0.10 at N=2, 10 and 100 Mbit/s, and 1000 where link-bound "
                               "(per cell the median over its repeats)",
                       "max_abs_err": worst, "n": len(target_cells),
                       "met": worst is not None and worst <= TOLERANCE}}


def _fmt(v, spec: str) -> str:
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, spec)


def fmt_row(r: dict[str, Any]) -> str:
    return (f"{r['method']:<12} {r['workers']:>2} {r['rate_mbit']:>6g} {_fmt(r['predicted_step_s'], '9.4f')} "
            f"{_fmt(r['measured_step_s'], '9.4f')} {_fmt(r['err_step'], '+8.1%')} "
            f"{_fmt(r['err_step_nominal'], '+8.1%')} "
            f"{_fmt(r['predicted_comm_s'], '9.4f')} {_fmt(r['measured_comm_s'], '9.4f')} "
            f"{_fmt(r['err_ttt'], '+8.1%')} {'yes' if r['loss_identical'] else 'no':>4}")


HEADER = (f"{'method':<12} {'N':>2} {'Mbit/s':>6} {'pred s':>9} {'meas s':>9} {'err':>8} {'nominal':>8} "
          f"{'pred comm':>9} {'meas comm':>9} {'err ttt':>8} {'same':>4}")


def print_table(res: dict[str, Any]) -> None:
    print(HEADER)
    for r in res["rows"]:
        print(fmt_row(r))
    print(json.dumps(res["summary"], indent=1))
