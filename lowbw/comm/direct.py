"""Direct (all-pairs) exchanges on a contention-free schedule, and the ``roundrobin`` all-reduce.

* ``roundrobin`` (sharded parameter server): segment j of the tensor is mastered by rank j; every rank
  sends segment j to rank j, rank j reduces it in rank order and sends the result to every rank. All
  masters work at the same time, so each rank sends 2(N-1)/N M bytes.
* :func:`pairwise_rounds` and :func:`exchange`: the schedule ``roundrobin`` and ``alltoall``
  (:mod:`lowbw.comm.alltoall`) move their messages in.

Both move their messages in N-1 *pairwise-exchange* rounds (MPI's pairwise all-to-all): in round k rank r
sends to (r+k) mod N and receives from (r-k) mod N, so every link carries one flow in each direction at a
time. Posting everything at once instead puts N-1 flows into each link's queue at the same moment (incast),
which on a shaped link costs retransmissions and makes the time erratic.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lowbw.collective.partition import chunk_ranges, split
from lowbw.collective.spec import CollectiveSpec, Cost
from lowbw.comm.ring import volume as ring_volume

if TYPE_CHECKING:  # annotations only: the module loads without torch, for its cost formula
    from torch import Tensor

    from lowbw.comm.numerics import Reducer
    from lowbw.comm.transport import Transport

__all__ = ["roundrobin_allreduce", "pairwise_rounds", "exchange", "cost", "SPEC"]


def pairwise_rounds(rank: int, world_size: int) -> list[tuple[int, int]]:
    """(send-to, receive-from) of each of the N-1 pairwise-exchange rounds: ((r+k) mod N, (r-k) mod N)."""
    return [((rank + k) % world_size, (rank - k) % world_size) for k in range(1, world_size)]


def exchange(tp: Transport, snd: list[tuple[Tensor, int]], rcv: list[tuple[Tensor, int]]) -> None:
    """One round: post the receives, then the sends (pairs chunk by chunk, lockstep-safe), wait for all."""
    ops = []
    for c in range(max(len(snd), len(rcv))):
        if c < len(rcv):
            ops.append(("recv", *rcv[c]))
        if c < len(snd):
            ops.append(("send", *snd[c]))
    tp.wait_all(tp.post(ops))


def roundrobin_allreduce(t: Tensor, tp: Transport, red: Reducer, chunk: int) -> None:
    N, r = tp.world_size, tp.rank
    segs = split(t.numel(), N)
    lo, hi = segs[r]
    rounds = pairwise_rounds(r, N)

    def pieces(x: Tensor, a: int, b: int, peer: int) -> list[tuple[Tensor, int]]:
        return [(x[i:j], peer) for i, j in chunk_ranges(a, b, chunk)]

    # phase 1 (reduce-scatter): segment dst to its master; my segment from src
    recv = {src: t.new_empty(hi - lo) for _, src in rounds}
    for dst, src in rounds:
        exchange(tp, pieces(t, *segs[dst], dst), pieces(recv[src], 0, hi - lo, src))
    red.reduce_ordered(t[lo:hi], [None if q == r else recv[q] for q in range(N)])
    del recv

    # phase 2 (all-gather): my finished segment to dst; segment src from its master, into place
    for dst, src in rounds:
        exchange(tp, pieces(t, lo, hi, dst), pieces(t, *segs[src], src))


# ------------------------------------------------------------------------------------------- cost
def cost(n: int) -> Cost:
    """roundrobin: rank r masters chunk r; everyone sends it chunk r, then it sends the reduced chunk to
    everyone, each phase in N-1 pairwise rounds of M/N: ``2(N-1) a + 2(N-1)/N M b``, (N-1)/N M summed."""
    return Cost(2.0 * (n - 1), 2.0 * (n - 1) / n, (n - 1) / n)


SPEC = CollectiveSpec(
    name="roundrobin", run=lambda flat, tp, red, chunk, window, root=0: roundrobin_allreduce(flat, tp, red, chunk),
    cost=cost, broadcast="flat", volume=ring_volume, duplex=True)  # the ring's volume: M/N per peer, each way
