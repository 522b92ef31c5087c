"""DiLoCo around your own training loop: inner steps on each worker, a rare outer step over the network.

>>> opt = torch.optim.AdamW(model.parameters(), lr=1e-3)                  # the inner optimiser
>>> outer = DiLoCo(model, opt, period=16, compressor="blockwise", compressor_args={"bits": 4})
>>> for x, y in loader:
...     loss_fn(model(x), y).backward()
...     outer.step()                     # inner step; every 16th also synchronises (Delta, outer step)
>>> outer.bytes_sent                     # what this worker sent synchronising   # doctest: +SKIP
>>> outer.start_bytes_sent               # ... and in the start broadcast (rank 0's fan-out)   # doctest: +SKIP

DiLoCo (Douillard et al. 2023, "DiLoCo: Distributed Low-Communication Training of Language Models") on
``torch.distributed`` (any backend; after ``init_process_group``). Every ``period`` (H) inner steps:

1. Delta_i = theta_start - theta_i, per parameter, in fp32 (the worker's pseudo-gradient).
2. Delta = (1/N) sum_i Delta_i, through ``compressor`` over our collective ``algorithm`` (with the
   compressor's error feedback, per worker and per parameter, when it has it; ``None``: dense fp32).
3. The outer optimiser steps theta_start with Delta as its gradient: SGD with Nesterov momentum
   (``outer="nesterov"``, lr 0.7, momentum 0.9, the paper's) or plain SGD (``outer="sgd"``).
4. theta_i = theta_start on every worker; the inner optimiser keeps its state (AdamW moments).

With ``outer="sgd"``, ``outer_lr=1`` and ``outer_momentum=0`` step 3 is theta_start - Delta = the mean of
the workers' parameters: local SGD (model averaging every H steps).

``fragments`` = F > 1 is Streaming DiLoCo's schedule (Douillard et al. 2025) without its overlap: the
parameters are split into F contiguous fragments of about equal size and fragment f synchronises at the
inner steps t with t = (f + 1) H / F (mod H), so the link carries one fragment every H / F steps instead
of the whole model every H. Each fragment has its own theta_start and outer momentum.

The outer step is deterministic given the same inputs on every rank, so the replicas stay identical.
Buffers (batch-norm statistics) are not synchronised; average them yourself if your model has any.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from lowbw.algorithms import ALLREDUCE_ALGORITHMS, OUTER_OPTIMIZERS, check_algorithm
from lowbw.comm.aggregate import resolve
from lowbw.comm.distributed import DistCollective
from lowbw.comm.meter import Meter
from lowbw.compress.base import State

__all__ = ["DiLoCo", "DiLoCoCounters", "OUTER_OPTIMIZERS", "outer_sgd", "check_outer", "split_fragments",
           "split_rows", "sync_offsets"]


@dataclass
class DiLoCoCounters:
    inner_steps: int = 0  # inner optimiser steps taken by this worker
    syncs: int = 0  # fragment synchronisations (outer steps) done


def outer_sgd(params: list[Tensor], kind: str, lr: float, momentum: float) -> torch.optim.SGD:
    """The outer optimiser over the fp32 copies theta_start: SGD, with Nesterov momentum if ``kind`` says."""
    check_outer(kind, lr, momentum)
    return torch.optim.SGD(params, lr=lr, momentum=momentum, nesterov=kind == "nesterov")


def check_outer(kind: str, lr: float, momentum: float) -> None:
    """One-line ValueErrors for outer-optimiser settings that are not allowed."""
    if kind not in OUTER_OPTIMIZERS:
        raise ValueError(f"outer={kind!r} is not known; allowed: {', '.join(OUTER_OPTIMIZERS)}")
    if not lr > 0:
        raise ValueError(f"outer_lr={lr!r} must be > 0")
    if not 0 <= momentum < 1:
        raise ValueError(f"outer_momentum={momentum!r} must be in [0, 1)")
    if kind == "nesterov" and momentum == 0:
        raise ValueError("outer='nesterov' needs outer_momentum > 0 (use outer='sgd' for plain averaging)")


def split_fragments(sizes: list[int], count: int) -> list[list[int]]:
    """Split tensor indices 0..len(sizes)-1 (sizes in elements) into at most ``count`` contiguous groups of
    about equal total size: tensor i goes to group floor(F * S_i / S), S_i = the elements before it, S = all
    of them (empty groups are dropped, so fewer than ``count`` come back when there are few tensors or one
    dominates). The wrapper's split; the engine's ``diloco_fragments`` uses :func:`split_rows`."""
    total = sum(sizes)
    groups: list[list[int]] = [[] for _ in range(count)]
    acc = 0
    for i, s in enumerate(sizes):
        f = min(count - 1, acc * count // max(1, total))
        groups[f].append(i)
        acc += s
    return [g for g in groups if g]


def split_rows(shapes: list[tuple[int, ...]], count: int) -> list[list[tuple[int, int, int]]]:
    """Split the concatenation of tensors of ``shapes`` (flattened, in order) into ``count`` contiguous
    fragments of near-equal size, cutting only between rows (first-dimension slices) of a tensor.

    Returns, per fragment, its pieces ``(tensor index, first row, end row)``. Boundary f (f = 1..F-1) is the
    row boundary nearest to f P / F (P = all elements). Unlike :func:`split_fragments` a large tensor may be
    shared by fragments (one block of rows each), so F near-equal fragments exist even where one layer holds
    most of the parameters (the MLP's first layer). Raises ValueError if two boundaries coincide (F too
    large for the model)."""
    rows = [s[0] if len(s) else 1 for s in shapes]
    unit = [(math.prod(s) // r if r else 0) for s, r in zip(shapes, rows)]  # elements per row
    starts = [0]
    for r, u in zip(rows, unit):
        starts.append(starts[-1] + r * u)
    total = starts[-1]
    cuts = [0]  # boundaries in elements, each at a row boundary
    for f in range(1, count):
        target = f * total / count
        i = max(k for k in range(len(shapes)) if starts[k] <= target) if total else 0
        u = max(unit[i], 1)
        r = min(rows[i], max(0, round((target - starts[i]) / u)))
        cuts.append(starts[i] + r * u)
    cuts.append(total)
    if any(b <= a for a, b in zip(cuts, cuts[1:])):
        raise ValueError(f"the {total} parameters cannot be cut into {count} non-empty fragments at row "
                         "boundaries")
    out: list[list[tuple[int, int, int]]] = []
    for a, b in zip(cuts, cuts[1:]):
        pieces = []
        for i in range(len(shapes)):
            lo, hi = max(a, starts[i]), min(b, starts[i + 1])
            if hi > lo:
                u = max(unit[i], 1)
                pieces.append((i, (lo - starts[i]) // u, (hi - starts[i]) // u))
        out.append(pieces)
    return out


def sync_offsets(period: int, count: int) -> list[int]:
    """Streaming DiLoCo's schedule: fragment f of ``count`` synchronises after the inner steps t with
    t % H == ((f + 1) H / F) % H (H = ``period``, F = ``count``; the last fragment at t % H == 0)."""
    return [((f + 1) * period // count) % period for f in range(count)]


class DiLoCo:
    """DiLoCo's outer loop for ``model`` trained by ``inner_optimizer`` on this rank (see the module doc).

    ``period``: H, inner steps per synchronisation. ``outer``/``outer_lr``/``outer_momentum``: the outer
    optimiser. ``compressor``: a ``lowbw.compress`` name or object for Delta (``None``: dense fp32), with
    ``compressor_args`` for a name. ``algorithm``: the all-reduce (``lowbw.comm.ALGORITHMS``). ``fragments``:
    Streaming DiLoCo's F. ``seed``: this worker's compressor state seed (stochastic compressors).
    ``sync_start``: broadcast rank 0's parameters first, so every replica starts equal (as DDP does).
    ``collective``: a ``lowbw`` collective to use instead of ``DistCollective(algorithm, group)``, e.g. one
    :class:`~lowbw.comm.ThreadCollective` per thread to run the workers in one process; it meters into
    its own meter, if any.
    """

    def __init__(self, model: torch.nn.Module, inner_optimizer: torch.optim.Optimizer, period: int = 16, *,
                 outer: str = "nesterov", outer_lr: float = 0.7, outer_momentum: float = 0.9,
                 compressor=None, compressor_args: dict | None = None, algorithm: str = "ring",
                 fragments: int = 1, group=None, timeout=None, seed: int = 0, sync_start: bool = True,
                 collective=None) -> None:
        if not isinstance(period, int) or period < 1:
            raise ValueError(f"period={period!r} must be an integer >= 1")
        if not isinstance(fragments, int) or not 1 <= fragments <= period:
            raise ValueError(f"fragments={fragments!r} must be an integer in [1, period={period}]")
        check_algorithm(algorithm, ALLREDUCE_ALGORITHMS)
        check_outer(outer, outer_lr, outer_momentum)
        self.model = model
        self.inner = inner_optimizer
        self.period = period
        self.params = [p for p in model.parameters() if p.requires_grad]
        if not self.params:
            raise ValueError("DiLoCo: the model has no trainable parameters")
        names = {id(p): n for n, p in model.named_parameters()}
        self.names = [names[id(p)] for p in self.params]
        self.compressor = resolve(compressor, **(compressor_args or {}))
        self.state = State(seed=seed)
        if collective is None:
            self.meter = Meter()
            self.coll = DistCollective(algorithm, group=group, meter=self.meter, timeout=timeout)
        else:
            self.meter = getattr(collective, "meter", None) or Meter()
            self.coll = collective
        self.counters = DiLoCoCounters()
        self._bytes0 = self.meter.bytes_sent  # what the meter held before us (a collective's shared meter)
        if sync_start:
            with torch.no_grad():
                for p in self.params:
                    p.copy_(self.coll.broadcast(p.detach(), 0))
        #: bytes this worker sent in the start broadcast (rank 0 sends the model, the others what the
        #: broadcast's algorithm forwards): apart from :attr:`bytes_sent`, which is then equal on every rank
        self.start_bytes_sent = self.meter.bytes_sent - self._bytes0
        groups = split_fragments([p.numel() for p in self.params], fragments)
        self.fragments = groups
        # fragment f synchronises after inner steps t with t % H == offsets[f] (the last one at t % H == 0)
        self.offsets = sync_offsets(period, len(groups))
        self.start = [[p.detach().float().clone() for p in (self.params[i] for i in g)] for g in groups]
        self.outer = [outer_sgd(s, outer, outer_lr, outer_momentum) for s in self.start]

    @property
    def bytes_sent(self) -> int:
        """Bytes this worker has sent synchronising (every outer step's exchange), without the start broadcast
        (:attr:`start_bytes_sent`, which only the ranks that send or forward the model pay): the ranks of a
        ring of 2 report the same total."""
        return self.meter.bytes_sent - self._bytes0 - self.start_bytes_sent

    def step(self) -> bool:
        """One inner step (``inner_optimizer.step()`` then ``zero_grad()``), then the synchronisation of each
        fragment that is due. Returns whether anything was synchronised."""
        self.inner.step()
        self.inner.zero_grad(set_to_none=True)
        self.counters.inner_steps += 1
        due = [f for f, off in enumerate(self.offsets) if self.counters.inner_steps % self.period == off]
        for f in due:
            self.sync(f)
        return bool(due)

    @torch.no_grad()
    def sync(self, fragment: int = 0) -> None:
        """Steps 1-4 of the module doc for one fragment (call it directly to synchronise out of schedule)."""
        idx, start, opt = self.fragments[fragment], self.start[fragment], self.outer[fragment]
        for i, s in zip(idx, start):
            delta = s - self.params[i].detach().float()  # 1. Delta_i = theta_start - theta_i
            s.grad = self.compressor.aggregate(delta, self.coll, self.names[i], self.state)  # 2. mean over ranks
        opt.step()  # 3. theta_start <- outer step with Delta as the gradient
        for i, s in zip(idx, start):
            s.grad = None
            self.params[i].copy_(s)  # 4. every replica restarts from theta_start
        self.counters.syncs += 1
