"""``ThreadCollective``: M workers as threads of one process (the ``sim`` training backend).

It runs the very same per-rank algorithm code as :class:`~lowbw.comm.DistCollective`, over in-process
mailboxes in place of sockets, so its results are bit-for-bit those of real processes on gloo (same
reduction order, same fp32-then-round arithmetic for half types) and its byte/message counts are those a
real run would send. ``all_gather`` by default skips the ring's message exchange (one meeting of the
threads hands out copies; the meters count the messages the ring would post), as a copy has no order to
keep; ``gather="ring"`` runs the exchange itself. ``native`` has no in-process counterpart of gloo's
internal order: here it is the rank-ordered ``ps`` reduction (x_0 + x_1 + ...).

Every wait has a timeout, and a failing worker aborts the group so that the others stop at once
(``run_threads`` does this and re-raises the first real exception).
"""

from __future__ import annotations

import threading
import time

import torch
from torch import Tensor

from lowbw.comm import engine as E
from lowbw.comm.engine import ALGORITHMS, BROADCAST_FOR, DEFAULT_WINDOW, MAX_DIMS
from lowbw.comm.errors import CommError, GroupAbortedError, PeerTimeoutError
from lowbw.comm.gather import count_ring_allgather
from lowbw.comm.meter import Meter
from lowbw.comm.numerics import Reducer
from lowbw.comm.registry import get as collective_spec
from lowbw.comm.transport import ThreadHub, ThreadTransport
from lowbw.compress.protocol import CallRecord

__all__ = ["ThreadCollective", "run_threads"]


