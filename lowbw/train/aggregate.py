"""Averaging over a group of workers: the code every synchronous scheme (:mod:`lowbw.train.schemes`)
communicates with.

- :func:`group_of`: a worker's group at a level (``world | neighbourhood | household``; contiguous ranges);
- :class:`TimedCollective`: a Collective that measures the seconds spent inside collective calls;
- :func:`make_compressor` / :func:`make_states`: the run's compressor and one seeded State per worker;
- :func:`aggregate_rank` / :func:`average_rank`: one rank's average of a gradient row (per parameter tensor
  or flat, compressed or dense) or of a model row (dense).

Gradient aggregation runs ``compressor.aggregate(tensor, coll, name, state)`` per parameter tensor
(``granularity=layer``) or once on the flat gradient (``flat``), on a :class:`TimedCollective` that
measures communication time and, in ``sim``, serialises the ranks' compute with one lock so that each
rank's (de)compression time is measured as if it had the machine to itself.
"""

from __future__ import annotations

import threading
import time

import torch

from lowbw.compress.base import State
from lowbw.compress.registry import make
from lowbw.train.assign import seed_for

__all__ = ["TimedCollective", "make_compressor", "make_states", "group_of", "aggregate_rank",
           "average_rank", "LEVELS"]

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

    def all_gather(self, tensor):
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


def aggregate_rank(grad_row: torch.Tensor, chunks, coll, comp, state) -> torch.Tensor:
    """Average over the group of ``grad_row`` (flat [P]) with ``comp`` (None: dense all-reduce)."""
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


def average_rank(row: torch.Tensor, coll) -> torch.Tensor:
    """Dense average over the group of a flat row (model averaging)."""
    s = coll.all_reduce(row)
    return s / coll.world_size if coll.world_size > 1 else s
