"""``DistCollective``: the :class:`lowbw.compress.protocol.Collective` protocol over torch.distributed.

Compressors aggregate through it in real processes (gloo on CPU, NCCL on GPU). ``all_reduce`` runs the
chosen all-reduce algorithm; ``all_gather`` is a ring all-gather of variable-size tensors (sizes are
exchanged first, empty tensors are fine); ``broadcast`` uses the shape that suits the algorithm
(``BROADCAST_FOR``: "pipeline" (chunked chain) for ring/allgather, "tree" (binomial) for tree/butterfly,
"flat" for ps/alltoall/roundrobin, ``dist.broadcast`` for native). Each call appends a ``CallRecord``
whose ``algorithm`` is the algorithm that moved the bytes: the all-reduce algorithm for all_reduce,
"ring" (or "native") for all_gather, the broadcast's name ("pipeline" | "tree" | "flat" | "native").
"""

from __future__ import annotations

from datetime import timedelta

import torch
import torch.distributed as dist
from torch import Tensor

from lowbw.comm.api import allgather, allreduce, broadcast
from lowbw.comm.engine import (
    ALGORITHMS,
    BROADCAST_FOR,
    DEFAULT_WINDOW,
    as_seconds,
    check_algorithm,
    metered,
    shape_header,
    wait_native,
)
from lowbw.comm.errors import PeerFailedError, PeerTimeoutError
from lowbw.comm.meter import Meter
from lowbw.comm.registry import get as collective_spec
from lowbw.compress.protocol import CallRecord

__all__ = ["DistCollective"]


class DistCollective:
    """Per-rank view of a torch.distributed ``group`` (default: the world) running ``algorithm``."""

    def __init__(self, algorithm: str = "ring", group=None, meter: Meter | None = None, timeout=None,
                 chunk_bytes: int | None = None, window: int = DEFAULT_WINDOW) -> None:
        if not dist.is_initialized():
            raise RuntimeError("DistCollective needs torch.distributed.init_process_group(...) first")
        self.algorithm = check_algorithm(algorithm, ALGORITHMS)
        self.group = group
        self.meter = meter
        self.timeout = as_seconds(timeout)
        self.chunk_bytes = chunk_bytes
        self.window = window
        self.rank = dist.get_rank(group)
        self.world_size = dist.get_world_size(group)
        self.calls: list[CallRecord] = []

    def __repr__(self) -> str:
        return f"DistCollective(algorithm={self.algorithm!r}, rank={self.rank}, world_size={self.world_size})"

    def _record(self, op: str, tensor: Tensor, algorithm: str, sizes_known: bool = False) -> None:
        self.calls.append(CallRecord(op, tensor.numel() * tensor.element_size(), algorithm, self.world_size,
                                     sizes_known))

    def all_reduce(self, tensor: Tensor) -> Tensor:
        out = tensor.detach().clone()
        allreduce(out, self.algorithm, "sum", self.group, self.timeout, meter=self.meter,
                  chunk_bytes=self.chunk_bytes, window=self.window)
        self._record("all_reduce", tensor, self.algorithm)
        return out

    def all_gather(self, tensor: Tensor, same_size: bool = False) -> list[Tensor]:
        """Every rank's tensor in rank order (``same_size``: all of this one's shape, no size exchange)."""
        opaque = collective_spec(self.algorithm).opaque  # torch's own all-gather pairs with torch's all-reduce
        if opaque:
            out = self._native_all_gather(tensor)
            same_size = False  # the native path exchanges its headers whatever the sizes
        else:
            shapes = [tuple(tensor.shape)] * self.world_size if same_size else None
            out = allgather(tensor, self.group, self.timeout, meter=self.meter, chunk_bytes=self.chunk_bytes,
                            window=self.window, shapes=shapes)
        self._record("all_gather", tensor, self.algorithm if opaque else "ring", same_size)
        return out

    def broadcast(self, tensor: Tensor, src: int) -> Tensor:
        out = tensor.detach().clone()
        how = BROADCAST_FOR[self.algorithm]
        broadcast(out, src, how, self.group, self.timeout, meter=self.meter, chunk_bytes=self.chunk_bytes,
                  window=self.window)
        self._record("broadcast", tensor, how)
        return out

    def barrier(self) -> None:
        """All ranks meet; a rank that does not come within the timeout is named (gloo: monitored)."""
        to = timedelta(seconds=self.timeout)
        try:
            if "gloo" in str(dist.get_backend(self.group)):
                dist.monitored_barrier(self.group, timeout=to)
            else:
                wait_native(dist.barrier(self.group, async_op=True), self.timeout, self.rank, "barrier")
        except (PeerTimeoutError, PeerFailedError):
            raise
        except Exception as e:
            raise PeerTimeoutError(f"lowbw.comm barrier: rank {self.rank}: {str(e).strip()[:400]}",
                                   rank=self.rank) from e

    def _native_all_gather(self, tensor: Tensor) -> list[Tensor]:
        """dist.all_gather needs equal sizes: exchange headers, pad to the largest, trim."""
        N = self.world_size
        with metered(self.meter, op="all_gather", algorithm="native", rank=self.rank, world_size=N, tensor=tensor,
                     measured=False):
            dev = tensor.device
            hdr = shape_header(tensor).to(dev)
            hdrs = [torch.empty_like(hdr) for _ in range(N)]
            wait_native(dist.all_gather(hdrs, hdr, group=self.group, async_op=True), self.timeout, self.rank,
                        "native all_gather")
            shapes = [tuple(int(x) for x in h[2:2 + int(h[1])].tolist()) for h in hdrs]
            sizes = [int(torch.Size(s).numel()) for s in shapes]
            m = max(sizes)
            if m == 0:
                out = [torch.empty(s, dtype=tensor.dtype, device=dev) for s in shapes]
            else:
                src = torch.zeros(m, dtype=tensor.dtype, device=dev)
                src[: tensor.numel()] = tensor.detach().reshape(-1)
                bufs = [torch.empty(m, dtype=tensor.dtype, device=dev) for _ in range(N)]
                wait_native(dist.all_gather(bufs, src, group=self.group, async_op=True), self.timeout,
                            self.rank, "native all_gather")
                out = [b[:s].view(sh) for b, s, sh in zip(bufs, sizes, shapes)]
        return out
