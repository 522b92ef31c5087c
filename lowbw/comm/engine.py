"""The machinery every lowbw collective shares: algorithm dispatch over a Transport, metering, views.

:mod:`lowbw.comm.api` (over torch.distributed), :class:`~lowbw.comm.DistCollective` and
:class:`~lowbw.comm.ThreadCollective` (threads of one process) run the same per-rank code from here, so
their numbers and byte counts agree bit for bit. Nothing here opens a process group.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta

import torch
from torch import Tensor

from lowbw.comm.algorithms import BROADCAST_ALIASES, BROADCASTS, check_algorithm
from lowbw.comm.errors import CommError, PeerFailedError, PeerTimeoutError
from lowbw.comm.gather import ring_allgather_into
from lowbw.comm.meter import CallStats, Meter, active_meters
from lowbw.comm.numerics import Reducer
from lowbw.comm.registry import COLLECTIVES
from lowbw.comm.transport import DEFAULT_TIMEOUT, DistTransport, Transport
from lowbw.comm.tree import TREES, bcast_from_root

__all__ = [
    "ALGORITHMS",
    "BROADCASTS",
    "BROADCAST_ALIASES",
    "BROADCAST_FOR",
    "DEFAULT_CHUNK_BYTES",
    "DEFAULT_WINDOW",
    "MAX_DIMS",
    "FlatView",
    "as_seconds",
    "check_algorithm",
    "chunk_elems",
    "metered",
    "run_allgather",
    "run_allreduce",
    "run_broadcast",
    "shape_header",
    "wait_native",
]

ALGORITHMS = tuple(COLLECTIVES)  # every all-reduce, in the registry's order (= lowbw.comm.algorithms')
BROADCAST_FOR = {a: spec.broadcast for a, spec in COLLECTIVES.items()}  # the broadcast each pairs with
DEFAULT_CHUNK_BYTES = 1 << 22  # 4 MiB messages: large enough for loopback, small enough to stream
DEFAULT_WINDOW = 4  # chunks in flight per receiving stream
MAX_DIMS = 8  # the most dimensions an all-gathered tensor may have (its shape header has MAX_DIMS slots)
# dtype codes of the shape header; a dtype outside the list is code -1 (allowed if every rank has it)
_DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64, torch.int32, torch.int16,
           torch.int8, torch.uint8, torch.bool, torch.complex64, torch.complex128]


def as_seconds(timeout) -> float:
    """A timeout in seconds: ``None`` -> ``DEFAULT_TIMEOUT``; a timedelta or a number of seconds."""
    if timeout is None:
        return DEFAULT_TIMEOUT
    if isinstance(timeout, timedelta):
        return timeout.total_seconds()
    return float(timeout)


def chunk_elems(chunk_bytes: int | None, itemsize: int) -> int:
    """Elements per message for a message size of ``chunk_bytes`` (default ``DEFAULT_CHUNK_BYTES``), >= 1."""
    cb = DEFAULT_CHUNK_BYTES if chunk_bytes is None else int(chunk_bytes)
    if cb <= 0:
        raise ValueError(f"chunk_bytes={chunk_bytes!r} must be > 0")
    return max(1, cb // max(1, itemsize))


@contextmanager
def metered(meter: Meter | None, *, op: str, algorithm: str, rank: int, world_size: int, tensor: Tensor,
            transport: Transport | None = None, nbytes: int | None = None,
            measured: bool = True) -> Iterator[list[CallStats]]:
    """Count one collective call on ``meter`` and on every meter opened with ``metering()`` in this thread.

    Yields the call's :class:`CallStats`, one per meter; ``transport``, when given, counts its messages into
    them. ``nbytes``: the call's payload (default: ``tensor``'s bytes); ``measured=False`` marks counts that
    are the algorithm's known pattern rather than messages seen (``native``). On normal exit each record's
    ``seconds`` is the call's wall time; a call that raises leaves it unset.
    """
    meters = active_meters()
    if meter is not None and meter not in meters:
        meters.append(meter)
    nb = tensor.numel() * tensor.element_size() if nbytes is None else nbytes
    stats = [m.start(op=op, algorithm=algorithm, rank=rank, world_size=world_size, nbytes=nb,
                     dtype=str(tensor.dtype).replace("torch.", ""), measured=measured) for m in meters]
    if transport is not None:
        transport.stats = stats
    t0 = time.perf_counter()
    yield stats
    dt = time.perf_counter() - t0
    for st in stats:
        st.seconds = dt


class FlatView:
    """A contiguous 1-D working view ``flat`` of ``tensor``; ``write_back()`` copies it into ``tensor`` if
    ``tensor`` was not contiguous (so the algorithms only ever see 1-D contiguous buffers)."""

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
    """Run one of our algorithms (not ``native``) on a contiguous 1-D tensor, in place: the registry's
    ``SPEC.run`` of ``algorithm`` (:mod:`lowbw.comm.registry`). One rank only finishes its reduction (a mean
    divides by 1) and an empty tensor sends nothing, so no algorithm handles either case itself."""
    spec = COLLECTIVES.get(algorithm)
    if spec is None or spec.run is None:
        raise ValueError(f"algorithm={algorithm!r} cannot run over a transport")
    if tp.world_size == 1:
        red.finish(flat)
    elif flat.numel() > 0:
        spec.run(flat, tp, red, chunk, window, root)


def run_broadcast(flat: Tensor, tp: Transport, src: int, shape: str, chunk: int, window: int) -> None:
    """Broadcast rank ``src``'s contiguous 1-D ``flat`` into every rank's, in place, along tree ``shape``."""
    if tp.world_size == 1 or flat.numel() == 0:
        return
    parent, children = TREES[shape](tp.rank, tp.world_size, src)
    bcast_from_root(flat, tp, parent, children, chunk, window)


def shape_header(t: Tensor) -> Tensor:
    """``[dtype code, ndim, *shape, 0...]``: MAX_DIMS + 2 int64 that tell a peer what ``t`` is."""
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
            hdr = shape_header(tensor)
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
    ring_allgather_into(out, offsets, tp, chunk_elems(chunk_bytes, tensor.element_size()), window)
    return [out[offsets[j]:offsets[j + 1]].view(shapes[j]) for j in range(N)]


def wait_native(work, to: float, rank: int, what: str) -> None:
    """Wait ``to`` seconds for a torch.distributed ``work``; a failure or timeout names ``rank`` and ``what``."""
    try:
        ok = work.wait(timedelta(seconds=to))
    except Exception as e:
        text = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        cls = PeerTimeoutError if "time" in str(e).lower() else PeerFailedError
        raise cls(f"lowbw.comm {what}: rank {rank} failed: {text[:300]}", rank=rank) from e
    if ok is False:
        raise PeerTimeoutError(f"lowbw.comm {what}: rank {rank} timed out after {to:g}s", rank=rank)
