"""Ring all-reduce (Baidu / Patarasuk-Yuan): reduce-scatter then all-gather, chunked and pipelined.

The tensor is cut into N segments; segment j's sum travels round the ring starting at rank j, so its
reduction order is ``((x_j + x_{j+1}) + x_{j+2}) + ...`` (indices mod N). Every rank sends
2(N-1)/N of the tensor and receives as much: bandwidth-optimal.

Streaming: each segment is cut into chunks of ``chunk`` elements; a chunk is forwarded to the right
neighbour as soon as it has been received and reduced, while up to ``window`` further chunks are
already in flight, so a large tensor flows through the ring without a barrier between steps and with
O(window * chunk) extra memory.

Global step g = 0 .. 2N-3 (reduce-scatter for g < N-1, all-gather after): rank r receives segment
(r-g-1) mod N from the left and sends segment (r-g) mod N to the right — the segment it received
at step g-1.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

from lowbw.collective.partition import chunk_ranges, split
from lowbw.collective.spec import CollectiveSpec, Cost, message_time

if TYPE_CHECKING:  # annotations only: the module loads without torch, for its cost formula
    from torch import Tensor

    from lowbw.comm.numerics import Reducer
    from lowbw.comm.transport import Transport

__all__ = ["ring_allreduce", "cost", "talk", "links_time", "volume", "step_messages", "SPEC"]


def ring_allreduce(t: Tensor, tp: Transport, red: Reducer, chunk: int, window: int = 4) -> None:
    """In-place all-reduce of the 1-D contiguous tensor ``t`` over ``tp``'s ranks."""
    N, r = tp.world_size, tp.rank
    segs = split(t.numel(), N)
    G = 2 * (N - 1)
    right, left = (r + 1) % N, (r - 1) % N
    rounds = [(g, a, b) for g in range(G) for (a, b) in chunk_ranges(*segs[(r - g - 1) % N], chunk)]
    if tp.lockstep:
        _lockstep(t, tp, red, chunk, segs, rounds, right, left)
        return

    window = max(1, window)
    sends = {}  # (step, start) -> handle
    n_rs = sum(1 for g, _, _ in rounds if g < N - 1)  # reduce-scatter rounds land in scratch slots
    slot_len = min(chunk, max((b - a for g, a, b in rounds if g < N - 1), default=0))
    nslots = min(window, n_rs)
    slab = t.new_empty(nslots * slot_len)
    slots = [slab[i * slot_len:(i + 1) * slot_len] for i in range(nslots)]
    pending: deque = deque()
    nxt = 0

    def post_more() -> None:
        nonlocal nxt
        while nxt < len(rounds) and len(pending) < window:
            g, a, b = rounds[nxt]
            if g >= N - 1:  # all-gather: straight into place, once this region's earlier send is out
                dep = sends.get((g + 1 - N, a))
                if dep is None:
                    return
                tp.wait(dep)
                buf = t[a:b]
            else:
                buf = slots[nxt % nslots][: b - a]
            pending.append((nxt, buf, tp.recv(buf, left)))
            nxt += 1

    # The step-0 sends start the pipeline, so with N > 2 they go out before anything else (each post costs
    # tens of microseconds of Python, comparable with a step of a small all-reduce on a fast link). With
    # N = 2 the left and right neighbour are the same rank: on gloo two ranks that both post isend before
    # irecv move the two directions one after the other (half the full-duplex rate), and a send that finds
    # its receive posted can hold the caller while it writes, so the whole window of receives goes first.
    if N == 2:
        post_more()
    for a, b in chunk_ranges(*segs[r], chunk):
        sends[(0, a)] = tp.send(t[a:b], right)
    post_more()  # the window (all-gather receives among them wait on the step-0 sends)
    while pending:
        i, buf, h = pending.popleft()
        tp.wait(h)
        g, a, b = rounds[i]
        if g < N - 1:
            red.combine(t[a:b], buf, last=(g == N - 2))
        if g + 1 < G:
            sends[(g + 1, a)] = tp.send(t[a:b], right)
        post_more()
    tp.wait_all(sends.values())


def _lockstep(t, tp, red, chunk, segs, rounds, right, left) -> None:
    """Same schedule, one (send, recv) pair per post: safe where a pair of ranks shares one stream (NCCL)."""
    N, r = tp.world_size, tp.rank
    tmp = t.new_empty(min(chunk, t.numel()))
    for g in range(2 * (N - 1)):
        snd = chunk_ranges(*segs[(r - g) % N], chunk)
        rcv = chunk_ranges(*segs[(r - g - 1) % N], chunk)
        for c in range(max(len(snd), len(rcv))):
            ops = []
            if c < len(snd):
                a, b = snd[c]
                ops.append(("send", t[a:b], right))
            if c < len(rcv):
                a, b = rcv[c]
                buf = tmp[: b - a] if g < N - 1 else t[a:b]
                ops.append(("recv", buf, left))
            hs = tp.post(ops)
            tp.wait_all(hs)
            if c < len(rcv) and g < N - 1:
                a, b = rcv[c]
                red.combine(t[a:b], tmp[: b - a], last=(g == N - 2))


# ------------------------------------------------------------------------------------------- cost
def cost(n: int) -> Cost:
    """2(N-1) steps of M/N bytes on every link each way: ``2(N-1) a + 2(N-1)/N M b``; every rank sums
    (N-1)/N M (its segment, once per other rank)."""
    return Cost(2.0 * (n - 1), 2.0 * (n - 1) / n, (n - 1) / n)


def talk(n: int) -> tuple[float, float]:
    """The talk's ring: ``2(N-1) a + 2(N-1)/N M b`` (the same as :func:`cost`)."""
    return 2.0 * (n - 1), 2.0 * (n - 1) / n


def links_time(nbytes: float, links, root: int = 0) -> float:
    """On per-worker links, in rank order: the 2(N-1) synchronous steps of M/N each last as long as the
    slowest hop, ``2 (N-1) max_i t(i -> i+1 mod N, M/N)`` (``root`` is unused: a ring has none)."""
    n = len(links)
    if n == 1:
        return 0.0
    step = max(message_time(links[i], links[(i + 1) % n], nbytes / n) for i in range(n))
    return 2 * (n - 1) * step


def volume(n: int, nbytes: int, rank: int, root: int = 0) -> tuple[int, int]:
    """Bytes (sent, received) per rank: ``2(N-1)/N M`` each way (exact when M splits into N equal parts)."""
    v = 2 * (n - 1) * nbytes // n
    return v, v


def step_messages(nbytes: float, n: int, chunk_bytes: float) -> list[tuple[float, str]] | None:
    """The 2(N-1) steps of one segment M/N each, all out of the rank's uplink; None where a segment spans
    several chunks (the window then keeps the link busy between steps)."""
    seg = nbytes / n
    return [(seg, "ring")] * (2 * (n - 1)) if seg <= chunk_bytes else None


SPEC = CollectiveSpec(
    name="ring", run=lambda flat, tp, red, chunk, window, root=0: ring_allreduce(flat, tp, red, chunk, window),
    cost=cost, broadcast="pipeline", links=links_time, talk=talk, volume=volume, duplex=True,
    handshake=lambda n: 1,  # step 0 only: the later receives are posted a window ahead
    step_messages=step_messages, segment_order=True)
