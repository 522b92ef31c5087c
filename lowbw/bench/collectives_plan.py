"""E1's plan, decided before any testbed starts: the grid's defaults (``DEFAULTS``, ``QUICK``), which
(size, algorithm) calls each (workers, rate, delay) testbed measures and how often (:func:`plan_grid`; calls
the nominal alpha-beta model predicts longer than ``max_seconds``, and testbeds the link emulator cannot carry,
are skipped with the reason), the calibration's calls (ping-pong sizes, the tiny software-cost calls, traced
calls), and the measurement protocol's constants that the controller (:mod:`lowbw.bench.collectives`) and its
workers (:mod:`lowbw.bench._collectives_worker`) share.

Sizes are in bytes of float32 per rank (``size_mb``: 10^6 bytes); rates in bit/s (``rate_mbit``: 10^6 bit/s).
"""

from __future__ import annotations

import itertools
import math
from typing import Any

from lowbw.comm.algorithms import ALLREDUCE_ALGORITHMS, OWN_ALLREDUCE_ALGORITHMS
from lowbw.net import linkemu
from lowbw.net.calibrated import FIT_MIN_BYTES, SOFTWARE_BYTES
from lowbw.net.costmodel import LinkParams, allreduce_time
from lowbw.net.link import LinkSpec
from lowbw.net.probe import TestbedUnavailable, has_netem, netns_missing

__all__ = ["ALGORITHMS", "DEFAULTS", "QUICK", "IDLE_MIN_S", "FULL_WARMUP_MAX_S", "MIN_SOFTWARE_REPS",
           "nominal_time", "pingpong_sizes", "emulator_refusal", "plan_grid", "predicted_seconds", "software_plan",
           "trace_plan"]

IDLE_MIN_S = 0.002  # idle time before each timed call (at least; see _run_testbed)
FULL_WARMUP_MAX_S = 2.0  # measurements predicted to take at most this long get an untimed full-size call first


ALGORITHMS = list(ALLREDUCE_ALGORITHMS)
DEFAULTS: dict[str, Any] = {
    "workers": [2, 3, 4],
    "rates_mbit": [10, 100, 1000],
    "sizes_mb": [1, 10, 100],
    "delay_ms": 0,
    "queue_ms": 100,
    # TCP congestion control on the testbed's links (None: the kernel default). cubic, Linux's default and
    # what most clusters run; BBR's ProbeRTT (every 10 s, a flow cut to 4 packets for 200 ms) makes long
    # transfers bimodal
    "congestion_control": "cubic",
    # workers under SCHED_RR at this priority where allowed (None: the fair scheduler), as if each emulated
    # machine had its own CPU: with workers sharing cores, scheduler wake-up delays of a few ms land on
    # short collectives at random
    "realtime": 10,
    "algorithms": ALGORITHMS,
    "reps": 3,
    "max_seconds": 30,
    "emulation": "auto",
    # each algorithm's software cost per step: tiny calls of this many bytes before the grid (0: not measured)
    "software_bytes": SOFTWARE_BYTES,
    # per-message timings of some calls (None, or {"algorithm", "size_mb", "reps"}), after the calibration
    "trace": None,
    # the testbeds' calibration (ping-pong, gamma, software cost) and trace only, no grid
    "calibration_only": False,
}
MIN_SOFTWARE_REPS = 9  # tiny calls per algorithm at least (at most 25, ~0.5 s of them)
# small enough to finish in well under a minute on 2 cores (papermill default)
QUICK: dict[str, Any] = {
    "workers": [2, 3],
    "rates_mbit": [100],
    "sizes_mb": [1],
    "algorithms": ALGORITHMS,
    "reps": 2,
    "max_seconds": 5,
}


def nominal_time(alg: str, nbytes: float, n: int, rate_bps: float, delay_s: float) -> float:
    return allreduce_time(alg, nbytes, n, LinkParams(alpha_s=delay_s, bandwidth_bps=rate_bps))


def pingpong_sizes(rate_bps: float) -> list[int]:
    """Message sizes from 1 KB up to ~0.25 s one-way at the nominal rate (at most 16 MB). Sizes below
    ``FIT_MIN_BYTES`` are measured and stored but not fitted: tbf lets a burst (~15 KB; 125 KB at
    1 Gbit/s) through at line rate, so small messages say nothing about the shaped bandwidth."""
    top = min(16 << 20, max(FIT_MIN_BYTES * 4, int(rate_bps * 0.25 / 8)))
    sizes, s = [], 1 << 10
    while s <= top:
        sizes.append(s)
        s *= 4
    if not sizes or sizes[-1] < top // 2:
        sizes.append(top)
    return sizes


def emulator_refusal(n: int, rate_bps: float, delay_s: float, queue_s: float, netem: bool) -> str | None:
    """Why the testbed would refuse N links at ``rate_bps`` with ``delay_s`` (None: it accepts them): where
    the kernel has no netem, delay comes from the userspace link emulator, which carries at most
    :data:`lowbw.net.linkemu.MAX_TOTAL_BPS` of summed uplinks (:func:`lowbw.net.linkemu.method` decides,
    exactly as :class:`lowbw.net.testbed.Testbed` does when it starts)."""
    link = LinkSpec.parse(rate_bps, delay_s or None, queue=queue_s)
    try:
        linkemu.method([link] * n, "auto", netem)
    except (ValueError, TestbedUnavailable) as e:
        return str(e)
    return None


