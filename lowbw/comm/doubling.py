"""Recursive-doubling all-reduce (Thakur, Rabenseifner & Gropp, "Optimization of Collective Communication
Operations in MPICH", IJHPCA 2005: MPICH's MPI_Allreduce for short messages): log2 N steps, in each
of which every rank swaps its whole partial sum with the rank at distance 1, 2, 4, ... and adds it.

For P = the largest power of two <= N and R = N - P, the first 2R ranks fold in first, as the paper does for
its non-power-of-two case (and as :mod:`lowbw.comm.butterfly`): each even rank 2i sends its tensor to 2i+1,
which adds it and takes part as virtual rank i; the even ranks receive the result at the end. Schedule of one
call:

1. fold (N not a power of two): rank 2i -> 2i+1, for i < R;
2. steps d = 1, 2, 4, ..., P/2: virtual rank v swaps its whole tensor with v XOR d and adds the partner's;
3. unfold: rank 2i+1 -> 2i, the result.

Every rank adds the same two partial sums at each step (fp addition is commutative), so every rank ends with
the same bits: the sum over a fixed binary tree of ranks in doubling order, e.g. N=4: (x0 + x1) + (x2 + x3),
N=3: (x0 + x1) + x2.

Cost on N equal links: ``log2 P`` steps of the whole vector, ``log2 P a + log2 P M b`` (N a power of two;
fold and unfold add 2 steps and 2 M): fewer latency terms than the ring's ``2(N-1)`` and more bytes than its
``2(N-1)/N M``, so it wins on short messages or high-latency links and loses on long ones. Its broadcast is the
binomial tree of the same pairs (``tree``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lowbw.collective.spec import CollectiveSpec, Cost

if TYPE_CHECKING:  # annotations only: the module loads without torch, for its cost formula
    from torch import Tensor

    from lowbw.comm.numerics import Reducer
    from lowbw.comm.transport import Transport

__all__ = ["doubling_allreduce", "cost", "volume", "handshake", "step_messages", "SPEC"]


def _split(n: int) -> tuple[int, int, int]:
    """(P, R, log2 P): the largest power of two <= N, the ranks beyond it, the doubling steps."""
    p2 = 1 << (n.bit_length() - 1)
    return p2, n - p2, p2.bit_length() - 1


def doubling_allreduce(t: Tensor, tp: Transport, red: Reducer) -> None:
    """All-reduce ``t`` in place by recursive doubling (the module docstring's steps)."""
    N, r = tp.world_size, tp.rank
    P, R, _ = _split(N)

    # 1. fold: ranks 0..2R-1 pair up (2i -> 2i+1)
    if r < 2 * R:
        if r % 2 == 0:
            tp.wait(tp.send(t, r + 1))
            tp.wait(tp.recv(t, r + 1))  # the finished result (step 3)
            return
        tmp = t.new_empty(t.shape)
        tp.wait(tp.recv(tmp, r - 1))
        red.combine(t, tmp)
        v = r // 2
    else:
        v = r - R

    def real(u: int) -> int:  # virtual -> real rank
        return 2 * u + 1 if u < R else u + R

    # 2. doubling: swap the whole partial sum with the partner at distance d, add it
    buf = t.new_empty(t.shape)
    d = 1
    while d < P:
        partner = real(v ^ d)
        tp.wait_all(tp.post([("recv", buf, partner), ("send", t, partner)]))  # receive first; t is sent whole
        red.combine(t, buf, last=(2 * d == P))
        d *= 2

    # 3. unfold
    if r < 2 * R:
        tp.wait(tp.send(t, r - 1))


def cost(n: int) -> Cost:
    """``log2 P`` steps of the whole vector M on every link; for N not a power of two the fold and the unfold
    add 2 steps and 2 M (and M more summed)."""
    _, R, k = _split(n)
    extra = 2 if R else 0
    return Cost(float(k + extra), float(k + extra), float(k + (1 if R else 0)))


def volume(n: int, nbytes: int, rank: int, root: int = 0) -> tuple[int, int]:
    """Bytes (sent, received) per rank: M each way per doubling step; a folding rank (even, < 2R) only its
    fold and the result, its partner one more M each way."""
    _, R, k = _split(n)
    if rank < 2 * R:
        return (nbytes, nbytes) if rank % 2 == 0 else ((k + 1) * nbytes, (k + 1) * nbytes)
    return k * nbytes, k * nbytes


def handshake(n: int) -> int:
    """Every pairwise swap (both partners post receive and send together: log2 P of them) and, for N not a power
    of two, the fold (the unfold's receive is posted early)."""
    _, R, k = _split(n)
    return k + (1 if R else 0)


def step_messages(nbytes: float, n: int, chunk_bytes: float) -> list[tuple[float, str]]:
    """The whole vector in every doubling swap; for N not a power of two the fold (M, out of the folding rank's
    uplink) first and the unfold (M, out of its partner's) last."""
    _, R, k = _split(n)
    steps = [(nbytes, "exchange")] * k
    return [(nbytes, "fold"), *steps, (nbytes, "exchange")] if R else steps


SPEC = CollectiveSpec(
    name="doubling", run=lambda flat, tp, red, chunk, window, root=0: doubling_allreduce(flat, tp, red),
    cost=cost, broadcast="tree", volume=volume, duplex=True, handshake=handshake, handshake_every_step=True,
    step_messages=step_messages)
