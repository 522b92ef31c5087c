"""Tree-shaped collectives: reduce to a root, then broadcast back; chunked and pipelined.

* ``tree`` all-reduce: a binary heap tree rooted at ``root`` (children of virtual rank v: 2v+1, 2v+2).
  A node combines ``own + child_1 + child_2`` (fp32 accumulator for half types, one rounding) and sends
  the partial sum up; the root applies ``avg`` and sends the result down the same tree.
* ``ps`` (parameter server / master-worker): a star — every worker sends its whole tensor to the root,
  which reduces ``own + others in rank order`` (= x_0 + x_1 + ... for root 0) and sends the result back.
  The root carries 2(N-1)M bytes, every other rank 2M.
* broadcasts for :class:`~lowbw.comm.DistCollective`: ``flat`` (star: the root sends N-1 copies),
  ``tree`` (binomial tree, log2 N rounds) and ``pipeline`` (a chunked chain: bandwidth-optimal for large
  tensors).

All phases stream: chunk c moves on as soon as it is complete, with up to ``window`` chunks in flight.
The heap tree's chunks are at most ``HEAP_TREE_MAX_CHUNK_BYTES`` (256 KiB): its broadcast's last chunk
reaches the deepest leaves one chunk after the root's last send, and a node's children share its uplink in
an order TCP decides, so one chunk's time is on the critical path twice; small chunks keep it short, and
at 256 KiB the per-message cost is still negligible next to the bytes.
"""

from __future__ import annotations

import math
from collections import deque
from typing import TYPE_CHECKING

from lowbw.collective.partition import chunk_ranges
from lowbw.collective.spec import CollectiveSpec, Cost

if TYPE_CHECKING:  # annotations only: the module loads without torch, for its cost formula
    from torch import Tensor

    from lowbw.comm.numerics import Reducer
    from lowbw.comm.transport import Transport

__all__ = [
    "HEAP_TREE_MAX_CHUNK_BYTES",
    "heap_tree",
    "star_tree",
    "binomial_tree",
    "chain_tree",
    "TREES",
    "tree_allreduce",
    "reduce_to_root",
    "bcast_from_root",
    "cost",
    "talk",
    "fill",
    "SPEC",
]


HEAP_TREE_MAX_CHUNK_BYTES = 256 << 10  # the cost model reads it through SPEC.fill


def _rel(rank: int, n: int, root: int) -> int:
    return (rank - root) % n