def plan_grid(cfg: dict, netem: bool | None = None, netns: bool | None = None) -> tuple[list[dict], list[dict]]:
    """Every testbed of the grid and what it measures, decided before any testbed starts.

    Returns ``(cells, skipped)``: a cell is ``{workers, rate_mbit, delay_ms, plan}`` (one testbed; ``plan``
    the (size, algorithm) measurements with their repetitions and the nominal model's time); ``skipped``
    lists, with the reason, every (size, algorithm) the nominal model predicts longer than ``max_seconds``
    and every testbed the link emulator cannot carry (one entry per cell, ``"cell": True``: its sizes and
    algorithms are not measured). ``netem``: whether the kernel has sch_netem; ``netns``: whether the
    testbeds will be netns-tc ones (False under loopback-ratelimit, whose in-process limiter adds the delay
    itself, without that limit); None: probe, only if some delay is nonzero."""
    algorithms = list(cfg["algorithms"])
    delays_ms = _as_list(cfg.get("delay_ms") or 0)
    if any(float(d) < 0 for d in delays_ms):
        raise ValueError(f"delay_ms {delays_ms}: delays must be >= 0")
    delayed = any(float(d) > 0 for d in delays_ms)
    if netns is None and delayed:
        netns = cfg.get("emulation", "auto") != "loopback-ratelimit" and not netns_missing()
    if netem is None and delayed and netns:
        netem = has_netem()
    queue_s = float(cfg.get("queue_ms") or 100) / 1e3
    cells: list[dict] = []
    skipped: list[dict] = []
    for n, rate_mbit, delay_ms in itertools.product(cfg["workers"], cfg["rates_mbit"], delays_ms):
        rate_bps = float(rate_mbit) * 1e6
        delay_s = float(delay_ms) / 1e3
        why = emulator_refusal(n, rate_bps, delay_s, queue_s, bool(netem)) if delay_s and netns else None
        if why:
            skipped.append({"workers": n, "rate_mbit": rate_mbit, "delay_ms": delay_ms, "cell": True,
                            "sizes_mb": list(cfg["sizes_mb"]), "algorithms": algorithms, "why": why})
            continue
        plan = []
        for size_mb in cfg["sizes_mb"]:
            nbytes = int(round(float(size_mb) * 1e6 / 4)) * 4
            for alg in algorithms:
                t_pred = nominal_time(alg, nbytes, n, rate_bps, delay_s)
                if t_pred > cfg["max_seconds"]:
                    skipped.append({"workers": n, "rate_mbit": rate_mbit, "delay_ms": delay_ms, "size_mb": size_mb,
                                    "algorithm": alg, "predicted_s": t_pred,
                                    "why": f"predicted > {cfg['max_seconds']} s"})
                    continue
                reps = cfg["reps"] if t_pred * cfg["reps"] <= 3 * cfg["max_seconds"] else 1
                if t_pred < 0.1:  # millisecond calls: the median of more repetitions (~0.3 s of them)
                    reps = max(reps, min(25, math.ceil(0.3 / max(t_pred, 1e-6))))
                plan.append({"size_mb": size_mb, "nbytes": nbytes, "algorithm": alg, "reps": reps,
                             "predicted_s": t_pred})
        if plan:
            cells.append({"workers": n, "rate_mbit": rate_mbit, "delay_ms": delay_ms, "plan": plan})
    return cells, skipped


def predicted_seconds(cells: list[dict]) -> float:
    """The nominal model's time of every planned call (warm-ups included), summed: the measurement's
    duration without the testbeds' set-up and calibration."""
    return sum(p["predicted_s"] * (p["reps"] + 1 + (p["predicted_s"] <= FULL_WARMUP_MAX_S))
               for c in cells for p in c["plan"])


def _as_list(v) -> list:
    return list(v) if isinstance(v, (list, tuple)) else [v]


def software_plan(cfg: dict, n: int, rate_bps: float, delay_s: float) -> dict | None:
    """The tiny calls that measure each algorithm's software cost per step (None: not measured): of
    ``software_bytes``, ~0.5 s of them per algorithm (the nominal model's time), 9 to 25."""
    nb = int(cfg.get("software_bytes") or 0)
    if nb <= 0:
        return None
    algs = [a for a in cfg["algorithms"] if a in OWN_ALLREDUCE_ALGORITHMS]  # gloo's own has no steps of ours
    reps = {a: max(MIN_SOFTWARE_REPS, min(25, math.ceil(0.5 / max(nominal_time(a, nb, n, rate_bps, delay_s), 1e-3))))
            for a in algs}
    return {"nbytes": nb, "algorithms": algs, "reps": reps}


def trace_plan(cfg: dict) -> list[dict] | None:
    """The traced calls (``cfg["trace"]``: {"algorithm", "sizes_mb", "reps"}), one entry per size; None: none."""
    t = cfg.get("trace")
    if not t:
        return None
    if t.get("algorithm") not in OWN_ALLREDUCE_ALGORITHMS:
        raise ValueError(f"trace algorithm {t.get('algorithm')!r}: one of {list(OWN_ALLREDUCE_ALGORITHMS)}")
    if not t.get("sizes_mb") or any(float(x) <= 0 for x in t["sizes_mb"]):
        raise ValueError(f"trace sizes_mb {t.get('sizes_mb')!r}: one or more sizes > 0 (MB)")
    return [{"algorithm": t["algorithm"], "nbytes": int(round(float(mb) * 1e6 / 4)) * 4, "size_mb": float(mb),
             "reps": int(t.get("reps") or 10)} for mb in t["sizes_mb"]]


