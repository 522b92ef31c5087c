"""Synchronisation schemes: what is communicated after each step, and the code that communicates it.

Per step, every scheme is a pair (gradient level, model-averaging level), each ``None`` or one of
``world | neighbourhood | household``:

==============  =========================================================================================
``sync``        gradients averaged over the world every step (any collective, any compressor + EF)
``local``       local SGD: local steps, models averaged over the world every L_W steps
``post_local``  ``sync`` until ``local_start`` of the run, then ``local`` (Lin et al. 2020)
``hierarchical`` households of M/H workers: gradients averaged in the household every step (L_H = 1) or
                models every L_H steps; neighbourhoods (NB) every L_N steps; the world every L_W steps
                (the highest level due wins). Thesis ch. 4.2.
``desloc``      ``local`` with Adam, whose moments are averaged on their own periods too (Iacob et al. 2025),
                see :mod:`lowbw.train.desloc`
``sparta``      local steps; a random p of the parameters averaged after every step (Beton et al. 2025),
                see :mod:`lowbw.train.sparta`
``ssp/async``   parameter server, see :mod:`lowbw.train.ps` (sim only)
``diloco``      local steps; every L_W steps an outer optimiser step on the world's average pseudo-gradient
                (Douillard et al. 2023); with F = ``diloco_fragments`` one fragment's every L_W / F steps
                (Streaming DiLoCo), see :class:`lowbw.train.synchroniser.Synchroniser`
==============  =========================================================================================

Gradient aggregation runs ``compressor.aggregate(tensor, coll, name, state)`` per parameter tensor
(``granularity=layer``) or once on the flat gradient (``flat``), on a :class:`TimedCollective` that
measures communication time and, in ``sim``, serialises the ranks' compute with one lock so that each
rank's (de)compression time is measured as if it had the machine to itself.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

import torch

from lowbw.comm.diloco import sync_offsets
from lowbw.compress.base import State
from lowbw.compress.registry import make
from lowbw.train.assign import seed_for

__all__ = ["Action", "Scheme", "TimedCollective", "make_compressor", "make_states", "group_of", "aggregate_rank",
           "average_rank", "LEVELS"]

LEVELS = ("world", "neighbourhood", "household")


@dataclass(frozen=True)
class Action:
    grad: str | None  # level at which gradients are averaged (None: local step)
    avg: str | None  # level at which models are averaged after the step (None: no averaging)
    fragment: int = 0  # diloco: the fragment whose outer step ``avg`` is (0 with one fragment)


class Scheme:
    """Which communication a step does (``step`` counts from 1; ``progress`` = samples / total samples)."""

    def __init__(self, cfg):
        self.kind = cfg.sync
        self.LW = cfg.world_period
        self.LH = cfg.household_period
        self.LN = cfg.neighbourhood_period
        self.NB = cfg.neighbourhoods
        self.local_start = cfg.local_start
        # diloco: fragment f has its outer step after the steps t with t % L_W == offsets[f]
        # (diloco_schedule land_at_slot, torchft's: the exchange starts tau steps before the slot, lands at it)
        F = getattr(cfg, "diloco_fragments", 1) if self.kind == "diloco" else 1
        early = cfg.diloco_delay if getattr(cfg, "diloco_schedule", "") == "land_at_slot" else 0
        self.fragment_at = {(off - early) % self.LW: f for f, off in enumerate(sync_offsets(self.LW, F))}

    def action(self, step: int, progress: float) -> Action:
        k = self.kind
        if k == "sync" or (k == "post_local" and progress < self.local_start):
            return Action("world", None)
        if k == "diloco":
            f = self.fragment_at.get(step % self.LW)
            return Action(None, None) if f is None else Action(None, "world", f)
        if k == "sparta":  # only its per-step sparse averages (lowbw.train.sparta)
            return Action(None, None)
        if k in ("local", "post_local", "desloc"):  # desloc: its moments' averages in lowbw.train.desloc
            return Action(None, "world" if step % self.LW == 0 else None)
        if k == "hierarchical":
            grad = "household" if self.LH == 1 else None
            if step % self.LW == 0:
                avg = "world"
            elif self.NB and step % self.LN == 0:
                avg = "neighbourhood"
            elif self.LH > 1 and step % self.LH == 0:
                avg = "household"
            else:
                avg = None
            return Action(grad, avg)
        raise ValueError(f"sync={k!r} has no per-step action (parameter-server schemes run in lowbw.train.ps)")


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