class ThreadCollective:
    """One rank of an in-process group; make the group with :meth:`ThreadCollective.group`."""

    def __init__(self, hub: ThreadHub, rank: int, algorithm: str = "ring", timeout=None,
                 chunk_bytes: int | None = None, window: int = DEFAULT_WINDOW, meter: Meter | None = None,
                 barrier: threading.Barrier | None = None, gather: str = "direct") -> None:
        self.hub = hub
        self.rank = rank
        self.world_size = hub.world_size
        self.algorithm = E.check_algorithm(algorithm, ALGORITHMS)
        self.timeout = E.as_seconds(timeout)
        self.chunk_bytes = chunk_bytes
        self.window = window
        self.meter = meter
        self._barrier = barrier
        if gather not in ("direct", "ring"):
            raise ValueError(f"gather={gather!r}: expected 'direct' or 'ring'")
        self.gather = gather
        self._meetings = 0
        self.calls: list[CallRecord] = []

    @classmethod
    def group(cls, world_size: int, algorithm: str = "ring", timeout=60.0, chunk_bytes: int | None = None,
              window: int = DEFAULT_WINDOW, meters: list[Meter] | None = None,
              gather: str = "direct") -> list[ThreadCollective]:
        """``world_size`` per-rank collectives sharing one in-process rendezvous (give one to each thread).

        ``gather``: how :meth:`all_gather` moves data: ``direct`` (default) hands every rank the others' tensors
        at one meeting and counts on the meters the messages the ring would send; ``ring`` runs the ring
        all-gather's message exchange itself. Outputs and counts are identical; direct is much faster where
        many small tensors are gathered (per-layer compressed gradients in sim).
        """
        if world_size < 1:
            raise ValueError(f"world_size={world_size} must be >= 1")
        E.check_algorithm(algorithm, ALGORITHMS)
        if meters is not None and len(meters) != world_size:
            raise ValueError(f"meters: need one per rank ({world_size}), got {len(meters)}")
        hub = ThreadHub(world_size)
        bar = threading.Barrier(world_size)
        return [cls(hub, r, algorithm, timeout, chunk_bytes, window, meters[r] if meters else None, bar, gather)
                for r in range(world_size)]

    def __repr__(self) -> str:
        return f"ThreadCollective(algorithm={self.algorithm!r}, rank={self.rank}, world_size={self.world_size})"

    def abort(self, why: str) -> None:
        """Make every rank's pending and future waits fail now (use when this worker fails)."""
        self.hub.abort(why)
        if self._barrier is not None:
            self._barrier.abort()

    def _transport(self, context: str) -> ThreadTransport:
        return ThreadTransport(self.hub, self.rank, self.timeout, None, context)

    def _record(self, op: str, tensor: Tensor, algorithm: str, sizes_known: bool = False) -> None:
        self.calls.append(CallRecord(op, tensor.numel() * tensor.element_size(), algorithm, self.world_size,
                                     sizes_known))

    # -- Collective protocol --------------------------------------------------------------------------------
    def all_reduce(self, tensor: Tensor, op: str = "sum") -> Tensor:
        opaque = collective_spec(self.algorithm).opaque  # torch's own: the rank-ordered ps reduction here
        alg = "ps" if opaque else self.algorithm
        tp = self._transport(f"{self.algorithm} all_reduce (threads)")
        red = Reducer(op, tensor.dtype, self.world_size)
        with E.metered(self.meter, op="all_reduce", algorithm=self.algorithm, rank=self.rank,
                     world_size=self.world_size, tensor=tensor, transport=tp,
                     measured=not opaque), torch.no_grad():
            out = tensor.detach().clone()
            f = E.FlatView(out)
            E.run_allreduce(f.flat, tp, alg, red, E.chunk_elems(self.chunk_bytes, tensor.element_size()),
                          self.window)
            f.write_back()
        self._record("all_reduce", tensor, self.algorithm)
        return out

    def all_gather(self, tensor: Tensor, same_size: bool = False) -> list[Tensor]:
        """Every rank's tensor in rank order (``same_size``: all of this one's shape, no size exchange)."""
        tp = self._transport("ring all_gather (threads)")
        with E.metered(self.meter, op="all_gather", algorithm="ring", rank=self.rank, world_size=self.world_size,
                     tensor=tensor, transport=tp), torch.no_grad():
            if self.gather == "direct" and self.world_size > 1:
                out = self._direct_all_gather(tensor, tp, same_size)
            else:
                shapes = [tuple(tensor.shape)] * self.world_size if same_size else None
                out = E.run_allgather(tensor, tp, self.chunk_bytes, self.window, shapes)
        opaque = collective_spec(self.algorithm).opaque  # torch's own all-gather pairs with torch's all-reduce
        self._record("all_gather", tensor, self.algorithm if opaque else "ring", same_size)
        return out

    def _direct_all_gather(self, tensor: Tensor, tp: ThreadTransport, same_size: bool = False) -> list[Tensor]:
        """The ring all-gather's result and meter counts, from one meeting of the threads, not its
        2(N-1) x chunks messages (a copy has no reduction order: the outputs are the ring's, bit for bit)."""
        if tensor.dim() > MAX_DIMS:
            raise ValueError(f"all_gather supports tensors of at most {MAX_DIMS} dims, got {tensor.dim()}")
        N, r = self.world_size, self.rank
        mine = tensor.detach().contiguous().view(-1).clone()
        seq = self._meetings
        self._meetings += 1
        try:
            items = self.hub.meet(r, seq, (tensor.dtype, tuple(tensor.shape), mine), self.timeout)
        except TimeoutError as e:
            raise PeerTimeoutError(f"lowbw.comm ring all_gather (threads): rank {r} timed out: {e}", rank=r) from e
        except RuntimeError as e:
            raise GroupAbortedError(f"lowbw.comm ring all_gather (threads): rank {r} stopped: {e}", rank=r) from e
        for j, (dt, _, _) in enumerate(items):
            if dt != tensor.dtype:
                raise CommError(f"lowbw.comm all_gather: rank {j} sent {dt}, rank {r} has {tensor.dtype}",
                                peer=j, rank=r)
        if same_size and any(tuple(s) != tuple(tensor.shape) for _, s, _ in items):
            raise CommError(f"lowbw.comm all_gather: same_size, but ranks sent shapes {[s for _, s, _ in items]}",
                            rank=r)
        H = 2 + MAX_DIMS  # the shape header the ring exchanges first: one message of H int64 per block
        if not same_size:
            count_ring_allgather(tp, [j * H for j in range(N + 1)], 8, H)
        offsets = [0]
        for _, _, flat in items:
            offsets.append(offsets[-1] + flat.numel())
        count_ring_allgather(tp, offsets, tensor.element_size(), E.chunk_elems(self.chunk_bytes,
                                                                              tensor.element_size()))
        out = torch.empty(offsets[-1], dtype=tensor.dtype, device=tensor.device)
        for j, (_, _, flat) in enumerate(items):
            out[offsets[j]:offsets[j + 1]].copy_(flat)
        return [out[offsets[j]:offsets[j + 1]].view(items[j][1]) for j in range(N)]

    def broadcast(self, tensor: Tensor, src: int) -> Tensor:
        if not 0 <= src < self.world_size:
            raise ValueError(f"src={src} is not a rank of a group of {self.world_size}")
        how = BROADCAST_FOR[self.algorithm]
        shape = "tree" if how == "native" else how
        tp = self._transport(f"{how} broadcast (threads)")
        with E.metered(self.meter, op="broadcast", algorithm=how, rank=self.rank, world_size=self.world_size,
                     tensor=tensor, transport=tp, measured=how != "native"), torch.no_grad():
            out = tensor.detach().clone()
            f = E.FlatView(out)
            E.run_broadcast(f.flat, tp, src, shape, E.chunk_elems(self.chunk_bytes, tensor.element_size()), self.window)
            f.write_back()
        self._record("broadcast", tensor, how)
        return out

    def barrier(self) -> None:
        """All ranks meet (timeout: the group's)."""
        if self.hub.aborted is not None:
            raise GroupAbortedError(f"lowbw.comm barrier: rank {self.rank} stopped: {self.hub.aborted}",
                                    rank=self.rank)
        try:
            self._barrier.wait(self.timeout)
        except threading.BrokenBarrierError as e:
            if self.hub.aborted is not None:
                raise GroupAbortedError(f"lowbw.comm barrier: rank {self.rank} stopped: {self.hub.aborted}",
                                        rank=self.rank) from e
            raise PeerTimeoutError(f"lowbw.comm barrier: rank {self.rank} timed out after {self.timeout:g}s "
                                   "(not every rank arrived)", rank=self.rank) from e


