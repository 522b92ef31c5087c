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

Streaming DiLoCo (Douillard et al. 2025, "Streaming DiLoCo with overlapping communication"): ``fragments``
= F > 1 splits the parameters into F fragments, each with its own theta_start and outer momentum, and
fragment f synchronises after the inner steps t with t = (f + 1) H / F (mod H), so the link carries one
fragment every H / F steps instead of the whole model every H. ``fragment_layout``: ``contiguous`` (whole
tensors in order, F groups of about equal size, :func:`split_fragments`) or ``strided`` (the paper's
sec. 2.2: the model's layers L_0, L_1, ... in a strided pattern, layer j in fragment j mod F, whole;
:func:`split_layers`; the engine's ``diloco_fragment_layout: strided``). ``delay`` = tau > 0 overlaps the
exchange with compute, as the engine's ``diloco_delay`` (its default schedule ``start_at_slot``):

1. after its slot t, fragment f takes Delta_i,f = theta_start_f - theta_i,f and starts steps 2 of the
   exchange in the background (one thread per DiLoCo object, exchanges in start order, so every rank runs
   the same collectives in the same order; the caller must not use the same process group meanwhile);
2. the inner steps t + 1 .. t + tau run while it is in flight;
3. after step t + tau the update lands (the wait for it times out): the outer step 3 on theta_start_f, then
   step 4 mixes, theta_i,f <- alpha theta_i,f + (1 - alpha) theta_start_f with alpha =
   ``fragment_update_alpha`` (the paper's mixing factor, its runs 0.5; torchft's name; 0 = replace, as
   plain DiLoCo). Landing comes before a start at the same step.

With alpha > 0 the replicas stay apart after a landing (the global model is theta_start); :meth:`DiLoCo.finish`
lands what is in flight and does the outer step, unmixed, of every fragment with inner steps since its
last update, so the replicas end equal. tau = 0 and alpha = 0 is the schedule without overlap.

One-step-delayed DiLoCo (``overlap="delayed"``; F = 1, tau = 0): the outer step overlaps a whole inner
phase, as PCCL's asynchronous DiLoCo runs it (Keiblinger et al. 2025, "Prime Collective Communications
Library", its example ``python/examples/nanogpt_diloco/async_diloco.py``). At outer boundary k (every H
inner steps), with phi the outer parameters (theta_start) and theta_i the worker's:

