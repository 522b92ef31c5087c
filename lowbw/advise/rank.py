"""Combine the two halves into a ranking: time to target = predicted step time x predicted steps, where the
steps are dense training's steps to the target times the method's measured ratio (:mod:`efficiency`).

Ranked by predicted time to the target, with two tiers after it: methods resting on bytes alone (no measured
steps to the target anywhere, so their steps are assumed as dense's) come after every method with a
measurement, and methods that did not reach the target where they were measured come last.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from lowbw.advise.candidates import Candidate, candidates, exchange
from lowbw.advise.device import DEVICES, CompressTime, Device, compress_time, measure_compress
from lowbw.advise.efficiency import Efficiency, lookup
from lowbw.advise.steptime import StepPrediction, predict
from lowbw.advise.workload import Workload
from lowbw.collective.buckets import DEFAULT_BUCKET_MB
from lowbw.net.costlinks import WorkerLink

__all__ = ["Advice", "rank", "reasons", "DEFAULT_DENSE_STEPS"]

DEFAULT_DENSE_STEPS = 1000.0  # dense's steps to the target where nothing measured says otherwise
DENSE = Candidate("dense", "dense", "none", (), None, 1, 1, 0, 0, True)  # the flat fp32 gradient every step


@dataclass(frozen=True)
class Advice:
    """One ranked method."""

    candidate: Candidate  # the method
    step: StepPrediction  # its predicted step
    efficiency: Efficiency  # its predicted steps to the target relative to dense, and what that rests on
    dense_steps: float  # dense's steps to the target the times assume
    exact_bytes: bool  # False where a shape was extrapolated or the bytes depend on the values
    budget: float | None = None  # the user's training budget in steps (None: unlimited)
    compression: CompressTime | None = None  # the compression time per exchange on the user's device, and its basis

    @property
    def predicted_steps(self) -> float:
        """Steps to the target: the ratio x dense's steps."""
        return self.efficiency.ratio * self.dense_steps

    @property
    def reaches(self) -> bool:
        """Predicted to reach the target, within the budget where one is given."""
        if not math.isfinite(self.efficiency.ratio):
            return False
        if self.budget is None:
            return True
        return self.predicted_steps <= self.budget and not self.budget <= self.efficiency.failed_within

    @property
    def ttt_s(self) -> float:
        """Predicted time to the target (s): step time x ratio x dense's steps."""
        return self.step.step_s * self.efficiency.ratio * self.dense_steps

    def as_dict(self) -> dict[str, Any]:
        s, e = self.step, self.efficiency

        def fin(v: float) -> float | None:
            return v if math.isfinite(v) else None

        return {"method": self.candidate.name, "family": self.candidate.family, "what": self.candidate.label,
                "collective": s.collective, "bytes_per_step": s.bytes_per_step, "predicted_step_s": s.step_s,
                "compute_s": s.compute_s, "compress_s": s.compress_s, "comm_s": s.comm_s,
                "optimizer_s": s.optimizer_s, "outer_s": s.outer_s,
                "predicted_steps_ratio": fin(e.ratio), "predicted_ttt_s": fin(self.ttt_s), "reaches": self.reaches,
                "confidence": e.confidence, "basis": e.basis, "exact_bytes": self.exact_bytes,
                "compress_basis": self.compression.basis if self.compression else None,
                "compress_detail": self.compression.detail if self.compression else None}


def _order(a: Advice) -> tuple[int, float]:
    """Methods predicted to reach the target (within the budget) by predicted time, those whose steps rest on
    bytes only after them, then those predicted not to reach it."""
    tier = 2 if not a.reaches else 1 if a.efficiency.confidence == "bytes only" else 0
    return tier, a.ttt_s if math.isfinite(a.ttt_s) else math.inf


