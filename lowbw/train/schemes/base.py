"""The interface of a sync scheme: what a run does after (or in place of) each local step.

The :class:`~lowbw.train.loop.Trainer` holds one :class:`Scheme` object, built by
:func:`lowbw.train.schemes.make_scheme` from ``cfg.sync``, and never asks which kind it is. Per training step
it calls :meth:`Scheme.step` with a :class:`StepContext` (the replicas, their optimiser, the world, the batch
streams, this step's learning rate and the run's :class:`~lowbw.train.state.RunState`, never the Trainer);
the scheme runs the step (local step, then its exchange / average / outer step, or nothing; or, for the
parameter server, one server update) and charges its time and bytes to the run state. Its state dict is
part of the checkpoint; evaluation reads the model :meth:`Scheme.evaluation_model` names.

Invariants: a scheme's step advances ``state.samples`` (and ``state.step`` once per metrics step), leaves
``state.in_sync`` true only when every replica (or the evaluated model) agrees, and makes the same
collective calls on every process in the same order.

How to add a scheme (its module, its declaration, one registry line, its tests):

1. write a module under ``lowbw/train/schemes/`` with one class: a subclass of
   :class:`lowbw.train.schemes.synchronous.Synchronous` when it is "local step, then communicate" (override
   ``action(step, progress)`` for its schedule of gradient / model averages, and ``scheme_sync`` / ``finish``
   / ``state_dict`` when it has its own model synchronisation, as :mod:`lowbw.train.schemes.diloco`), or of
   :class:`Scheme` itself when its steps are not synchronous (as :mod:`lowbw.train.schemes.parameter_server`);
   it reads from the config only the engine's keys and the keys it declares;
2. declare it in ``lowbw/train/schemes/keys/<module>.py`` (torch-free): its key sets (frozen dataclasses of
   :func:`lowbw.train.config_key.key` fields: default, unit, help, range; shared ones such as
   :class:`~lowbw.train.schemes.keys.synchronous.WorldPeriod` are listed, not copied), its ``check(cfg)``
   (ConfigError naming the key) and ``SPEC = SchemeSpec("<module>:<Class>", keys=..., check=...)``
   (:class:`lowbw.train.schemes.spec.SchemeSpec`; its flags answer the rules across schemes);
3. add one line ``"<cfg.sync name>": <module>.SPEC`` to :data:`lowbw.train.schemes.registry.SCHEMES`
   (the config's choices of ``sync`` are its names; RunConfig gains its keys);
4. tests: its schedule or update by hand against a twin run, and its determinism.

Every scheme class is built as ``cls(cfg, world, rep, opt, batches)``.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch

from lowbw.train.replicas import Replicas
from lowbw.train.state import RunState, WorkerStats

__all__ = ["Scheme", "StepContext", "LocalStep", "ReplicaStep"]


@dataclass
class LocalStep:
    """Every local replica's gradient on its next batch: the rows ``[R, P]``, per replica its statistics
    (loss, correct, count, compute seconds), and ``exchange``: the world's exchange when the local step
    averaged the gradients itself (``ddp_hook``: DDP's communication hook), else None."""

    grads: torch.Tensor
    stats: list[WorkerStats]
    exchange: Any = None  # lowbw.train.world.Exchange


class ReplicaStep:
    """The local step a scheme calls (``StepContext.local_step``): every local replica's gradient on its next
    ``b`` samples, drawn from the run's batch streams. A collaborator of its own, so that a scheme's step never
    calls back into the Trainer (DDP's path has its own: :class:`lowbw.train.ddp.DDPStep`)."""

    def __init__(self, rep: Replicas, batches: Callable[[int, int], tuple[torch.Tensor, torch.Tensor]], R: int):
        self.rep, self.batches, self.R = rep, batches, R  # the replicas, batches(i, b), replicas held here

    def __call__(self, b: int) -> LocalStep:
        """The rows ``[R, P]`` and, per replica, its loss, correct predictions, sample count and compute
        seconds (batch + forward/backward)."""
        t_batch = time.perf_counter()
        xs, ys = zip(*(self.batches(i, b) for i in range(self.R)), strict=True)
        t_batch = (time.perf_counter() - t_batch) / self.R  # per replica: loading and augmenting its batch
        losses, correct, secs = self.rep.forward_backward(list(xs), list(ys))
        stats = [WorkerStats(loss=losses[i], correct=correct[i], count=b, t_compute=t_batch + secs[i])
                 for i in range(self.R)]
        return LocalStep(self.rep.grads, stats)


@dataclass
class StepContext:
    """What a scheme's step gets from the Trainer: the collaborators it may use and the state it advances.

    ``lr``: this step's learning rate; ``local_batch``: b = B / M; ``total``: the run's samples (progress =
    ``state.samples / total``); ``local_step(b)``: the replicas' gradients on their next ``b`` samples
    (:class:`LocalStep`; :class:`ReplicaStep`, or DDP's, which averages them too), never a method of
    the Trainer."""

    cfg: Any
    world: Any
    rep: Replicas
    opt: Any
    state: RunState
    lr: float
    local_batch: int
    total: int
    local_step: Callable[[int], LocalStep]


class Scheme(ABC):
    """One sync scheme of a run (see the module docstring). Subclasses set what they need in
    ``__init__(cfg, world, rep, opt, batches)``."""

    @abstractmethod
    def step(self, ctx: StepContext) -> None:
        """One training step: compute, communicate, and charge the step's time, bytes and statistics to
        ``ctx.state`` (clock, bytes_sent, intervals, step, samples, in_sync)."""

    def final_sync(self, ctx: StepContext) -> None:
        """The run's end left the replicas apart (``state.in_sync`` false): bring them together, charging the
        bytes and time. Default: nothing to do."""
        return None

    def evaluable(self, in_sync: bool) -> bool:
        """Can the run be evaluated now (``in_sync``: the replicas agree)?"""
        return in_sync

    @contextmanager
    def evaluation_model(self) -> Iterator[Replicas]:
        """Replicas whose row 0 holds the model to evaluate, for the body of the ``with``."""
        yield self.rep

    @property
    def density(self) -> float | None:
        """The top-k density an adaptive policy chose last (None: no such policy)."""
        return None

    def state_dict(self) -> dict:
        """What a checkpoint keeps of the scheme."""
        return {}

    def load_state_dict(self, s: dict) -> None:
        """Restore :meth:`state_dict`'s ``s``."""
        return None

    def close(self) -> None:
        """Release threads and other resources (the run is over)."""
        return None
