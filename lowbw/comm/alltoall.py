"""``alltoall`` all-reduce (naive): every rank sends its whole tensor to every other rank and sums all N.

Every rank reduces the N copies itself in rank order (x_0 + x_1 + ... in the accumulator dtype, one
rounding), so every rank computes the same bits. Schedule of one call, for each chunk of the tensor (at most
``chunk`` elements, so at most N-1 chunks of the others are held):

1. rounds k = 1 .. N-1 (:func:`lowbw.comm.direct.pairwise_rounds`): rank r sends the chunk to (r+k) mod N
   and receives that peer's chunk from (r-k) mod N -- one flow per link and direction at a time;
2. sum the N chunks in rank order into the tensor.

Cost on N equal links: (N-1) pairwise rounds of M each: ``(N-1) a + (N-1) M b``, (N-1) M summed; every rank
sends and receives (N-1) M bytes. Its all-gather is the same everyone-to-everyone pattern (``direct``), its
broadcast the root sending N-1 copies (``flat``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lowbw.collective.partition import chunk_ranges
from lowbw.collective.spec import CollectiveSpec, Cost
from lowbw.comm.direct import exchange, pairwise_rounds

if TYPE_CHECKING:  # annotations only: the module loads without torch, for its cost formula
    from torch import Tensor

    from lowbw.comm.numerics import Reducer
    from lowbw.comm.transport import Transport

__all__ = ["alltoall_allreduce", "cost", "volume", "SPEC"]


def alltoall_allreduce(t: Tensor, tp: Transport, red: Reducer, chunk: int) -> None:
    """All-reduce ``t`` in place: each chunk to every peer in N-1 pairwise rounds, then a rank-order sum."""
    N, r = tp.world_size, tp.rank
    rounds = pairwise_rounds(r, N)
    slot_len = min(chunk, t.numel())
    slots = {src: t.new_empty(slot_len) for _, src in rounds}
    for a, b in chunk_ranges(0, t.numel(), chunk):
        for dst, src in rounds:
            exchange(tp, [(t[a:b], dst)], [(slots[src][: b - a], src)])
        red.reduce_ordered(t[a:b], [None if q == r else slots[q][: b - a] for q in range(N)])


def cost(n: int) -> Cost:
    """N-1 sequential rounds, each link carries M per round each way: ``(N-1) a + (N-1) M b``; (N-1) M summed."""
    return Cost(float(n - 1), float(n - 1), float(n - 1))


def volume(n: int, nbytes: int, rank: int, root: int = 0) -> tuple[int, int]:
    """Bytes (sent, received) per rank: the whole vector to and from each other rank, ``(N-1) M`` each way."""
    return (n - 1) * nbytes, (n - 1) * nbytes


SPEC = CollectiveSpec(
    name="alltoall", run=lambda flat, tp, red, chunk, window, root=0: alltoall_allreduce(flat, tp, red, chunk),
    cost=cost, broadcast="flat", gather="direct", volume=volume, duplex=True)
