"""Byte and message meter: what one rank sent and received, per collective call.

Every point-to-point message that a lowbw collective posts goes through a transport that reports it
here, so the counts are exact (payload bytes; no TCP/IP or gloo header overhead). ``native`` calls
(torch's own all_reduce) are opaque: they are recorded with ``measured=False`` and zero counts, which
:func:`estimate_native` fills in from the payload size and gloo's known pattern (``estimated=True``).

Textbook volumes (M = tensor bytes, N = world size) that tests hold the meter to, see
:func:`lowbw.comm.registry.expected`, which reads each collective's ``SPEC.volume``:

=============  ===========================================  ==========================
algorithm      bytes sent per rank                          messages sent per rank
=============  ===========================================  ==========================
ring           2(N-1)/N * M                                 2(N-1) * chunks
ps             root (N-1)M (and receives (N-1)M); others M  root N-1; others 1
tree           <= 3M (binary tree: up M, down to 2 kids)    per chunk
butterfly      2(N-1)/N * M (N a power of two)              2 log2 N
alltoall       (N-1) M                                      N-1
roundrobin     2(N-1)/N * M                                 2(N-1)
allgather      (N-1) M  (ring all-gather of whole tensors)  N-1
native         2(N-1)/N * M (gloo's ring; not metered)      --
=============  ===========================================  ==========================
"""

from __future__ import annotations

import threading
from collections import defaultdict
from contextlib import contextmanager
from dataclasses import dataclass, field

__all__ = ["CallStats", "Meter", "active_meters", "metering", "native_volume", "estimate_native"]


@dataclass
class CallStats:
    """One collective call on one rank."""

    op: str  # all_reduce | all_gather | broadcast | (any label)
    algorithm: str
    rank: int
    world_size: int
    nbytes: int  # this rank's input bytes
    dtype: str = ""
    bytes_sent: int = 0
    bytes_recv: int = 0
    msgs_sent: int = 0
    msgs_recv: int = 0
    seconds: float = 0.0
    measured: bool = True  # False for opaque backends (native)
    estimated: bool = False  # counts filled in by estimate_native (from the size and the known pattern)
    root: int | None = None  # a broadcast's source rank, where the caller knows it (estimate_native uses it)
    sent_to: dict[int, int] = field(default_factory=lambda: defaultdict(int))  # peer -> bytes
    recv_from: dict[int, int] = field(default_factory=lambda: defaultdict(int))

    def as_dict(self) -> dict:
        d = self.__dict__.copy()
        d["sent_to"] = dict(self.sent_to)
        d["recv_from"] = dict(self.recv_from)
        return d


class Meter:
    """Collects :class:`CallStats`, one per call, for one rank (one meter per rank, also for threads)."""

    def __init__(self) -> None:
        self.calls: list[CallStats] = []

    def start(self, **kw) -> CallStats:
        st = CallStats(**kw)
        self.calls.append(st)
        return st

    def reset(self) -> None:
        self.calls.clear()

    @property
    def bytes_sent(self) -> int:
        return sum(c.bytes_sent for c in self.calls)

    @property
    def bytes_recv(self) -> int:
        return sum(c.bytes_recv for c in self.calls)

    @property
    def msgs_sent(self) -> int:
        return sum(c.msgs_sent for c in self.calls)

    @property
    def msgs_recv(self) -> int:
        return sum(c.msgs_recv for c in self.calls)

    def totals(self) -> dict[str, int]:
        return {
            "calls": len(self.calls),
            "bytes_sent": self.bytes_sent,
            "bytes_recv": self.bytes_recv,
            "msgs_sent": self.msgs_sent,
            "msgs_recv": self.msgs_recv,
        }

    def __repr__(self) -> str:
        return f"Meter({self.totals()})"


_local = threading.local()


def active_meters() -> list[Meter]:
    """Meters activated with :func:`metering` in this thread (innermost last)."""
    return list(getattr(_local, "stack", ()))


@contextmanager
def metering(meter: Meter | None = None):
    """``with metering() as m: allreduce(...)`` counts every lowbw collective call made in this thread."""
    m = meter if meter is not None else Meter()
    stack = getattr(_local, "stack", None)
    if stack is None:
        stack = _local.stack = []
    stack.append(m)
    try:
        yield m
    finally:
        stack.remove(m)


def native_volume(op: str, nbytes: int, world_size: int, rank: int, root: int = 0) -> tuple[int, int]:
    """(bytes_sent, bytes_recv) of one torch.distributed (gloo) call of ``nbytes`` per rank, from the
    pattern gloo runs: all_reduce is a ring (reduce-scatter + all-gather: 2(N-1)/N M each way),
    all_gather a ring ((N-1) M each way), broadcast a binomial tree from ``root`` (M received by every
    other rank; a rank sends M to each of its children). Payload bytes only, like the measured counts."""
    N, M = world_size, nbytes
    if N == 1:
        return 0, 0
    if op == "all_reduce":
        v = 2 * (N - 1) * M // N
        return v, v
    if op == "all_gather":
        return (N - 1) * M, (N - 1) * M
    if op == "broadcast":
        rel = (rank - root) % N
        kids, step = 0, 1
        while step < N:  # binomial tree: rel sends to rel + step for every step > rel's highest bit
            if rel < step and rel + step < N:
                kids += 1
            step *= 2
        return kids * M, (0 if rel == 0 else M)
    raise ValueError(f"no native volume for op={op!r}; allowed: all_reduce, all_gather, broadcast")


def estimate_native(calls) -> int:
    """Fill in the counts of unmeasured (native) calls in ``calls`` from :func:`native_volume`; returns how
    many were filled. Calls already measured or estimated are left alone."""
    k = 0
    for c in calls:
        if c.measured or c.estimated or c.op not in ("all_reduce", "all_gather", "broadcast"):
            continue
        c.bytes_sent, c.bytes_recv = native_volume(c.op, c.nbytes, c.world_size, c.rank, c.root or 0)
        c.estimated = True
        k += 1
    return k
