"""The evolving state of a training run, and the statistics one worker reports for one step.

:class:`RunState` holds every number of a run's progress and records (identical on every process); its
:meth:`~RunState.to_dict` / :meth:`~RunState.from_dict` is the run's part of a checkpoint (the tensors of
replicas, optimiser, data streams and compressors are checkpointed by their owners).

:class:`WorkerStats` is one worker's row of a step's statistics; every process gathers every worker's row
(unmetered) with ``world.allgather_rows`` and reads them back as columns with :meth:`WorkerStats.from_rows`.
"""

from __future__ import annotations

import copy
from dataclasses import asdict, dataclass, field, fields
from typing import Any

import torch

__all__ = ["CLOCK_FIELDS", "MEASURED_FIELDS", "Interval", "RunState", "WorkerStats"]

# virtual clock (seconds) and the alpha-beta coefficients of its communication time:
# t_virtual_comm = comm_alpha_terms * alpha_s + comm_beta_bytes * 8 / bandwidth_bps
CLOCK_FIELDS = ("t_virtual", "t_virtual_compute", "t_virtual_compress", "t_virtual_comm", "comm_alpha_terms",
                "comm_beta_bytes")
# measured seconds, summed over steps of the slowest worker per step; t_meta: lowbw's own bookkeeping
# exchanges (statistics and call records between processes), part of t_step but not of training
MEASURED_FIELDS = ("t_compute", "t_compress", "t_comm", "t_step", "t_meta")


@dataclass
class Interval:
    """Training statistics summed over ``n`` steps: ``loss`` is the sum of the steps' mean losses over
    workers, ``correct`` and ``count`` are samples (so loss/n is the mean loss, correct/count the accuracy)."""

    loss: float = 0.0
    correct: float = 0.0
    count: float = 0.0
    n: float = 0.0


# fields added after checkpoints were first written: a checkpoint without one resumes with its default
LATER = ("messages",)


@dataclass
class RunState:
    """A run's progress and records. ``batch`` is the global batch size B now (the dynamic batch size grows
    it); ``next_eval`` is in samples; ``ttt`` maps each target's name (:mod:`lowbw.train.targets`) to the
    first evaluation that reached it; ``lines`` counts metrics.jsonl lines; ``in_sync``: all replicas equal;
    ``wall_s``: wall seconds of the run's earlier (checkpointed) segments."""

    batch: int
    next_eval: float
    ttt: dict[str, Any]
    step: int = 0
    samples: int = 0
    bytes_sent: int = 0
    messages: int = 0  # collective calls one worker made (each pays the link's latency per step of its algorithm)
    clock: dict[str, float] = field(default_factory=lambda: dict.fromkeys(CLOCK_FIELDS, 0.0))
    meas: dict[str, float] = field(default_factory=lambda: dict.fromkeys(MEASURED_FIELDS, 0.0))
    interval: Interval = field(default_factory=Interval)  # since the last metrics line
    epoch_interval: Interval = field(default_factory=Interval)  # since the last evaluation
    eval_pending: bool = False
    last_eval_step: int = -1
    e0: float | None = None  # dynamic batch size: the error E_0 of the initial model
    best: dict[str, float | None] = field(default_factory=lambda: {"val_acc": None, "test_acc": None,
                                                                           "val_loss": None})
    last_eval: dict[str, Any] = field(default_factory=dict)
    lines: int = 0
    in_sync: bool = True
    wall_s: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RunState:
        """The state a :meth:`to_dict` wrote; a missing or unknown field raises KeyError naming it."""
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - names)
        if unknown:
            raise KeyError(f"run state has unknown fields {unknown}")
        kw = {k: copy.deepcopy(d[k]) for k in names if k in d or k not in LATER}  # KeyError names a missing field
        kw["interval"] = Interval(**kw["interval"])
        kw["epoch_interval"] = Interval(**kw["epoch_interval"])
        return cls(**kw)


@dataclass
class WorkerStats:
    """One worker's statistics of one step: ``loss`` = mean cross-entropy of its local batch, ``correct`` and
    ``count`` samples, seconds of compute (batch, forward+backward, optimiser update), (de)compression and
    communication, and the bytes it sent."""

    loss: float = 0.0
    correct: float = 0.0
    count: float = 0.0
    t_compute: float = 0.0
    t_compress: float = 0.0
    t_comm: float = 0.0
    bytes_sent: float = 0.0

    def add_exchange(self, busy_s: float, comm_s: float, sent: int) -> None:
        """Count one exchange: its (de)compression seconds, seconds in collective calls, bytes sent."""
        self.t_compress += busy_s
        self.t_comm += comm_s
        self.bytes_sent += sent

    def to_row(self) -> list[float]:
        return [getattr(self, f.name) for f in fields(self)]

    @staticmethod
    def rows(stats: list[WorkerStats]) -> torch.Tensor:
        """``[len(stats), 7]`` float64 rows, the form ``world.allgather_rows`` gathers."""
        return torch.tensor([s.to_row() for s in stats], dtype=torch.float64)

    @classmethod
    def from_rows(cls, rows: torch.Tensor) -> WorkerStats:
        """Every worker's statistics as columns: each field a ``[workers]`` float64 tensor of ``rows``."""
        return cls(**{f.name: rows[:, k] for k, f in enumerate(fields(cls))})