def heap_tree(rank: int, n: int, root: int = 0) -> tuple[int | None, list[int]]:
    """(parent, children) in a binary heap tree over ranks rotated so that ``root`` is at the top."""
    v = _rel(rank, n, root)
    parent = None if v == 0 else ((v - 1) // 2 + root) % n
    return parent, [(c + root) % n for c in (2 * v + 1, 2 * v + 2) if c < n]


def star_tree(rank: int, n: int, root: int = 0) -> tuple[int | None, list[int]]:
    """Root's children: every other rank in rank order."""
    if rank == root:
        return None, [q for q in range(n) if q != root]
    return root, []


def binomial_tree(rank: int, n: int, root: int = 0) -> tuple[int | None, list[int]]:
    """Binomial tree (log2 N rounds); children listed largest subtree first."""
    v = _rel(rank, n, root)
    parent = None if v == 0 else ((v - (1 << (v.bit_length() - 1))) + root) % n
    kids, k = [], 1 << v.bit_length() if v else 1
    while v + k < n:
        kids.append(v + k)
        k <<= 1
    return parent, [(c + root) % n for c in reversed(kids)]


def chain_tree(rank: int, n: int, root: int = 0) -> tuple[int | None, list[int]]:
    v = _rel(rank, n, root)
    return (None if v == 0 else (v - 1 + root) % n), ([(v + 1 + root) % n] if v + 1 < n else [])


# broadcast shapes by name ("pipeline" = chunked chain, "tree" = binomial tree, as lowbw.net.costmodel names them)
TREES = {"flat": star_tree, "tree": binomial_tree, "pipeline": chain_tree, "binomial": binomial_tree,
         "chain": chain_tree, "heap": heap_tree}


def reduce_to_root(t: Tensor, tp: Transport, red: Reducer, parent, children, chunk: int, window: int) -> dict:
    """Each node: ``t <- own (op) child_1 (op) child_2 ...`` chunk by chunk, sent up when complete.

    At the root the result is final (avg applied). Returns the still-running sends up, by chunk start.
    """
    ranges = chunk_ranges(0, t.numel(), chunk)
    sends: dict = {}
    if not children:
        if parent is not None:
            for a, b in ranges:
                sends[a] = tp.send(t[a:b], parent)
        else:
            red.finish(t)
        return sends
    window = max(1, window)
    slot_len = min(chunk, t.numel())
    nslot = min(window, len(ranges))
    slots = [[t.new_empty(slot_len) for _ in children] for _ in range(nslot)]
    pending: deque = deque()
    nxt = 0

    def post_more() -> None:
        nonlocal nxt
        while nxt < len(ranges) and len(pending) < window:
            a, b = ranges[nxt]
            bufs = [s[: b - a] for s in slots[nxt % nslot]]
            hs = tp.post([("recv", buf, ch) for buf, ch in zip(bufs, children)])
            pending.append((nxt, bufs, hs))
            nxt += 1

    post_more()
    while pending:
        i, bufs, hs = pending.popleft()
        tp.wait_all(hs)
        a, b = ranges[i]
        red.reduce_ordered(t[a:b], [None, *bufs], last=parent is None)
        if parent is not None:
            sends[a] = tp.send(t[a:b], parent)
        post_more()
    return sends


def bcast_from_root(t: Tensor, tp: Transport, parent, children, chunk: int, window: int, deps=None) -> None:
    """The root's ``t`` down the tree; a node forwards chunk c as soon as it has it.

    ``deps``: sends (by chunk start) out of ``t`` that must complete before ``t`` is overwritten there.
    """
    ranges = chunk_ranges(0, t.numel(), chunk)
    sends = []
    if parent is None:
        for a, b in ranges:
            sends.extend(tp.post([("send", t[a:b], ch) for ch in children]))
        tp.wait_all(sends)
        return
    window = max(1, window)
    pending: deque = deque()
    nxt = 0

    def post_more() -> None:
        nonlocal nxt
        while nxt < len(ranges) and len(pending) < window:
            a, b = ranges[nxt]
            if deps and a in deps:
                tp.wait(deps[a])
            pending.append((a, b, tp.recv(t[a:b], parent)))
            nxt += 1

    post_more()
    while pending:
        a, b, h = pending.popleft()
        tp.wait(h)
        if children:
            sends.extend(tp.post([("send", t[a:b], ch) for ch in children]))
        post_more()
    tp.wait_all(sends)


def tree_allreduce(t: Tensor, tp: Transport, red: Reducer, chunk: int, window: int = 4, shape: str = "heap",
                   root: int = 0) -> None:
    """Reduce to ``root`` over a ``shape`` tree ("heap" binary tree or "flat" star = ps), then broadcast."""
    N = tp.world_size
    tree = heap_tree if shape == "heap" else TREES[shape]
    parent, children = tree(tp.rank, N, root)
    if shape == "heap":
        chunk = min(chunk, max(1, HEAP_TREE_MAX_CHUNK_BYTES // t.element_size()))
    if shape == "flat":  # the root holds len(children) receive buffers per chunk in flight
        window = min(window, 2)
    deps = reduce_to_root(t, tp, red, parent, children, chunk, window)
    bcast_from_root(t, tp, parent, children, chunk, window, deps)


# ------------------------------------------------------------------------------------------- cost
def cost(n: int) -> Cost:
    """The pipelined binary heap tree: the root's downlink takes one vector per child (reduce), its uplink
    sends one per child (broadcast); latency: the tree's depth floor(log2 N) each way:
    ``2 floor(log2 N) a + 2 min(2, N-1) M b`` (= the talk's ``2 logN (a + M b)`` for N <= 4)."""
    kids = float(min(2, n - 1))
    return Cost(2.0 * int(math.floor(math.log2(n))), 2.0 * kids, kids)


def talk(n: int) -> tuple[float, float]:
    """The talk's store-and-forward tree: ``2 logN a + 2 logN M b``, logN = ceil(log2 N)."""
    lg = max(0, math.ceil(math.log2(n)))
    return 2.0 * lg, 2.0 * lg


def fill(n: int, nbytes: float, chunk_bytes: float) -> tuple[int, float]:
    """The broadcast's pipeline fill: the deepest leaves get the last chunk (depth - 1) chunks after the
    root's last send; a chunk is ``min(chunk_bytes, HEAP_TREE_MAX_CHUNK_BYTES, M)``."""
    depth = int(math.floor(math.log2(n)))
    return max(0, depth - 1), min(float(chunk_bytes), float(HEAP_TREE_MAX_CHUNK_BYTES), nbytes)


def volume(n: int, nbytes: int, rank: int, root: int = 0) -> tuple[int, int]:
    """Bytes (sent, received) of heap-tree rank ``rank`` (root 0): M up to its parent and M down to each of
    its children, M from each child and M from its parent (<= 3 M each way)."""
    kids = sum(1 for c in (2 * rank + 1, 2 * rank + 2) if c < n)
    up = 0 if rank == 0 else nbytes
    return up + kids * nbytes, kids * nbytes + up


def handshake(n: int) -> int | None:
    """The leaves' first sends up (N <= 4; deeper trees not worked out)."""
    return 1 if n <= 4 else None


SPEC = CollectiveSpec(
    name="tree", run=lambda flat, tp, red, chunk, window, root=0: tree_allreduce(flat, tp, red, chunk, window,
                                                                                 shape="heap", root=root),
    cost=cost, broadcast="tree", idle_starts=2, talk=talk, fill=fill, volume=volume, handshake=handshake,
    heap_chain=True)