def run_threads(fn, colls: list[ThreadCollective], timeout: float | None = None) -> list:
    """Run ``fn(rank, coll)`` for every rank in its own thread; return the results in rank order.

    If a worker raises, the group is aborted (the others fail at once rather than wait for their timeout)
    and the first real exception (not a consequent abort) is re-raised here. ``timeout``: seconds for the
    whole run (default: none beyond the collectives' own).
    """
    n = len(colls)
    results: list = [None] * n
    errors: list[tuple[float, int, BaseException]] = []
    lock = threading.Lock()

    def body(r: int) -> None:
        try:
            results[r] = fn(r, colls[r])
        except BaseException as e:  # noqa: BLE001 - re-raised in the caller
            with lock:
                errors.append((time.monotonic(), r, e))
            colls[r].abort(f"rank {r} failed with {type(e).__name__}: {e}")

    threads = [threading.Thread(target=body, args=(r,), name=f"lowbw-rank{r}", daemon=True) for r in range(n)]
    for t in threads:
        t.start()
    deadline = None if timeout is None else time.monotonic() + timeout
    for t in threads:
        t.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
    alive = [r for r, t in enumerate(threads) if t.is_alive()]
    if alive:
        if colls:
            colls[0].abort(f"run_threads timed out after {timeout}s")
        for t in threads:
            t.join(5.0)
        raise PeerTimeoutError(f"run_threads: ranks {alive} did not finish within {timeout}s")
    if errors:
        real = [e for e in errors if not isinstance(e[2], GroupAbortedError)] or errors
        real.sort(key=lambda e: e[0])
        raise real[0][2]
    return results
