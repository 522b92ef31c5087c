"""A compressor's exchange of one tensor as rounds: what it asks of its peers, and how one exchange is run.

A compressor's exchange of one tensor is a generator (:meth:`lowbw.compress.base.Compressor.rounds`): it
yields a :class:`Request` (``all_reduce`` or ``all_gather`` of some tensors) whenever it needs its peers'
data, receives the results, and returns the tensor's average. :func:`run_alone` runs one exchange on a
:class:`~lowbw.compress.protocol.Collective` (or a :class:`~lowbw.compress.base.BatchCollective`), each
requested tensor its own call; :func:`run_local` runs it with no peers. Running a bucket's exchanges together,
one packed call per round, is communication: :func:`lowbw.comm.packing.drive`.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass

from torch import Tensor

__all__ = ["Request", "Rounds", "run_alone", "run_local"]

# a tensor's exchange: yields Requests, receives each one's results (one per requested tensor), returns its average
Rounds = Generator["Request", tuple, Tensor]


@dataclass(frozen=True)
class Request:
    """What one tensor's exchange needs from its peers in one round."""

    op: str  # "all_reduce" (the elementwise sum over ranks) | "all_gather" (every rank's tensor, in rank order)
    tensors: tuple[Tensor, ...]  # the tensors to reduce or gather (rows: [N, ...] with a BatchCollective)
    sizes_known: bool = False  # all_gather: every rank's tensors have these lengths (Compressor.fixed_size)


def run_local(gen: Rounds) -> Tensor:
    """Run an exchange with no peers: every request's result is its own tensors (one worker's view)."""
    try:
        req = next(gen)
        while True:
            req = gen.send(tuple(t if req.op == "all_reduce" else [t] for t in req.tensors))
    except StopIteration as stop:
        return stop.value


def run_alone(gen: Rounds, coll) -> Tensor:
    """Run one exchange on ``coll``: each requested tensor its own ``all_reduce`` / ``all_gather`` call."""
    try:
        req = next(gen)
        while True:
            call = coll.all_reduce if req.op == "all_reduce" else coll.all_gather
            req = gen.send(tuple(call(t) for t in req.tensors))
    except StopIteration as stop:
        return stop.value