1. wait for the exchange started at boundary k - 1 (if any), its result Dbar_{k-1} = (1/N) sum_i Delta_i,k-1;
2. Delta_i,k = phi - theta_i (phi unchanged since boundary k - 1, where theta_i restarted from it);
3. if there was one, phi <- OuterOpt(phi, Dbar_{k-1}); theta_i <- phi (at the first boundary theta_i <- phi
   only: the first phase's progress comes back one boundary later as Dbar_0);
4. start the exchange of Delta_i,k in the background; the next H inner steps run meanwhile.

So every pseudo-gradient is applied one outer step late, to a phi it was not computed from (PCCL's "1-step
behind"); the exchange has H inner steps to complete. :meth:`DiLoCo.finish` lands the last exchange
(lowbw's choice: phi <- OuterOpt(phi, Dbar_K), theta_i <- phi; the inner steps after the last boundary are
dropped).

Eager updates (``overlap="eager"``; F = 1, tau = 0): Kale, Douillard & Donchev 2025, "Eager Updates For
Overlapped Communication and Computation in DiLoCo" (arXiv 2502.12996). The exchange overlaps the next
inner phase as in ``delayed``, but the outer step does not wait for the average: worker i uses its own fresh
pseudo-gradient at once in place of its stale share of the delayed average. Source of the rule: the paper's
text (its Algorithm) could not be read here; its abstract says only that "a particular variant, dubbed eager
updates" overlaps the outer step with the inner phase. Third-party summaries of the paper describe the rule as
applying "a mixture of the current local outer gradient with the delayed mixture of all other replicas' outer
gradients" (liner.com's review) and mixing "current local outer gradients with delayed non-local gradients"
(sciencestack.ai's summary); lowbw reads the mixture with the weights of an average over the N workers. At
outer boundary k, with phi_i worker i's outer parameters (they start equal) and theta_i its inner ones:

1. Delta_i,k = phi_i - theta_i;
2. wait for the exchange started at boundary k - 1 (if any): Dbar_{k-1} = (1/N) sum_j Delta_j,k-1;
3. g_i,k = (1/N) Delta_i,k + (1/N) sum_{j != i} Delta_j,k-1 = Dbar_{k-1} - (1/N) Delta_i,k-1 + (1/N) Delta_i,k
   (at the first boundary g_i,1 = (1/N) Delta_i,1: no earlier exchange; :func:`eager_gradient`);
4. phi_i <- OuterOpt(phi_i, g_i,k); theta_i <- phi_i;
5. start the exchange of Delta_i,k in the background (it lands at boundary k + 1).

The workers' phi_i differ (each has applied its own fresh share): the replicas are apart, and worker i's
pseudo-gradient is taken from its own phi_i. Summed over boundaries the g_i telescope, so without outer
momentum phi_i - phi_j = -outer_lr (Delta_i,K - Delta_j,K) / N after boundary K: the workers stay one local
share apart. With a compressor Dbar holds the decoded compressed own share, which step 3 removes uncompressed.
:meth:`DiLoCo.finish` is a last boundary that starts no exchange: step 3 with Delta_i,K+1 = phi_i - theta_i
(0 when the run ends on a boundary) and the landed Dbar_K. With N = 1, g_k = Delta_k exactly (Dbar_{k-1} =
Delta_{k-1}), and eager updates are plain DiLoCo.

The outer step is deterministic given the same inputs on every rank, so the replicas stay identical.
Buffers (batch-norm statistics) are not synchronised; average them yourself if your model has any.
"""

from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass

import torch
from torch import Tensor

from lowbw.comm.aggregation import resolve
from lowbw.comm.algorithms import ALLREDUCE_ALGORITHMS, OUTER_OPTIMIZERS, check_algorithm
from lowbw.comm.distributed import DistCollective
from lowbw.comm.engine import as_seconds
from lowbw.comm.errors import PeerTimeoutError
from lowbw.comm.meter import Meter
from lowbw.compress.base import State

__all__ = ["DiLoCo", "DiLoCoCounters", "OUTER_OPTIMIZERS", "OVERLAPS", "FRAGMENT_LAYOUTS", "outer_sgd",
           "check_outer", "eager_gradient", "split_fragments", "split_layers", "layer_runs", "split_rows",
           "sync_offsets"]

#: ``overlap=`` values: none (plain or Streaming DiLoCo), delayed (one-step-delayed outer steps, PCCL's),
#: eager (Kale et al. 2025's eager updates)
OVERLAPS = ("none", "delayed", "eager")
FRAGMENT_LAYOUTS = ("contiguous", "strided")


@dataclass
class DiLoCoCounters:
    inner_steps: int = 0  # inner optimiser steps taken by this worker
    syncs: int = 0  # fragment synchronisations (outer steps) done


def outer_sgd(params: list[Tensor], kind: str, lr: float, momentum: float) -> torch.optim.SGD:
    """The outer optimiser over the fp32 copies theta_start: SGD, with Nesterov momentum if ``kind`` says."""
    check_outer(kind, lr, momentum)
    return torch.optim.SGD(params, lr=lr, momentum=momentum, nesterov=kind == "nesterov")


def eager_gradient(mean: Tensor | None, prev: Tensor | None, delta: Tensor, n: int) -> Tensor:
    """Step 3 of eager updates (module doc): g = Dbar_{k-1} - Delta_i,k-1 / n + Delta_i,k / n, with ``mean``
    = Dbar_{k-1} and ``prev`` = Delta_i,k-1 (None before the first exchange landed: g = Delta_i,k / n); ``n``
    workers. The engine (``diloco_overlap: eager``) calls it too, so both compute the same floats."""
    own = delta / n
    if mean is None:
        return own
    return (mean - prev / n) + own


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


def layer_runs(names: list[str]) -> list[list[int]]:
    """The model's layers as lists of indices into ``names`` (parameter names, in order): a tensor's layer is
    its name up to the first numeric component (``blocks.3.attn.c_attn.weight`` -> ``blocks.3``: a repeated
    block), else its module (``fc1.weight`` -> ``fc1``); consecutive tensors of one layer are one layer.
    The engine's strided fragments use the same rule (:func:`lowbw.train.schemes.streaming.layers`)."""
    out: list[list[int]] = []
    last = None
    for i, name in enumerate(names):
        parts = name.split(".")
        num = next((j for j, q in enumerate(parts[:-1]) if q.isdigit()), None)
        key = ".".join(parts[: num + 1]) if num is not None else ".".join(parts[:-1])
        if key != last or not out:
            out.append([])
        out[-1].append(i)
        last = key
    return out


def split_layers(names: list[str], count: int) -> list[list[int]]:
    """Streaming DiLoCo's strided fragments (Douillard et al. 2025, sec. 2.2): layer j of
    :func:`layer_runs` goes to fragment j mod ``count``, whole. Raises ValueError with fewer layers than
    fragments."""
    ls = layer_runs(names)
    if count > len(ls):
        raise ValueError(f"{count} strided fragments need as many layers; the model has {len(ls)}")
    return [[i for j in range(f, len(ls), count) for i in ls[j]] for f in range(count)]


def sync_offsets(period: int, count: int) -> list[int]:
    """Streaming DiLoCo's schedule: fragment f of ``count`` synchronises after the inner steps t with
    t % H == ((f + 1) H / F) % H (H = ``period``, F = ``count``; the last fragment at t % H == 0)."""
    return [((f + 1) * period // count) % period for f in range(count)]


class DiLoCo:
    """DiLoCo's outer loop for ``model`` trained by ``inner_optimizer`` on this rank (see the module doc).

    ``period``: H, inner steps per synchronisation. ``outer``/``outer_lr``/``outer_momentum``: the outer
    optimiser. ``compressor``: a ``lowbw.compress`` name or object for Delta (``None``: dense fp32), with
    ``compressor_args`` for a name. ``algorithm``: the all-reduce (``lowbw.comm.ALGORITHMS``). ``fragments``:
    Streaming DiLoCo's F, ``fragment_layout`` (``contiguous`` | ``strided``), ``delay`` (tau) and
    ``fragment_update_alpha`` (alpha). ``overlap``: ``none``, ``delayed`` (one-step-delayed outer steps) or
    ``eager`` (eager updates).
    ``seed``: this worker's compressor state seed (stochastic compressors). ``timeout``: seconds per wait on
    a peer (also bounds the wait for a background exchange). ``sync_start``: broadcast rank 0's parameters
    first, so every replica starts equal (as DDP does). ``collective``: a ``lowbw`` collective to use instead
    of ``DistCollective(algorithm, group)``, e.g. one :class:`~lowbw.comm.ThreadCollective` per thread to run
    the workers in one process; it meters into its own meter, if any.
    """

    def __init__(self, model: torch.nn.Module, inner_optimizer: torch.optim.Optimizer, period: int = 16, *,
                 outer: str = "nesterov", outer_lr: float = 0.7, outer_momentum: float = 0.9,
                 compressor=None, compressor_args: dict | None = None, algorithm: str = "ring",
                 fragments: int = 1, fragment_layout: str = "contiguous", delay: int = 0,
                 fragment_update_alpha: float = 0.0, overlap: str = "none", group=None, timeout=None,
                 seed: int = 0, sync_start: bool = True, collective=None) -> None:
        if not isinstance(period, int) or period < 1:
            raise ValueError(f"period={period!r} must be an integer >= 1")
        if not isinstance(fragments, int) or not 1 <= fragments <= period:
            raise ValueError(f"fragments={fragments!r} must be an integer in [1, period={period}]")
        if fragment_layout not in FRAGMENT_LAYOUTS:
            raise ValueError(f"fragment_layout={fragment_layout!r} is not known; allowed: "
                             f"{', '.join(FRAGMENT_LAYOUTS)}")
        if not isinstance(delay, int) or not 0 <= delay < period:
            raise ValueError(f"delay={delay!r} must be an integer in [0, period={period}) (a fragment's update "
                             "lands before its next exchange)")
        if not 0 <= fragment_update_alpha < 1:
            raise ValueError(f"fragment_update_alpha={fragment_update_alpha!r} must be in [0, 1)")
        if overlap not in OVERLAPS:
            raise ValueError(f"overlap={overlap!r} is not known; allowed: {', '.join(OVERLAPS)}")
        if overlap != "none" and (fragments != 1 or delay or fragment_update_alpha):
            raise ValueError(f"overlap={overlap!r} overlaps whole outer steps: it needs fragments=1, delay=0 and "
                             "fragment_update_alpha=0")
        check_algorithm(algorithm, ALLREDUCE_ALGORITHMS)
        check_outer(outer, outer_lr, outer_momentum)
        self.model = model
        self.inner = inner_optimizer
        self.period = period
        self.delay, self.alpha, self.overlap = delay, float(fragment_update_alpha), overlap
        self.params = [p for p in model.parameters() if p.requires_grad]
        if not self.params:
            raise ValueError("DiLoCo: the model has no trainable parameters")
        names = {id(p): n for n, p in model.named_parameters()}
        self.names = [names[id(p)] for p in self.params]
        if fragment_layout == "strided":
            groups = split_layers(self.names, fragments)
        else:
            groups = split_fragments([p.numel() for p in self.params], fragments)
        self.compressor = resolve(compressor, **(compressor_args or {}))
        self.state = State(seed=seed)
        self.timeout_s = as_seconds(timeout)
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
        self.fragments = groups
        # fragment f synchronises after inner steps t with t % H == offsets[f] (the last one at t % H == 0)
        self.offsets = sync_offsets(period, len(groups))
        self.start = [[p.detach().float().clone() for p in (self.params[i] for i in g)] for g in groups]
        self.outer = [outer_sgd(s, outer, outer_lr, outer_momentum) for s in self.start]
        self.inflight: list[tuple[int, int, object]] = []  # (fragment, landing step, Future), in start order
        self.dirty = [False] * len(groups)  # inner steps since the fragment's last update
        self.mixed = [False] * len(groups)  # its last update was mixed (alpha > 0): replicas apart
        self._pool: ThreadPoolExecutor | None = None
        self._own: list[Tensor] | None = None  # eager: this worker's Delta_i,k-1, its share of the exchange in flight

    @property
    def bytes_sent(self) -> int:
        """Bytes this worker has sent synchronising (every outer step's exchange), without the start broadcast
        (:attr:`start_bytes_sent`, which only the ranks that send or forward the model pay): the ranks of a
        ring of 2 report the same total. Exchanges still in flight count what they have sent so far."""
        return self.meter.bytes_sent - self._bytes0 - self.start_bytes_sent

    def step(self) -> bool:
        """One inner step (``inner_optimizer.step()`` then ``zero_grad()``), then what is due: the landing of
        exchanges started tau steps ago, and the synchronisation (or, tau > 0 or ``overlap``, the start) of
        each fragment whose slot this is. Returns whether a fragment's exchange started or completed."""
        self.inner.step()
        self.inner.zero_grad(set_to_none=True)
        self.counters.inner_steps += 1
        t = self.counters.inner_steps
        self.dirty = [True] * len(self.dirty)
        landed = False
        while self.inflight and self.inflight[0][1] <= t:
            self._land(*self.inflight.pop(0))
            landed = True
        due = [f for f, off in enumerate(self.offsets) if t % self.period == off]
        for f in due:
            if self.overlap != "none":
                self._delayed_boundary()
            elif self.delay == 0:
                self.sync(f)
            else:
                self.inflight.append((f, t + self.delay, self._submit(f)))
        return bool(due) or landed

    @torch.no_grad()
    def sync(self, fragment: int = 0, alpha: float | None = None) -> None:
        """Steps 1-4 of the module doc for one fragment at once (call it directly to synchronise out of
        schedule, with no exchange in flight); step 4 mixes with ``alpha`` (default ``fragment_update_alpha``)."""
        if self.inflight:
            raise RuntimeError("DiLoCo.sync: exchanges are in flight on the background thread; call finish() first")
        self._apply(fragment, self._exchange(fragment, self._deltas(fragment)), alpha)

    @torch.no_grad()
    def finish(self) -> None:
        """The run's last synchronisation: land every exchange in flight, then the outer step (unmixed) of
        every fragment with inner steps since its last update; a fragment whose mixed update was the last
        thing to touch it is set to theta_start. ``overlap="delayed"``: land the last exchange; ``"eager"``: the
        last boundary, which starts no exchange (module doc).
        Afterwards the replicas are equal; the background thread is shut down."""
        if self.overlap == "eager":
            self._eager_boundary(start=False)
        while self.inflight:
            self._land(*self.inflight.pop(0))
        if self.overlap != "none":
            pass  # the landing applied phi's outer step and theta <- phi
        else:
            for f, d in enumerate(self.dirty):
                if d:
                    self.sync(f, alpha=0.0)
                elif self.mixed[f]:
                    for i, s in zip(self.fragments[f], self.start[f]):
                        self.params[i].copy_(s)
                    self.mixed[f] = False
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None

    # ------------------------------------------------------------------------------------------ internals
    def _deltas(self, f: int) -> list[Tensor]:
        """Step 1 for fragment ``f``: Delta_i = theta_start - theta_i per tensor (new fp32 tensors)."""
        return [s - self.params[i].detach().float() for i, s in zip(self.fragments[f], self.start[f])]

    def _exchange(self, f: int, deltas: list[Tensor]) -> list[Tensor]:
        """Step 2: the mean over ranks of each Delta (through the compressor)."""
        return [self.compressor.aggregate(d, self.coll, self.names[i], self.state)
                for i, d in zip(self.fragments[f], deltas)]

    def _submit(self, f: int):
        """Steps 1-2 of fragment ``f``: Delta taken now, the exchange on the background thread."""
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="lowbw-diloco-exchange")
        deltas = self._deltas(f)
        return self._pool.submit(torch.no_grad()(self._exchange), f, deltas)

    def _wait(self, f: int, fut) -> list[Tensor]:
        limit = self.timeout_s * (len(self.fragments[f]) + 1)  # every collective call inside has the timeout
        try:
            return fut.result(timeout=limit)
        except FutureTimeout:
            raise PeerTimeoutError(f"DiLoCo: fragment {f}'s exchange did not complete within {limit:g} s") from None

    @torch.no_grad()
    def _apply(self, f: int, means: list[Tensor], alpha: float | None = None) -> None:
        """Steps 3-4 for fragment ``f`` with the averaged Deltas ``means``."""
        a = self.alpha if alpha is None else alpha
        for s, g in zip(self.start[f], means):
            s.grad = g
        self.outer[f].step()  # 3. theta_start <- outer step with Delta as the gradient
        for i, s in zip(self.fragments[f], self.start[f]):
            s.grad = None
            p = self.params[i]
            if a:  # 4. theta <- alpha theta + (1 - alpha) theta_start (torchft's lerp towards the global model)
                p.copy_(p.detach().float().lerp(s, 1 - a))
            else:  # 4. every replica restarts from theta_start
                p.copy_(s)
        self.dirty[f] = False
        self.mixed[f] = a > 0
        self.counters.syncs += 1

    @torch.no_grad()
    def _land(self, f: int, land_step: int, fut) -> None:
        """Step 3 of tau > 0 (or of ``overlap="delayed"``): wait for the exchange, then the outer step."""
        self._apply(f, self._wait(f, fut))

    @torch.no_grad()
    def _delayed_boundary(self) -> None:
        """Steps 1-4 of one-step-delayed DiLoCo (module doc) at an outer boundary (eager: steps 1-5 of eager
        updates)."""
        if self.overlap == "eager":
            self._eager_boundary(start=True)
            return
        pending = self.inflight.pop(0) if self.inflight else None
        means = self._wait(0, pending[2]) if pending else None  # 1. Dbar_{k-1}
        deltas = self._deltas(0)  # 2. Delta_k = phi - theta (phi not yet moved by Dbar_{k-1})
        if means is not None:
            self._apply(0, means)  # 3. phi <- OuterOpt(phi, Dbar_{k-1}); theta <- phi
        else:
            for i, s in zip(self.fragments[0], self.start[0]):
                self.params[i].copy_(s)  # 3. first boundary: theta <- phi
            self.dirty[0] = False
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="lowbw-diloco-exchange")
        # 4. Delta_k's exchange in the background; it lands at the next boundary (or in finish)
        self.inflight.append((0, math.inf, self._pool.submit(torch.no_grad()(self._exchange), 0, deltas)))

    @torch.no_grad()
    def _eager_boundary(self, start: bool) -> None:
        """Steps 1-5 of eager updates (module doc) at an outer boundary; ``start``: start Delta_k's exchange
        (False: :meth:`finish`'s last boundary)."""
        deltas = self._deltas(0)  # 1. Delta_i,k = phi_i - theta_i
        pending = self.inflight.pop(0) if self.inflight else None
        means = self._wait(0, pending[2]) if pending else [None] * len(deltas)  # 2. Dbar_{k-1}
        prev = self._own or [None] * len(deltas)
        n = self.coll.world_size
        self._apply(0, [eager_gradient(m, p, d, n) for m, p, d in zip(means, prev, deltas)])  # 3.-4.
        self._own = None
        if start:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="lowbw-diloco-exchange")
            # 5. the exchange of Delta_i,k (kept: its own share); it lands at the next boundary (or in finish)
            self._own = [d.clone() for d in deltas]
            self.inflight.append((0, math.inf, self._pool.submit(torch.no_grad()(self._exchange), 0, deltas)))