def rank(w: Workload, links: tuple[WorkerLink, ...], rows: list[dict[str, Any]], metric: str = "test_acc",
         target: float | None = None, dense_steps: float | None = None,
         only: tuple[str, ...] | None = None, cands: tuple[Candidate, ...] | None = None,
         budget: float | None = None, bucket_mb: float | None = DEFAULT_BUCKET_MB, dev: Device | None = None,
         measure: bool = False) -> list[Advice]:
    """Every candidate (or those named in ``only``; or exactly ``cands``) for workload ``w`` on ``links`` (one
    per worker), best first; ``rows``: the efficiency table; ``budget``: the most steps the user trains (a
    method predicted to need more ranks with those predicted not to reach the target); ``bucket_mb``: the
    compressed exchanges' bucket size (None: one call per tensor and part); ``dev``: the user's device (default
    ``cpu``), whose compression times :mod:`lowbw.advise.device` gives (``measure``: timed on the device at
    hand)."""
    dev = dev or DEVICES["cpu"]
    n = len(links)
    cands = list(cands) if cands is not None else [c for c in candidates() if only is None or c.name in only]
    base = model_key(w)
    d = lookup(rows, "dense", base, w.kind, n, metric, target)
    steps = dense_steps or (d.dense_steps if math.isfinite(d.dense_steps) else DEFAULT_DENSE_STEPS)
    out = []
    for c in cands:
        ex = exchange(c, w.shapes, bucket_mb)
        hh = exchange(DENSE, w.shapes) if c.households else None  # the household's dense average
        ct = measure_compress(c, w.shapes) if measure else compress_time(c, w.shapes, dev, ex.compress_s)
        step = predict(c, ex, w.compute_s, w.grad_bytes, links, hh, ct.seconds, w.optimizer_s.get(c.optimizer, 0.0),
                       w.outer_s)
        out.append(Advice(c, step, lookup(rows, c.name, base, w.kind, n, metric, target), steps, ex.exact, budget,
                          ct))
    return sorted(out, key=_order)


def model_key(w: Workload) -> str:
    """The model name the efficiency table knows ``w`` by (a user's model matches none)."""
    return w.model


def _rate_words(links: tuple[WorkerLink, ...]) -> str:
    bps = min(min(x.up_bps, x.down_bps) for x in links)
    for unit, v in (("Gbit/s", 1e9), ("Mbit/s", 1e6), ("kbit/s", 1e3)):
        if bps >= v:
            return f"{bps / v:g} {unit}"
    return f"{bps:g} bit/s"


def reasons(ranking: list[Advice], links: tuple[WorkerLink, ...], top: int = 3) -> list[str]:
    """One sentence for the setting and one per top method: why it ranks where it does."""
    dense = next((a for a in ranking if a.candidate.name == "dense"), None)
    out = []
    if dense is not None and dense.step.step_s > 0:
        frac = 1.0 - dense.step.compute_s / dense.step.step_s
        out.append(f"communication is {100 * frac:.0f}% of a dense step ({dense.step.step_s:.3g} s) at "
                   f"{_rate_words(links)} with {len(links)} workers")
    for i, a in enumerate(ranking[:top], 1):
        e = a.efficiency
        if dense is not None and a is not dense and a.step.bytes_per_step > 0:
            fewer = dense.step.bytes_per_step / a.step.bytes_per_step
            what = f"sends {fewer:.3g}x fewer bytes per step than dense" if fewer >= 1 else \
                f"sends {1 / fewer:.3g}x more bytes per step than dense"
        else:
            what = "the baseline: the full fp32 gradient every step"
        steps = ("steps assumed as dense's (nothing measured)" if e.confidence == "bytes only"
                 else f"{e.confidence} {e.ratio:.2f}x dense's steps ({e.basis.split(' in ', 1)[-1]})")
        out.append(f"{i}. {a.candidate.name}: {what}, at {steps}; step {a.step.step_s:.3g} s "
                   f"(compute {a.step.compute_s:.3g}, compression {a.step.compress_s:.3g}"
                   f"{' ' + a.compression.basis if a.compression and a.step.compress_s else ''}, "
                   f"communication {a.step.comm_s:.3g})")
    return out
