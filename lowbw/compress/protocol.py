"""The communication interface that compressors aggregate through.

``lowbw.compress`` holds no communication code (layering: compress < comm). A compressor's
``aggregate`` talks only to this protocol; ``lowbw.comm`` implements it twice:

* ``lowbw.comm.DistCollective`` over torch.distributed with any of our algorithms (real processes);
* ``lowbw.comm.ThreadCollective``: M workers as threads of one process (the ``sim`` backend).

Because both backends run the *same* aggregation code, sim and procs give the same numbers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from torch import Tensor

__all__ = ["Collective", "CallRecord"]


@dataclass(frozen=True)
class CallRecord:
    """One collective call as seen by one rank: what the cost model needs to time it.

    ``op`` is ``"all_reduce" | "all_gather" | "broadcast"``; ``nbytes`` is this rank's input size in bytes
    (for all_gather: this rank's contribution); ``algorithm`` the collective algorithm used.
    """

    op: str
    nbytes: int
    algorithm: str
    world_size: int
    sizes_known: bool = False  # all_gather: every rank's size known beforehand (no size exchange before it)


@runtime_checkable
class Collective(Protocol):
    """Per-rank view of a group of ``world_size`` workers. Every call is collective: all ranks make it.

    Implementations must be deterministic (fixed reduction order) and append a ``CallRecord`` per call to
    ``calls`` so that time can be modelled and bytes counted.
    """

    rank: int
    world_size: int
    calls: list[CallRecord]

    def all_reduce(self, tensor: Tensor) -> Tensor:
        """Elementwise SUM over ranks; returns the result (same shape/dtype), input left untouched."""
        ...

    def all_gather(self, tensor: Tensor, same_size: bool = False) -> list[Tensor]:
        """Every rank's tensor, in rank order. Sizes (1-D numel) may differ between ranks, and may be 0; with
        ``same_size`` every rank's tensor has this one's shape, and no sizes are exchanged first."""
        ...

    def broadcast(self, tensor: Tensor, src: int) -> Tensor:
        """Rank ``src``'s tensor on every rank. Non-src ranks pass a tensor of the same shape/dtype."""
        ...
