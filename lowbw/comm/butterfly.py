"""Butterfly all-reduce (Rabenseifner): recursive-halving reduce-scatter + recursive-doubling all-gather.

For P = the largest power of two <= N and R = N - P, the first 2R ranks fold in first: each even rank
2i sends its tensor to 2i+1, which combines them and takes part as virtual rank i; the even ranks wait
and receive the result at the end. The remaining P virtual ranks run log2(P) halving steps (distance
P/2, P/4, ..., 1: keep one half of the current range, send the other half to the partner, combine the
partner's copy of the kept half) and then log2(P) doubling steps in reverse. For a power of two N every
rank sends 2(N-1)/N of the tensor in 2 log2 N messages.

Reduction order: a fixed binary tree over ranks, e.g. N=4: (x0 + x2) + (x1 + x3).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from lowbw.collective.spec import CollectiveSpec, Cost
from lowbw.comm.ring import volume as ring_volume

if TYPE_CHECKING:  # annotations only: the module loads without torch, for its cost formula
    from torch import Tensor

    from lowbw.comm.numerics import Reducer
    from lowbw.comm.transport import Transport

__all__ = ["butterfly_allreduce", "cost", "talk", "handshake", "step_messages", "SPEC"]


def _halves(lo: int, hi: int) -> tuple[tuple[int, int], tuple[int, int]]:
    mid = lo + (hi - lo + 1) // 2
    return (lo, mid), (mid, hi)


def butterfly_allreduce(t: Tensor, tp: Transport, red: Reducer) -> None:
    N, r = tp.world_size, tp.rank
    n = t.numel()
    P = 1 << (N.bit_length() - 1)
    R = N - P

    # fold: ranks 0..2R-1 pair up (2i -> 2i+1)
    if r < 2 * R:
        if r % 2 == 0:
            tp.wait(tp.send(t, r + 1))
            tp.wait(tp.recv(t, r + 1))  # the finished result, at the end
            return
        tmp = t.new_empty(t.shape)
        tp.wait(tp.recv(tmp, r - 1))
        red.combine(t, tmp, last=(P == 1))
        v = r // 2
    else:
        v = r - R

    def real(u: int) -> int:  # virtual -> real rank
        return 2 * u + 1 if u < R else u + R

    # recursive halving
    lo, hi = 0, n
    steps = []  # (partner, kept range, given range)
    sends = []
    d = P // 2
    tmp = t.new_empty((n + 1) // 2) if P > 1 else None
    while d >= 1:
        partner = real(v ^ d)
        low, high = _halves(lo, hi)
        keep, give = (low, high) if v & d == 0 else (high, low)
        buf = tmp[: keep[1] - keep[0]]
        hs = tp.post([("recv", buf, partner), ("send", t[give[0]:give[1]], partner)])  # receive first
        tp.wait(hs[0])
        sends.append(hs[1])
        red.combine(t[keep[0]:keep[1]], buf, last=(d == 1))
        steps.append((partner, keep, give))
        lo, hi = keep
        d //= 2
    tp.wait_all(sends)  # the halves given away are overwritten below

    # recursive doubling (reverse order): send what I have, receive what the partner has
    for partner, keep, give in reversed(steps):
        hs = tp.post([("recv", t[give[0]:give[1]], partner), ("send", t[keep[0]:keep[1]], partner)])
        tp.wait_all(hs)

    # unfold
    if r < 2 * R:
        tp.wait(tp.send(t, r - 1))


# ------------------------------------------------------------------------------------------- cost
def cost(n: int) -> Cost:
    """Recursive halving + doubling on P = the largest power of two <= N: ``2 log2 P`` steps and
    ``2(P-1)/P M`` per link; the N - P extra ranks first fold their vector into a partner and get the result
    back at the end: 2 more steps and 2 M more bytes (and M more summed)."""
    p2 = 2 ** int(math.floor(math.log2(n)))
    extra = 0 if n == p2 else 2
    k = int(math.log2(p2))
    return Cost(2.0 * k + extra, 2.0 * (p2 - 1) / p2 + extra, (p2 - 1) / p2 + (1 if extra else 0))


def talk(n: int) -> tuple[float, float]:
    """The talk's butterfly: ``2 logN a + 2(N-1)/N M b``, logN = ceil(log2 N)."""
    return 2.0 * max(0, math.ceil(math.log2(n))), 2.0 * (n - 1) / n

def handshake(n: int) -> int:
    """Every pairwise exchange (both partners post receive and send together: 2 log2 P of them) and, for N
    not a power of two, the fold (the unfold's receive is posted early)."""
    p2 = 1 << (n.bit_length() - 1)
    return 2 * (p2.bit_length() - 1) + (1 if n != p2 else 0)


def step_messages(nbytes: float, n: int, chunk_bytes: float) -> list[tuple[float, str]]:
    """The halving exchanges (M/2, M/4, ...) and the doubling ones in reverse; for N not a power of two the
    fold (M, out of the folding rank's uplink) first and the unfold (M, out of its partner's) last."""
    p2 = 1 << (n.bit_length() - 1)
    k = p2.bit_length() - 1
    halves = [nbytes / 2 ** (i + 1) for i in range(k)]
    steps = [(m, "exchange") for m in halves + halves[::-1]]
    return [(nbytes, "fold"), *steps, (nbytes, "exchange")] if n != p2 else steps


# volume: the ring's 2(N-1)/N M each way, exact for N a power of two
SPEC = CollectiveSpec(
    name="butterfly", run=lambda flat, tp, red, chunk, window, root=0: butterfly_allreduce(flat, tp, red),
    cost=cost, broadcast="tree", talk=talk, volume=ring_volume, duplex=True, handshake=handshake,
    handshake_every_step=True, step_messages=step_messages)
