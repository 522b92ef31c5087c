"""Ring all-gather of variable-size payloads, and the all-reduce built on it.

Rank j's block (``sizes[j]`` elements, possibly 0) travels round the ring; at step s (0..N-2) rank r
sends block (r-s) mod N to the right and receives block (r-s-1) mod N from the left, chunk by chunk,
forwarding each chunk as soon as it arrives. Empty blocks send nothing (both sides know the sizes).

``allgather`` all-reduce: gather every rank's whole tensor, reduce locally in rank order
(x_0 + x_1 + ..., fp32 accumulator for half types, one rounding): (N-1)M bytes per rank, the way
non-summable compressed payloads are aggregated.
"""

from __future__ import annotations

import threading
from collections import deque
from typing import TYPE_CHECKING

from lowbw.collective.partition import chunk_ranges
from lowbw.collective.spec import CollectiveSpec, Cost

if TYPE_CHECKING:  # annotations only: the module loads without torch, for its cost formula
    from torch import Tensor

    from lowbw.comm.numerics import Reducer
    from lowbw.comm.transport import Transport

__all__ = ["ring_allgather_into", "count_ring_allgather", "allgather_allreduce", "clear_workspace", "cost", "volume",
           "SPEC"]


def ring_allgather_into(out: Tensor, offsets: list[int], tp: Transport, chunk: int, window: int = 4,
                        own: Tensor | None = None) -> None:
    """``out`` (1-D) holds rank j's block at ``out[offsets[j]:offsets[j+1]]``; this rank's block is
    already in place, or is ``own`` (1-D, that many elements; its slot in ``out`` is then left as it was).
    Fills in every other block."""
    N, r = tp.world_size, tp.rank
    if N == 1:
        return
    right, left = (r + 1) % N, (r - 1) % N

    def blk(j: int) -> list[tuple[int, int]]:
        return chunk_ranges(offsets[j], offsets[j + 1], chunk)

    if own is not None and own.numel() != offsets[r + 1] - offsets[r]:
        raise ValueError(f"own block has {own.numel()} elements, rank {r}'s slot {offsets[r + 1] - offsets[r]}")
    src = out if own is None else own
    base = 0 if own is None else offsets[r]  # own's element i is out's element base + i

    def own_piece(a: int, b: int) -> Tensor:
        return src[a - base:b - base]

    if tp.lockstep:
        for s in range(N - 1):
            snd, rcv = blk((r - s) % N), blk((r - s - 1) % N)
            for c in range(max(len(snd), len(rcv))):
                ops = []
                if c < len(snd):
                    a, b = snd[c]
                    ops.append(("send", own_piece(a, b) if s == 0 else out[a:b], right))
                if c < len(rcv):
                    ops.append(("recv", out[rcv[c][0]:rcv[c][1]], left))
                tp.wait_all(tp.post(ops))
        return

    rounds = [(s, a, b) for s in range(N - 1) for a, b in blk((r - s - 1) % N)]
    sends: list = []
    window = max(1, window)
    pending: deque = deque()
    nxt = 0

    def post_more() -> None:
        nonlocal nxt
        while nxt < len(rounds) and len(pending) < window:
            s, a, b = rounds[nxt]
            pending.append((s, a, b, tp.recv(out[a:b], left)))
            nxt += 1

    post_more()  # receives before the first sends (see ring.py: gloo serialises the directions otherwise)
    sends += [tp.send(own_piece(a, b), right) for a, b in blk(r)]
    while pending:
        s, a, b, h = pending.popleft()
        tp.wait(h)
        if s + 1 < N - 1:
            sends.append(tp.send(out[a:b], right))
        post_more()
    tp.wait_all(sends)


def count_ring_allgather(tp: Transport, offsets: list[int], elem_bytes: int, chunk: int) -> None:
    """Count on ``tp``'s meters exactly the messages :func:`ring_allgather_into` would post (same blocks, same
    chunks, same peers), without moving data: for transports that deliver the blocks another way."""
    N, r = tp.world_size, tp.rank
    if N == 1:
        return
    right, left = (r + 1) % N, (r - 1) % N
    for s in range(N - 1):
        j_snd, j_rcv = (r - s) % N, (r - s - 1) % N
        for a, b in chunk_ranges(offsets[j_snd], offsets[j_snd + 1], chunk):
            tp.count("send", right, (b - a) * elem_bytes)
        for a, b in chunk_ranges(offsets[j_rcv], offsets[j_rcv + 1], chunk):
            tp.count("recv", left, (b - a) * elem_bytes)


_local = threading.local()


def _workspace(numel: int, like: Tensor) -> Tensor:
    """A gather buffer of ``numel`` elements of ``like``'s dtype and device, reused across calls (per thread,
    dtype and device).

    A fresh N*M buffer per call costs a first touch of every page, on the critical path on fast links; the
    buffer only grows, and :func:`clear_workspace` frees it.
    """
    cache = _local.__dict__.setdefault("bufs", {})
    key = (like.dtype, str(like.device))
    buf = cache.get(key)
    if buf is None or buf.numel() < numel:
        buf = cache[key] = like.new_empty(numel)
    return buf[:numel]


def clear_workspace() -> None:
    """Free this thread's cached all-gather all-reduce buffers."""
    _local.__dict__.pop("bufs", None)


def allgather_allreduce(t: Tensor, tp: Transport, red: Reducer, chunk: int, window: int = 4) -> None:
    N, r = tp.world_size, tp.rank
    n = t.numel()
    out = _workspace(N * n, t)
    # this rank's block is sent straight from t and reduced from t (its slot in out stays unused): no copy
    # in or out of the gather buffer (which would be 2 M-sized passes on the critical path)
    ring_allgather_into(out, [j * n for j in range(N + 1)], tp, chunk, window, own=t)
    parts = out.view(N, n)
    red.reduce_ordered(t, [None if j == r else parts[j] for j in range(N)])


# ------------------------------------------------------------------------------------------- cost
def cost(n: int) -> Cost:
    """A ring all-gather of the whole vectors, then a local sum: ``(N-1) a + (N-1) M b``, (N-1) M summed."""
    return Cost(float(n - 1), float(n - 1), float(n - 1))


def volume(n: int, nbytes: int, rank: int, root: int = 0) -> tuple[int, int]:
    """Bytes (sent, received) per rank: a ring all-gather of whole vectors, ``(N-1) M`` each way."""
    return (n - 1) * nbytes, (n - 1) * nbytes


SPEC = CollectiveSpec(
    name="allgather",
    run=lambda flat, tp, red, chunk, window, root=0: allgather_allreduce(flat, tp, red, chunk, window),
    cost=cost, broadcast="pipeline", volume=volume, duplex=True)
