"""Averaging over a group of workers: the code every synchronous scheme (:mod:`lowbw.train.schemes`)
communicates with.

- :func:`group_of`: a worker's group at a level (``world | neighbourhood | household``; contiguous ranges);
- :class:`TimedCollective`: a Collective that measures the seconds spent inside collective calls;
- :func:`make_compressor` / :func:`make_states`: the run's compressor and one seeded State per worker;
- :func:`aggregate_rank` / :func:`average_rank`: one rank's average of a gradient row (per parameter tensor
  or flat, compressed or dense) or of a model row (dense).

Gradient aggregation runs ``compressor.aggregate(tensor, coll, name, state)`` per parameter tensor
(``granularity=layer``), once on the flat gradient (``flat``), or per DDP bucket (``bucket``: the tensors
of a bucket of ``bucket_mb`` MB, :mod:`lowbw.collective.buckets`, compressed each as with ``layer`` and exchanged
together, one packed call per round, :mod:`lowbw.comm.packing`; dense: one all-reduce of the bucket's
contiguous slice), on a :class:`TimedCollective` that measures communication time and, in ``sim``,
serialises the ranks' compute with one lock so that each rank's (de)compression time is measured as if it
had the machine to itself. :func:`granularity` resolves ``auto``: ``bucket`` wherever a compressor or an
outer step (diloco) is set, else ``flat``.

Buckets are exchanged in model order (their assignment is DDP's, from the model's end): lowbw exchanges after
the backward pass, so the order costs no time, and in model order every tensor's random draws (PowerSGD's
initial Q) come in the order ``layer`` makes them, so bucketed and per-tensor runs compute the same numbers.
"""

from __future__ import annotations

import threading
import time

import torch

from lowbw.collective.buckets import assign
from lowbw.comm.packing import all_reduce_packed, drive
from lowbw.compress.base import State
from lowbw.compress.registry import make
from lowbw.train.assign import seed_for
from lowbw.train.schemes.registry import spec_of

__all__ = ["TimedCollective", "make_compressor", "make_states", "group_of", "aggregate_rank",
           "average_rank", "granularity", "bucket_mb_of", "buckets_of", "call_bytes", "LEVELS"]

LEVELS = ("world", "neighbourhood", "household")


def group_of(level: str, worker: int, cfg) -> tuple[int, int, int]:
    """(group index, rank in group, group size) of ``worker`` at ``level``. Groups are contiguous ranges."""
    M = cfg.workers
    if level == "world":
        return 0, worker, M
    if level == "household":
        size = M // cfg.households
    elif level == "neighbourhood":
        size = M // cfg.neighbourhoods
    else:
        raise ValueError(level)
    return worker // size, worker % size, size


# ----------------------------------------------------------------------------------------------- timing
class TimedCollective:
    """A Collective that measures the seconds spent inside collective calls.

    With ``lock`` (sim): the caller holds ``lock`` while computing; it is released for the duration of each
    collective call (other ranks may compute meanwhile) and re-acquired afterwards. The time to re-acquire
    counts as communication, so ``elapsed - comm_s`` is this rank's own computation.
    """

    def __init__(self, inner, lock: threading.Lock | None = None):
        self.inner = inner
        self.rank = inner.rank
        self.world_size = inner.world_size
        self.lock = lock
        self.comm_s = 0.0

    @property
    def calls(self):
        return self.inner.calls

    def _do(self, fn, *args):
        t0 = time.perf_counter()
        if self.lock is not None:
            self.lock.release()
        try:
            return fn(*args)
        finally:
            if self.lock is not None:
                self.lock.acquire()
            self.comm_s += time.perf_counter() - t0

    def all_reduce(self, tensor):
        return self._do(self.inner.all_reduce, tensor)

    def all_gather(self, tensor, same_size: bool = False):
        if same_size:  # only then: a wrapped collective of the protocol's first form takes no keyword
            return self._do(lambda t: self.inner.all_gather(t, same_size=True), tensor)
        return self._do(self.inner.all_gather, tensor)

    def broadcast(self, tensor, src):
        return self._do(self.inner.broadcast, tensor, src)


# ----------------------------------------------------------------------------------------------- compressors
def make_compressor(cfg):
    """The configured compressor (None for dense ``none``), with error feedback as configured."""
    if cfg.compressor == "none":
        return None
    kw = dict(cfg.compressor_args)
    if cfg.error_feedback != "auto":
        kw["error_feedback"] = cfg.error_feedback == "on"
    return make(cfg.compressor, **kw)


