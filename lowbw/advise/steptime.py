"""Predicted time of one training step of a candidate: compute + optimiser + compression + communication +
outer step, per step (:meth:`StepPrediction.terms`: the named terms, which sum to the step).

The links are one :class:`lowbw.net.costlinks.WorkerLink` per worker (equal links: exactly
:mod:`lowbw.net.costmodel`'s times). Each all-reduce of an exchange takes the fastest algorithm the cost model
knows for its size and links; an all-gather is a ring (lowbw.comm's, with its size exchange). Per step:

* every step, no overlap:      compute + opt + compress + comm
* every step, overlapped (DDP buckets, fp16/bf16 hooks):  max(compute, compress + comm), but at least
  compute + the last bucket's share (f = min(1, 25 MiB / fp32 gradient bytes)) of compress + comm: DDP's last
  bucket is ready only when the backward pass ends (:func:`lowbw.net.costmodel.step_time`: the compression
  sits on its bucket's critical path); then opt (the update needs the averaged gradient)
* every H steps (local SGD, DiLoCo, SparseLoCo):  compute + opt + (compress + comm + outer) / H
* hierarchical: compute + opt + comm within a household (every step) + world comm / H
* Streaming DiLoCo, F fragments, each exchanged every H/F steps and applied tau steps later:
  compute + opt + max(0, (compress + comm) / F - tau (compute + opt)) / (H / F) + outer / H  (a fragment's
  exchange hides behind tau local steps; its outer step is a fragment's share of the whole model's)

``opt``: one update of the parameters by the candidate's inner optimiser, every step; ``outer``: DiLoCo's outer
step of the whole model (pseudo-gradient, outer optimiser, copy back), once per exchange; both 0 where not
known (the user's ``--step-ms`` is taken to include the update).

Compression time is the whole model's once per exchange on the user's device (:mod:`lowbw.advise.device`:
a stored measurement's per-call + per-byte fit summed over the model's tensors, else a roofline).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, fields

from lowbw.advise.candidates import Candidate, Exchange
from lowbw.collective.buckets import DEFAULT_BUCKET_MB, cap_bytes
from lowbw.comm.algorithms import OWN_ALLREDUCE_ALGORITHMS
from lowbw.net.costlinks import WorkerLink, collective_time
from lowbw.net.costmodel import step_time
from lowbw.train.config_fields import RunConfig

__all__ = ["StepPrediction", "predict", "comm_time", "DDP_BUCKET_BYTES", "LINK_GOODPUT"]

# every all-reduce the cost model times, less torch's opaque one (gloo's ring: the same times as lowbw's ring)
ALGORITHMS = OWN_ALLREDUCE_ALGORITHMS
# payload bytes per byte on the wire (TCP/IPv4 with timestamps over Ethernet: 1448 of 1514), as the virtual clock
# charges them (RunConfig.link_goodput's default): a link of rate r carries r x LINK_GOODPUT bits/s of payload
LINK_GOODPUT = next(f.default for f in fields(RunConfig) if f.name == "link_goodput")
# DDP's bucket size (``bucket_cap_mb`` 25): the bucket of the first layers is ready only when the backward
# pass ends, so its exchange never hides behind compute (a model of one bucket overlaps nothing)
DDP_BUCKET_BYTES = cap_bytes(DEFAULT_BUCKET_MB)


@dataclass(frozen=True)
class StepPrediction:
    """One candidate's predicted step, averaged over its period."""

    compute_s: float  # forward + backward of the local batch
    compress_s: float  # compression + decompression on the critical path, per step (after overlap)
    comm_s: float  # communication on the critical path, per step (after overlap)
    step_s: float  # the step's predicted time: the sum of :meth:`terms`
    bytes_per_step: float  # payload bytes each worker contributes per step (all groups)
    collective: str  # the all-reduce chosen most often, or "all-gather", or "-" for one worker
    optimizer_s: float = 0.0  # the inner optimiser's update of the parameters, per step
    outer_s: float = 0.0  # DiLoCo's outer step, per step (once per exchange / H)

    def terms(self) -> dict[str, float]:
        """The step's named terms (s per step); they sum to ``step_s``."""
        return {"compute": self.compute_s, "optimizer": self.optimizer_s, "compress": self.compress_s,
                "comm": self.comm_s, "outer": self.outer_s}


def comm_time(ex: Exchange, links: tuple[WorkerLink, ...]) -> tuple[float, str]:
    """(seconds of the exchange's calls in order, the collective used most) on ``links`` (their nominal rates;
    each call's payload goes as ``nbytes / LINK_GOODPUT`` bytes on the wire)."""
    if len(links) < 2:
        return 0.0, "-"
    total, used = 0.0, Counter()
    for c in ex.calls:
        wire = c.nbytes / LINK_GOODPUT
        if c.op == "all_gather":
            total += collective_time("all_gather", "ring", wire, links, exchange_sizes=not c.sizes_known)
            used["all-gather"] += 1
        else:
            t, a = min((collective_time("all_reduce", a, wire, links), a) for a in ALGORITHMS)
            total += t
            used[a] += 1
    return total, used.most_common(1)[0][0] if used else "-"


def predict(c: Candidate, ex: Exchange, compute_s: float, grad_bytes: float, links: tuple[WorkerLink, ...],
            household_ex: Exchange | None = None, compress_s: float | None = None, optimizer_s: float = 0.0,
            outer_s: float = 0.0) -> StepPrediction:
    """The step of candidate ``c`` whose world exchange is ``ex``; ``household_ex``: the exchange a
    hierarchical candidate makes within its household every step (its links: the first N / households);
    ``compress_s``: compression per exchange on the user's device (:mod:`lowbw.advise.device`; default the
    exchange's own timing here); ``grad_bytes``: the fp32 gradient's bytes (DDP's buckets); ``optimizer_s``:
    one update by the candidate's inner optimiser; ``outer_s``: one outer step of the whole model (charged only
    where ``c.outer_step``)."""
    compress = ex.compress_s if compress_s is None else compress_s
    comm, coll = comm_time(ex, links)
    h = c.period
    opt = optimizer_s
    outer = outer_s / h if c.outer_step else 0.0
    local = compute_s + opt  # a local step: forward + backward, then the update
    if c.households and household_ex is not None:
        size = max(1, len(links) // c.households)
        within, _ = comm_time(household_ex, links[:size])
        per_comm = within + comm / h
        return StepPrediction(compute_s, 0.0, per_comm, local + per_comm, household_ex.bytes_sent + ex.bytes_sent / h,
                              coll, opt)
    if c.fragments > 1:
        every = h / c.fragments
        hidden = max(0.0, (compress + comm) / c.fragments - c.delay * local)
        per_comm = hidden / every
        return StepPrediction(compute_s, 0.0, per_comm, local + per_comm + outer, ex.bytes_sent / h, coll, opt, outer)
    if h > 1:
        return StepPrediction(compute_s, compress / h, comm / h, local + (compress + comm) / h + outer,
                              ex.bytes_sent / h, coll, opt, outer)
    if c.overlap:
        # the last bucket's share of the exchange starts when the backward pass ends
        last = min(1.0, DDP_BUCKET_BYTES / grad_bytes) if grad_bytes > 0 else 1.0
        step = max(step_time(compute_s, comm, compress, overlap=True), compute_s + last * (compress + comm))
        exposed = min(compress, step - compute_s)  # the compression beyond the backward pass, then the calls'
        return StepPrediction(compute_s, exposed, step - compute_s - exposed, step + opt, ex.bytes_sent, coll, opt)
    return StepPrediction(compute_s, compress, comm, local + compress + comm, ex.bytes_sent, coll, opt)
