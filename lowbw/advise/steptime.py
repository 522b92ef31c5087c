"""Predicted time of one training step of a candidate: compute + compression + communication, per step.

The links are one :class:`lowbw.net.costlinks.WorkerLink` per worker (equal links: exactly
:mod:`lowbw.net.costmodel`'s times). Each all-reduce of an exchange takes the fastest algorithm the cost model
knows for its size and links; an all-gather is a ring (lowbw.comm's, with its size exchange). Per step:

* every step, no overlap:      compute + compress + comm
* every step, overlapped (DDP buckets, fp16/bf16 hooks):  max(compute, compress + comm)
  (:func:`lowbw.net.costmodel.step_time`: the compression sits on its bucket's critical path)
* every H steps (local SGD, DiLoCo, SparseLoCo):  compute + (compress + comm) / H
* hierarchical: compute + comm within a household (every step) + world comm / H
* Streaming DiLoCo, F fragments, each exchanged every H/F steps and applied tau steps later:
  compute + max(0, comm / F - tau compute) / (H / F)  (a fragment's exchange hides behind tau steps of compute)

Compression time is the whole model's once per exchange: at this machine's calibrated throughput of that
compressor (``config/clock.json``'s ``clock_compress_mbyte_s``, MB of fp32 gradient per second) where it
holds one, else the time the advisor measured compressing the model's shapes once.
"""

from __future__ import annotations

import json
import statistics
from collections import Counter
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from lowbw.advise.candidates import Candidate, Exchange
from lowbw.advise.workload import CLOCK_FILE
from lowbw.algorithms import ALLREDUCE_ALGORITHMS
from lowbw.net.costlinks import WorkerLink, collective_time
from lowbw.net.costmodel import step_time

__all__ = ["StepPrediction", "predict", "comm_time", "compress_rate"]

# every all-reduce the cost model times ("native" is gloo's ring: the same times as "ring")
ALGORITHMS = tuple(a for a in ALLREDUCE_ALGORITHMS if a != "native")


@dataclass(frozen=True)
class StepPrediction:
    """One candidate's predicted step, averaged over its period."""

    compute_s: float  # forward + backward of the local batch
    compress_s: float  # compression + decompression, per step
    comm_s: float  # communication on the critical path, per step (after overlap)
    step_s: float  # the step's predicted time
    bytes_per_step: float  # payload bytes each worker contributes per step (all groups)
    collective: str  # the all-reduce chosen most often, or "all-gather", or "-" for one worker


def comm_time(ex: Exchange, links: tuple[WorkerLink, ...]) -> tuple[float, str]:
    """(seconds of the exchange's calls in order, the collective used most) on ``links``."""
    if len(links) < 2:
        return 0.0, "-"
    total, used = 0.0, Counter()
    for c in ex.calls:
        if c.op == "all_gather":
            total += collective_time("all_gather", "ring", c.nbytes, links, exchange_sizes=not c.sizes_known)
            used["all-gather"] += 1
        else:
            t, a = min((collective_time("all_reduce", a, c.nbytes, links), a) for a in ALGORITHMS)
            total += t
            used[a] += 1
    return total, used.most_common(1)[0][0] if used else "-"


@cache
def _rates(path: Path = CLOCK_FILE) -> dict[str, float]:
    if not path.is_file():
        return {}
    by: dict[str, list[float]] = {}
    for e in json.loads(path.read_text())["entries"].values():
        if e.get("compressor", "none") != "none" and e.get("clock_compress_mbyte_s"):
            by.setdefault(e["compressor"], []).append(float(e["clock_compress_mbyte_s"]))
    return {k: statistics.median(v) for k, v in by.items()}


def compress_rate(compressor: str) -> float | None:
    """This machine's calibrated compression throughput of ``compressor`` (MB of fp32 gradient per s)."""
    return _rates().get(compressor)


def predict(c: Candidate, ex: Exchange, compute_s: float, grad_bytes: float, links: tuple[WorkerLink, ...],
            household_ex: Exchange | None = None) -> StepPrediction:
    """The step of candidate ``c`` whose world exchange is ``ex``; ``household_ex``: the exchange a
    hierarchical candidate makes within its household every step (its links: the first N / households)."""
    rate = compress_rate(c.compressor) if c.compressor != "none" else None
    compress = grad_bytes / 1e6 / rate if rate else ex.compress_s
    comm, coll = comm_time(ex, links)
    h = c.period
    if c.households and household_ex is not None:
        size = max(1, len(links) // c.households)
        local, _ = comm_time(household_ex, links[:size])
        per_comm = local + comm / h
        step = compute_s + per_comm
        return StepPrediction(compute_s, 0.0, per_comm, step, household_ex.bytes_sent + ex.bytes_sent / h, coll)
    if c.fragments > 1:
        every = h / c.fragments
        hidden = max(0.0, (compress + comm) / c.fragments - c.delay * compute_s)
        per_comm = hidden / every
        return StepPrediction(compute_s, 0.0, per_comm, compute_s + per_comm, ex.bytes_sent / h, coll)
    if h > 1:
        return StepPrediction(compute_s, compress / h, comm / h, compute_s + (compress + comm) / h,
                              ex.bytes_sent / h, coll)
    if c.overlap:
        step = step_time(compute_s, comm, compress, overlap=True)
        return StepPrediction(compute_s, compress, max(0.0, step - compute_s - compress), step, ex.bytes_sent, coll)
    return StepPrediction(compute_s, compress, comm, compute_s + compress + comm, ex.bytes_sent, coll)