def make_states(cfg, ranks: list[int]):
    """One compressor State per worker, seeded by (seed, worker) so every backend draws the same numbers."""
    if cfg.compressor == "none":
        return [None for _ in ranks]
    return [State(seed=seed_for(cfg.seed, "compress", r) % (2**31)) for r in ranks]


def granularity(cfg, comp) -> str:
    """``cfg.granularity`` with ``auto`` resolved: ``bucket`` with a compressor ``comp`` or a scheme that
    aggregates a pseudo-gradient (its declaration's ``pseudo_gradient``: diloco), else ``flat`` (the dense
    gradient as one DDP bucket)."""
    if cfg.granularity != "auto":
        return cfg.granularity
    return "bucket" if comp is not None or spec_of(cfg.sync).pseudo_gradient else "flat"


def bucket_mb_of(cfg, gran: str) -> float | None:
    """The bucket cap (MB) an exchange at granularity ``gran`` packs by; None: no buckets (layer, flat)."""
    return float(cfg.bucket_mb) if gran == "bucket" else None


def buckets_of(chunks, bucket_mb: float | None, elem: int = 4) -> list[list[int]]:
    """The chunks' buckets (lists of chunk indices) in model order: :func:`lowbw.collective.buckets.assign` of their
    bytes (``elem`` bytes per element); one chunk per bucket without ``bucket_mb``."""
    if bucket_mb is None:
        return [[i] for i in range(len(chunks))]
    return sorted(assign([k * elem for _, _, k, _ in chunks], bucket_mb))


def call_bytes(chunks, bucket_mb: float | None, elem: int = 4) -> list[int]:
    """Bytes of each dense all-reduce call of the chunks: one per bucket (one per chunk without buckets)."""
    return [sum(chunks[i][2] for i in b) * elem for b in buckets_of(chunks, bucket_mb, elem)]


def aggregate_rank(grad_row: torch.Tensor, chunks, coll, comp, state, bucket_mb: float | None = None) -> torch.Tensor:
    """Average over the group of ``grad_row`` (flat [P]) with ``comp`` (None: dense all-reduce); with
    ``bucket_mb``, per bucket (module docstring)."""
    if bucket_mb is not None:
        return _aggregate_buckets(grad_row, chunks, coll, comp, state, bucket_mb)
    out = torch.empty_like(grad_row)
    n = coll.world_size
    for name, off, k, shape in chunks:
        g = grad_row[off: off + k].view(shape)
        if comp is None:
            a = coll.all_reduce(g)
            if n > 1:
                a = a / n
        else:
            a = comp.aggregate(g, coll, name, state)
        out[off: off + k] = a.reshape(-1)
    return out


def _aggregate_buckets(grad_row: torch.Tensor, chunks, coll, comp, state, bucket_mb: float) -> torch.Tensor:
    """:func:`aggregate_rank` per bucket: dense, one all-reduce of the bucket (its contiguous slice of the row);
    a compressor that packs (``packs``), its tensors' rounds together (one call per round); any other
    compressor (its own ``aggregate``), tensor by tensor."""
    out = torch.empty_like(grad_row)
    n = coll.world_size
    for b in buckets_of(chunks, bucket_mb, grad_row.element_size()):
        cs = [chunks[i] for i in b]
        views = [grad_row[off: off + k].view(shape) for _, off, k, shape in cs]
        if comp is None:
            lo, hi = cs[0][1], cs[-1][1] + cs[-1][2]
            if hi - lo == sum(k for _, _, k, _ in cs):  # contiguous: the slice itself, as DDP's bucket view
                sums = [coll.all_reduce(grad_row[lo:hi])]
                cs = [("bucket", lo, hi - lo, torch.Size([hi - lo]))]
            else:
                sums = all_reduce_packed(coll, views)
            avgs = [s / n if n > 1 else s for s in sums]
        elif getattr(comp, "packs", False):
            avgs = drive([comp.rounds(v, name, state, n) for v, (name, _, _, _) in zip(views, cs, strict=True)],
                         coll, packed=True)
        else:
            avgs = [comp.aggregate(v, coll, name, state) for v, (name, _, _, _) in zip(views, cs, strict=True)]
        for (_, off, k, _), a in zip(cs, avgs, strict=True):
            out[off: off + k] = a.reshape(-1)
    return out


def average_rank(row: torch.Tensor, coll) -> torch.Tensor:
    """Dense average over the group of a flat row (model averaging)."""
    s = coll.all_reduce(row)
    return s / coll.world_size if coll.world_size > 1 else s
