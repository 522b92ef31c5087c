"""Entry points: ``allreduce`` (every algorithm), ``allgather`` (variable sizes), ``broadcast``.

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

import time
from datetime import timedelta

import torch
from torch import Tensor

from lowbw.comm.allgather import allgather_allreduce, ring_allgather_into
from lowbw.comm.butterfly import butterfly_allreduce
from lowbw.comm.direct import alltoall_allreduce, roundrobin_allreduce
from lowbw.comm.errors import CommError, PeerFailedError, PeerTimeoutError
from lowbw.comm.meter import CallStats, Meter, active_meters
from lowbw.comm.numerics import Reducer, normalize_op
from lowbw.comm.ring import ring_allreduce
from lowbw.comm.transport import DEFAULT_TIMEOUT, DistTransport, Transport
from lowbw.comm.tree import TREES, bcast_from_root, tree_allreduce

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

ALGORITHMS = ("ring", "tree", "ps", "butterfly", "alltoall", "roundrobin", "allgather", "native")
# broadcast algorithms, named as lowbw.net.costmodel names them: "pipeline" = chunked chain (bandwidth-
# optimal), "tree" = binomial tree (log2 N rounds), "flat" = the source sends to every rank
BROADCASTS = ("pipeline", "tree", "flat", "native")
_BCAST_ALIASES = {"chain": "pipeline", "binomial": "tree"}
# the broadcast that DistCollective/ThreadCollective use for each all-reduce algorithm
BROADCAST_FOR = {
    "ring": "pipeline",
    "allgather": "pipeline",
    "tree": "tree",
    "butterfly": "tree",
    "ps": "flat",
    "alltoall": "flat",
    "roundrobin": "flat",
    "native": "native",
}
DEFAULT_CHUNK_BYTES = 1 << 22  # 4 MiB messages: large enough for loopback, small enough to stream
DEFAULT_WINDOW = 4  # chunks in flight per receiving stream


def _seconds(timeout) -> float:
    if timeout is None:
        return DEFAULT_TIMEOUT
    if isinstance(timeout, timedelta):
        return timeout.total_seconds()
    return float(timeout)


def _check_algorithm(algorithm: str, allowed=ALGORITHMS) -> str:
    if algorithm not in allowed:
        raise ValueError(f"algorithm={algorithm!r} is not known; allowed: {', '.join(allowed)}")
    return algorithm


def _chunk_elems(chunk_bytes: int | None, itemsize: int) -> int:
    cb = DEFAULT_CHUNK_BYTES if chunk_bytes is None else int(chunk_bytes)
    if cb <= 0:
        raise ValueError(f"chunk_bytes={chunk_bytes!r} must be > 0")
    return max(1, cb // max(1, itemsize))


def open_stats(meter: Meter | None, *, op: str, algorithm: str, rank: int, world_size: int, tensor: Tensor,
               nbytes: int | None = None, measured: bool = True) -> list[CallStats]:
    meters = active_meters()
    if meter is not None and meter not in meters:
        meters.append(meter)
    nb = tensor.numel() * tensor.element_size() if nbytes is None else nbytes
    return [m.start(op=op, algorithm=algorithm, rank=rank, world_size=world_size, nbytes=nb,
                    dtype=str(tensor.dtype).replace("torch.", ""), measured=measured) for m in meters]


def close_stats(stats: list[CallStats], t0: float) -> None:
    dt = time.perf_counter() - t0
    for st in stats:
        st.seconds = dt


class _Flat:
    """A contiguous 1-D working view of ``tensor``, written back on exit if it had to be copied."""

    def __init__(self, tensor: Tensor) -> None:
        self.tensor = tensor
        self.flat = tensor.detach().contiguous().view(-1)
        self.copied = self.flat.data_ptr() != tensor.data_ptr() or not tensor.is_contiguous()

    def write_back(self) -> None:
        if self.copied:
            with torch.no_grad():
                self.tensor.copy_(self.flat.view(self.tensor.shape))


def run_allreduce(flat: Tensor, tp: Transport, algorithm: str, red: Reducer, chunk: int, window: int,
                  root: int = 0) -> None:
    """Run one of our algorithms (not ``native``) on a contiguous 1-D tensor, in place."""
    if algorithm == "ring":
        ring_allreduce(flat, tp, red, chunk, window)
    elif algorithm == "tree":
        tree_allreduce(flat, tp, red, chunk, window, shape="heap", root=root)
    elif algorithm == "ps":
        tree_allreduce(flat, tp, red, chunk, window, shape="flat", root=root)
    elif algorithm == "butterfly":
        butterfly_allreduce(flat, tp, red)
    elif algorithm == "alltoall":
        alltoall_allreduce(flat, tp, red, chunk)
    elif algorithm == "roundrobin":
        roundrobin_allreduce(flat, tp, red, chunk)
    elif algorithm == "allgather":
        allgather_allreduce(flat, tp, red, chunk, window)
    else:
        raise ValueError(f"algorithm={algorithm!r} cannot run over a transport")


def run_broadcast(flat: Tensor, tp: Transport, src: int, shape: str, chunk: int, window: int) -> None:
    if tp.world_size == 1 or flat.numel() == 0:
        return
    parent, children = TREES[shape](tp.rank, tp.world_size, src)
    bcast_from_root(flat, tp, parent, children, chunk, window)


_DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64, torch.int32, torch.int16,
           torch.int8, torch.uint8, torch.bool, torch.complex64, torch.complex128]
MAX_DIMS = 8


def _header(t: Tensor) -> Tensor:
    if t.dim() > MAX_DIMS:
        raise ValueError(f"all_gather supports tensors of at most {MAX_DIMS} dims, got {t.dim()}")
    code = _DTYPES.index(t.dtype) if t.dtype in _DTYPES else -1
    return torch.tensor([code, t.dim(), *t.shape, *([0] * (MAX_DIMS - t.dim()))], dtype=torch.int64)


def run_allgather(tensor: Tensor, tp: Transport, chunk_bytes: int | None, window: int,
                  shapes: list | None = None) -> list[Tensor]:
    """Ring all-gather of possibly differently shaped tensors (shapes exchanged first unless given)."""
    N, r = tp.world_size, tp.rank
    src = tensor.detach().contiguous().view(-1)
    if shapes is None:
        if N == 1:
            shapes = [tuple(tensor.shape)]
        else:
            hdr = _header(tensor)
            H = hdr.numel()
            allh = torch.empty(N * H, dtype=torch.int64)
            allh[r * H:(r + 1) * H] = hdr
            dev = tensor.device
            if dev.type != "cpu" and not isinstance(tp, DistTransport):
                dev = torch.device("cpu")
            allh = allh.to(dev)
            ring_allgather_into(allh, [j * H for j in range(N + 1)], tp, H, window)
            allh = allh.cpu().view(N, H)
            shapes = []
            for j in range(N):
                code, nd = int(allh[j, 0]), int(allh[j, 1])
                if code != (_DTYPES.index(tensor.dtype) if tensor.dtype in _DTYPES else -1):
                    other = _DTYPES[code] if 0 <= code < len(_DTYPES) else "an unknown dtype"
                    raise CommError(f"lowbw.comm all_gather: rank {j} sent {other}, rank {r} has {tensor.dtype}",
                                    peer=j, rank=r)
                shapes.append(tuple(int(x) for x in allh[j, 2:2 + nd]))
    sizes = [int(torch.Size(s).numel()) for s in shapes]
    if sizes[r] != src.numel():
        raise ValueError(f"shapes[{r}]={shapes[r]} does not match this rank's tensor {tuple(tensor.shape)}")
    offsets = [0]
    for s in sizes:
        offsets.append(offsets[-1] + s)
    out = torch.empty(offsets[-1], dtype=tensor.dtype, device=tensor.device)
    out[offsets[r]:offsets[r + 1]].copy_(src)
    ring_allgather_into(out, offsets, tp, _chunk_elems(chunk_bytes, tensor.element_size()), window)
    return [out[offsets[j]:offsets[j + 1]].view(shapes[j]) for j in range(N)]


# ---------------------------------------------------------------------------------------------------------
# public API over torch.distributed
# ---------------------------------------------------------------------------------------------------------


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
    _check_algorithm(algorithm)
    opn = normalize_op(op)
    red = Reducer(opn, tensor.dtype, 1)  # validates dtype/op early
    to = _seconds(timeout)
    if algorithm == "native":
        return _native_allreduce(tensor, opn, group, to, meter)
    tp = DistTransport(group, to, None, context=f"{algorithm} all_reduce")
    N = tp.world_size
    if not 0 <= root < N:
        raise ValueError(f"root={root} is not a rank of a group of {N}")
    red = Reducer(opn, tensor.dtype, N)
    tp.stats = open_stats(meter, op="all_reduce", algorithm=algorithm, rank=tp.rank, world_size=N, tensor=tensor)
    t0 = time.perf_counter()
    with torch.no_grad():
        f = _Flat(tensor)
        run_allreduce(f.flat, tp, algorithm, red, _chunk_elems(chunk_bytes, tensor.element_size()), window, root)
        f.write_back()
    close_stats(tp.stats, t0)
    return tensor


def _native_allreduce(tensor: Tensor, opn: str, group, to: float, meter) -> Tensor:
    import torch.distributed as dist

    rank, N = dist.get_rank(group), dist.get_world_size(group)
    stats = open_stats(meter, op="all_reduce", algorithm="native", rank=rank, world_size=N, tensor=tensor,
                       measured=False)
    t0 = time.perf_counter()
    rop = {"sum": dist.ReduceOp.SUM, "avg": dist.ReduceOp.SUM, "prod": dist.ReduceOp.PRODUCT,
           "max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN}[opn]
    with torch.no_grad():
        f = _Flat(tensor)
        if f.flat.numel():
            work = dist.all_reduce(f.flat, op=rop, group=group, async_op=True)
            _wait_native(work, to, rank, "native all_reduce")
            if opn == "avg":
                f.flat.div_(N)
        f.write_back()
    close_stats(stats, t0)
    return tensor


def _wait_native(work, to: float, rank: int, what: str) -> None:
    try:
        ok = work.wait(timedelta(seconds=to))
    except Exception as e:
        text = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        cls = PeerTimeoutError if "time" in str(e).lower() else PeerFailedError
        raise cls(f"lowbw.comm {what}: rank {rank} failed: {text[:300]}", rank=rank) from e
    if ok is False:
        raise PeerTimeoutError(f"lowbw.comm {what}: rank {rank} timed out after {to:g}s", rank=rank)


def allgather(tensor: Tensor, group=None, timeout=None, *, meter: Meter | None = None,
              chunk_bytes: int | None = None, window: int = DEFAULT_WINDOW, shapes=None) -> list[Tensor]:
    """Every rank's tensor, in rank order, by a ring all-gather. Shapes may differ between ranks (numel 0
    too): they are exchanged first unless ``shapes`` (one per rank) is given. Dtypes must agree."""
    tp = DistTransport(group, _seconds(timeout), None, context="ring all_gather")
    tp.stats = open_stats(meter, op="all_gather", algorithm="ring", rank=tp.rank, world_size=tp.world_size,
                          tensor=tensor)
    t0 = time.perf_counter()
    with torch.no_grad():
        out = run_allgather(tensor, tp, chunk_bytes, window, shapes)
    close_stats(tp.stats, t0)
    return out


def broadcast(tensor: Tensor, src: int = 0, algorithm: str = "pipeline", group=None, timeout=None, *,
              meter: Meter | None = None, chunk_bytes: int | None = None, window: int = DEFAULT_WINDOW) -> Tensor:
    """Rank ``src``'s ``tensor`` into every rank's ``tensor`` (in place; same shape and dtype everywhere).

    ``algorithm``: "pipeline" (chunked chain; bandwidth-optimal), "tree" (binomial, log2 N rounds), "flat"
    (the source sends to each rank) or "native" (``dist.broadcast``); "chain"/"binomial" are aliases.
    """
    import torch.distributed as dist

    algorithm = _BCAST_ALIASES.get(algorithm, algorithm)
    _check_algorithm(algorithm, BROADCASTS)
    to = _seconds(timeout)
    rank, N = dist.get_rank(group), dist.get_world_size(group)
    if not 0 <= src < N:
        raise ValueError(f"src={src} is not a rank of a group of {N}")
    if algorithm == "native":
        stats = open_stats(meter, op="broadcast", algorithm="native", rank=rank, world_size=N, tensor=tensor,
                           measured=False)
        t0 = time.perf_counter()
        with torch.no_grad():
            f = _Flat(tensor)
            if f.flat.numel():
                gsrc = dist.get_global_rank(group, src) if group is not None else src
                _wait_native(dist.broadcast(f.flat, gsrc, group=group, async_op=True), to, rank, "native broadcast")
            f.write_back()
        close_stats(stats, t0)
        return tensor
    tp = DistTransport(group, to, None, context=f"{algorithm} broadcast")
    tp.stats = open_stats(meter, op="broadcast", algorithm=algorithm, rank=rank, world_size=N, tensor=tensor)
    t0 = time.perf_counter()
    with torch.no_grad():
        f = _Flat(tensor)
        run_broadcast(f.flat, tp, src, algorithm, _chunk_elems(chunk_bytes, tensor.element_size()), window)
        f.write_back()
    close_stats(tp.stats, t0)
    return tensor
