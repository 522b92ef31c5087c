"""The functions a user calls (lowbw.comm's API): ``allreduce`` (every algorithm), ``allgather`` (variable
sizes), ``broadcast``.

Our algorithms run over ``torch.distributed`` point-to-point messages, so they work on every backend
that has isend/irecv (gloo on CPU, NCCL on GPU). ``native`` is ``torch.distributed.all_reduce`` itself,
the baseline.

=============  ====================================================================  ==================
algorithm      what                                                                  reduction order
=============  ====================================================================  ==================
ring           reduce-scatter + all-gather round a ring, chunked and pipelined       cyclic per segment
tree           binary-tree reduce to rank 0 + broadcast down, chunked, pipelined     own, child, child
ps             parameter server: gather to ``root``, reduce, broadcast               rank order
butterfly      recursive halving + doubling; non-powers of two fold extra ranks in   binary tree
alltoall       naive: every rank sends everything to every rank                      rank order
roundrobin     rank j masters segment j (reduce to j, j broadcasts); all at once     rank order
allgather      ring all-gather of the whole tensors, reduce locally                  rank order
native         torch.distributed.all_reduce                                          the backend's
=============  ====================================================================  ==================

Half types: see :mod:`lowbw.comm.numerics` (fp32 arithmetic, payloads in the input dtype).
Every wait on a peer has ``timeout`` seconds (default ``DEFAULT_TIMEOUT``); a dead or stuck peer makes
the call raise :class:`~lowbw.comm.errors.PeerFailedError` / :class:`~lowbw.comm.errors.PeerTimeoutError`
naming it.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import Tensor

from lowbw.comm.engine import (
    ALGORITHMS,
    BROADCAST_ALIASES,
    BROADCAST_FOR,
    BROADCASTS,
    DEFAULT_CHUNK_BYTES,
    DEFAULT_WINDOW,
    FlatView,
    as_seconds,
    check_algorithm,
    chunk_elems,
    metered,
    run_allgather,
    run_allreduce,
    run_broadcast,
    wait_native,
)
from lowbw.comm.meter import Meter
from lowbw.comm.numerics import Reducer, normalize_op
from lowbw.comm.registry import get as collective_spec
from lowbw.comm.transport import DistTransport

__all__ = [
    "ALGORITHMS",
    "BROADCASTS",
    "BROADCAST_FOR",
    "DEFAULT_CHUNK_BYTES",
    "DEFAULT_WINDOW",
    "allreduce",
    "allgather",
    "broadcast",
]


def allreduce(tensor: Tensor, algorithm: str = "ring", op="sum", group=None, timeout=None, *,
              meter: Meter | None = None, chunk_bytes: int | None = None, window: int = DEFAULT_WINDOW,
              root: int = 0) -> Tensor:
    """All-reduce ``tensor`` in place over ``group`` (like ``dist.all_reduce``); returns it.

    ``op``: "sum" | "avg" | "prod" | "max" | "min" (or a ``dist.ReduceOp``). ``timeout``: seconds (or a
    timedelta) for every wait on a peer. ``chunk_bytes``: message size for streaming (ring, tree, ps,
    alltoall, roundrobin, allgather). ``root``: the root of ``ps`` and ``tree``. ``meter``: a
    :class:`~lowbw.comm.meter.Meter` that gets this call's byte and message counts (as does every meter
    opened with :func:`lowbw.comm.meter.metering`).
    """
    check_algorithm(algorithm)
    opn = normalize_op(op)
    red = Reducer(opn, tensor.dtype, 1)  # validates dtype/op early
    to = as_seconds(timeout)
    if collective_spec(algorithm).opaque:
        return _native_allreduce(tensor, opn, group, to, meter)
    tp = DistTransport(group, to, None, context=f"{algorithm} all_reduce")
    N = tp.world_size
    if not 0 <= root < N:
        raise ValueError(f"root={root} is not a rank of a group of {N}")
    red = Reducer(opn, tensor.dtype, N)
    with metered(meter, op="all_reduce", algorithm=algorithm, rank=tp.rank, world_size=N, tensor=tensor,
                 transport=tp), torch.no_grad():
        f = FlatView(tensor)
        run_allreduce(f.flat, tp, algorithm, red, chunk_elems(chunk_bytes, tensor.element_size()), window, root)
        f.write_back()
    return tensor


def _native_allreduce(tensor: Tensor, opn: str, group, to: float, meter) -> Tensor:
    rank, N = dist.get_rank(group), dist.get_world_size(group)
    rop = {"sum": dist.ReduceOp.SUM, "avg": dist.ReduceOp.SUM, "prod": dist.ReduceOp.PRODUCT,
           "max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN}[opn]
    with metered(meter, op="all_reduce", algorithm="native", rank=rank, world_size=N, tensor=tensor,
                 measured=False), torch.no_grad():
        f = FlatView(tensor)
        if f.flat.numel():
            work = dist.all_reduce(f.flat, op=rop, group=group, async_op=True)
            wait_native(work, to, rank, "native all_reduce")
            if opn == "avg":
                f.flat.div_(N)
        f.write_back()
    return tensor


def allgather(tensor: Tensor, group=None, timeout=None, *, meter: Meter | None = None,
              chunk_bytes: int | None = None, window: int = DEFAULT_WINDOW, shapes=None) -> list[Tensor]:
    """Every rank's tensor, in rank order, by a ring all-gather. Shapes may differ between ranks (numel 0
    too): they are exchanged first unless ``shapes`` (one per rank) is given. Dtypes must agree."""
    tp = DistTransport(group, as_seconds(timeout), None, context="ring all_gather")
    with metered(meter, op="all_gather", algorithm="ring", rank=tp.rank, world_size=tp.world_size, tensor=tensor,
                 transport=tp), torch.no_grad():
        return run_allgather(tensor, tp, chunk_bytes, window, shapes)


def broadcast(tensor: Tensor, src: int = 0, algorithm: str = "pipeline", group=None, timeout=None, *,
              meter: Meter | None = None, chunk_bytes: int | None = None, window: int = DEFAULT_WINDOW) -> Tensor:
    """Rank ``src``'s ``tensor`` into every rank's ``tensor`` (in place; same shape and dtype everywhere).

    ``algorithm``: "pipeline" (chunked chain; bandwidth-optimal), "tree" (binomial, log2 N rounds), "flat"
    (the source sends to each rank) or "native" (``dist.broadcast``); "chain"/"binomial" are aliases.
    """
    algorithm = BROADCAST_ALIASES.get(algorithm, algorithm)
    check_algorithm(algorithm, BROADCASTS)
    to = as_seconds(timeout)
    rank, N = dist.get_rank(group), dist.get_world_size(group)
    if not 0 <= src < N:
        raise ValueError(f"src={src} is not a rank of a group of {N}")
    if algorithm == "native":
        with metered(meter, op="broadcast", algorithm="native", rank=rank, world_size=N, tensor=tensor,
                     measured=False), torch.no_grad():
            f = FlatView(tensor)
            if f.flat.numel():
                gsrc = dist.get_global_rank(group, src) if group is not None else src
                wait_native(dist.broadcast(f.flat, gsrc, group=group, async_op=True), to, rank, "native broadcast")
            f.write_back()
        return tensor
    tp = DistTransport(group, to, None, context=f"{algorithm} broadcast")
    with metered(meter, op="broadcast", algorithm=algorithm, rank=rank, world_size=N, tensor=tensor,
                 transport=tp), torch.no_grad():
        f = FlatView(tensor)
        run_broadcast(f.flat, tp, src, algorithm, chunk_elems(chunk_bytes, tensor.element_size()), window)
        f.write_back()
    return tensor
