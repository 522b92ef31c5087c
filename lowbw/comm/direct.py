"""Direct (all-pairs) all-reduces: ``alltoall`` and ``roundrobin``.

* ``alltoall`` (naive): every rank sends its whole tensor to every other rank and reduces all N copies
  itself in rank order (x_0 + x_1 + ... in the accumulator dtype, one rounding). (N-1)M bytes out per
  rank; every rank computes the same bits. Chunked so that at most ``window`` chunks per peer are held.
* ``roundrobin`` (sharded parameter server): segment j of the tensor is mastered by rank j; every rank
  sends segment j to rank j, rank j reduces it in rank order and sends the result to every rank. All
  masters work at the same time, so each rank sends 2(N-1)/N M bytes in 2(N-1) messages (per chunk).
"""

from __future__ import annotations

from collections import deque

import torch
from torch import Tensor

from lowbw.comm.numerics import Reducer, chunk_ranges, split
from lowbw.comm.transport import Transport

__all__ = ["alltoall_allreduce", "roundrobin_allreduce"]


def _rank_ordered(red: Reducer, dst: Tensor, parts: list[Tensor]) -> None:
    acc = red.accumulator(parts[0])
    for p in parts[1:]:
        red.add_to(acc, p)
    red.store(dst, acc, last=True)


def alltoall_allreduce(t: Tensor, tp: Transport, red: Reducer, chunk: int, window: int = 2) -> None:
    N, r = tp.world_size, tp.rank
    if N == 1:
        red.finish(t)
        return
    if t.numel() == 0:
        return
    peers = [q for q in range(N) if q != r]
    ranges = chunk_ranges(0, t.numel(), chunk)
    window = max(1, min(window, len(ranges)))
    slot_len = min(chunk, t.numel())
    slots = [{q: torch.empty(slot_len, dtype=t.dtype, device=t.device) for q in peers} for _ in range(window)]
    pending: deque = deque()
    nxt = 0

    def post_more() -> None:
        nonlocal nxt
        while nxt < len(ranges) and len(pending) < window:
            a, b = ranges[nxt]
            bufs = {q: s[: b - a] for q, s in slots[nxt % window].items()}
            ops = []
            for q in peers:  # one send + one recv per peer, posted together (lockstep-safe)
                ops += [("send", t[a:b], q), ("recv", bufs[q], q)]
            pending.append((a, b, bufs, tp.post(ops)))
            nxt += 1

    post_more()
    while pending:
        a, b, bufs, hs = pending.popleft()
        tp.wait_all(hs)  # recvs, and the sends out of t[a:b] that is overwritten next
        parts = [t[a:b] if q == r else bufs[q] for q in range(N)]
        _rank_ordered(red, t[a:b], parts)
        post_more()


def roundrobin_allreduce(t: Tensor, tp: Transport, red: Reducer, chunk: int) -> None:
    N, r = tp.world_size, tp.rank
    if N == 1:
        red.finish(t)
        return
    if t.numel() == 0:
        return
    segs = split(t.numel(), N)
    lo, hi = segs[r]
    peers = [q for q in range(N) if q != r]
    recv = {q: torch.empty(hi - lo, dtype=t.dtype, device=t.device) for q in peers}

    # phase 1: segment q to its master q; my segment from everyone (pairs posted together per chunk)
    ops = []
    for q in peers:
        s = chunk_ranges(*segs[q], chunk)
        v = chunk_ranges(0, hi - lo, chunk)
        for c in range(max(len(s), len(v))):
            if c < len(s):
                ops.append(("send", t[s[c][0]:s[c][1]], q))
            if c < len(v):
                ops.append(("recv", recv[q][v[c][0]:v[c][1]], q))
    tp.wait_all(tp.post(ops))
    _rank_ordered(red, t[lo:hi], [t[lo:hi] if q == r else recv[q] for q in range(N)])
    del recv

    # phase 2: my finished segment to everyone; segment q from master q into place
    ops = []
    for q in peers:
        s = chunk_ranges(lo, hi, chunk)
        v = chunk_ranges(*segs[q], chunk)
        for c in range(max(len(s), len(v))):
            if c < len(s):
                ops.append(("send", t[s[c][0]:s[c][1]], q))
            if c < len(v):
                ops.append(("recv", t[v[c][0]:v[c][1]], q))
    tp.wait_all(tp.post(ops))
