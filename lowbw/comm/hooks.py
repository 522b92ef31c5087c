"""Any lowbw compressor as a PyTorch DDP communication hook.

>>> state, hook = make_hook("powersgd", rank=1, module=model)   # names state after model's parameters
>>> ddp_model.register_comm_hook(state, hook)                   # doctest: +SKIP

What the hook does with a bucket (DDP's flat gradient buffer of several parameters):

1. It compresses every parameter's gradient on its own, through the bucket's per-parameter views
   (``bucket.gradients()``, shaped like ``bucket.parameters()``), as torch's PowerSGD hook does: PowerSGD
   sees matrices, top-k is per layer, a per-tensor scale is per tensor. Only elementwise compressors
   (``none``, ``fp16``, ``bf16``) take the flat bucket whole: same numbers, one message.
2. It returns at once a ``torch.futures.Future`` that completes when the exchange has: the work runs on
   one exchange thread per hook state, in the order DDP launched the buckets (the same order on every
   rank, so collectives match), while backward goes on computing the next buckets.
3. State (error-feedback residuals, PowerSGD's warm-start Q, DGC momentum) lives in the compressor
   ``State`` under each *parameter's* name: it survives DDP's bucket rebuild, and two buckets in flight
   never share an entry. Buckets run one at a time on the exchange thread, so the state is never
   touched by two exchanges at once, whatever order DDP would wait for them in.
4. Payloads of compressors that use the default aggregation go out together, one collective per bucket:
   summable parts are concatenated per dtype and all-reduced; the others are packed into one byte
   string (each payload's shape and part lengths as int64, then its parts: exactly ``Payload.nbytes``)
   and all-gathered. PowerSGD and AR-Top-k run their own per-tensor protocol.
5. Bytes are metered on ``state.meter``: our collectives count every message; torch's own (``native``)
   calls are filled in from the payload size and gloo's known pattern
   (:func:`lowbw.comm.meter.estimate_native`, marked ``estimated``).
6. A compressor that sends some tensors as they are (PowerSGD: a vector, or a matrix whose rank-r factors
   would not be ``min_compression_rate`` times smaller, e.g. a 1x20 weight) counts them in
   ``state.stats.uncompressed``; when the first backward pass compressed none of the model's tensors, the
   hook says so once (an :class:`UncompressedWarning`, also in ``state.notes``): every gradient went dense.

Under ``algorithm="native"`` all-reduces are torch's; all-gathers take our ring (``gather="auto"``), which
on shaped links is faster than gloo's ``all_gather`` (``python -m lowbw bench hooks`` measures both).
"""

# No ``from __future__ import annotations`` here: DDP's register_comm_hook inspects the hook's return
# annotation and accepts only the evaluated ``torch.futures.Future[torch.Tensor]`` (a string is rejected).
import contextlib
import queue
import threading
import time
import warnings
from dataclasses import dataclass, field, replace

import torch

from lowbw.comm.aggregation import resolve
from lowbw.comm.algorithms import ALLREDUCE_ALGORITHMS, check_algorithm
from lowbw.comm.api import allreduce
from lowbw.comm.distributed import DistCollective
from lowbw.comm.meter import Meter, active_meters, estimate_native, metering
from lowbw.comm.registry import get as collective_spec
from lowbw.compress.base import Compressor, NonFiniteError, State
from lowbw.compress.protocol import CallRecord
from lowbw.compress.quantize import Cast

__all__ = ["HookState", "HookStats", "HookTimer", "make_hook", "compressor_hook", "lowbw_hook", "timed_hook",
           "GRANULARITIES", "UncompressedWarning"]

GRANULARITIES = ("auto", "param", "bucket")
GATHERS = ("auto", "ring", "native")
ELEMENTWISE = ("none", "fp16", "bf16")  # the same numbers per parameter or on the flat bucket


@dataclass
class HookStats:
    """What the hook did so far on this rank (like torch's PowerSGD state logging)."""

    iterations: int = 0  # backward passes whose last bucket was exchanged
    buckets: int = 0
    dense_bytes: int = 0  # bytes of the buckets' gradients as DDP gave them
    busy_s: float = 0.0  # seconds the exchange thread worked: compress + communicate + decode
    tensors: int = 0  # gradients exchanged one by one (per parameter)
    uncompressed: int = 0  # of those, sent as they are: too small for the compressor (PowerSGD's rule)

    def as_dict(self, meter: Meter | None = None) -> dict:
        d = dict(self.__dict__)
        if meter is not None:
            d["bytes_sent"] = meter.bytes_sent
            d["compression"] = self.dense_bytes / meter.bytes_sent if meter.bytes_sent else None
        return d


class UncompressedWarning(UserWarning):
    """The hook's compressor compressed none of the model's gradients (every tensor too small for it)."""


def _compresses(comp, shape) -> bool | None:
    """Whether ``comp`` compresses a tensor of ``shape`` (False: it sends it as it is), None if unknown (the
    compressor has no such rule: it compresses everything)."""
    comp = getattr(comp, "inner", comp)  # error feedback around a compressor
    rule = getattr(comp, "matrix_shape", None)
    return None if rule is None else rule(torch.Size(shape)) is not None


class _Exchanger:
    """One daemon thread running queued exchanges first-in first-out, each completing its Future."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._q: queue.SimpleQueue = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def submit(self, fn) -> torch.futures.Future:
        fut: torch.futures.Future = torch.futures.Future()
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._loop, name=self.name, daemon=True)
                self._thread.start()
            self._q.put((fn, fut))
        return fut

    def _loop(self) -> None:
        while True:
            item = self._q.get()
            if item is None:
                return
            fn, fut = item
            try:
                with torch.no_grad():
                    res = fn()
            except BaseException as e:  # noqa: BLE001 - handed to whoever waits on the Future
                fut.set_exception(e)
                continue
            fut.set_result(res)

    def close(self, timeout: float = 10.0) -> None:
        with self._lock:
            t, self._thread = self._thread, None
        if t is not None and t.is_alive():
            self._q.put(None)
            t.join(timeout)


class _Split:
    """The Collective protocol with all-reduce/broadcast on one collective and all-gather on another (or the
    same); broadcasts note their root on the meter (native volumes depend on it)."""

    def __init__(self, main, gather, meter: Meter) -> None:
        self.main, self.gather, self.meter = main, gather, meter
        self.rank, self.world_size = main.rank, main.world_size
        self.calls = main.calls
        gather.calls = main.calls  # one record list, in call order
        self.algorithm = main.algorithm

    def all_reduce(self, tensor):
        return self.main.all_reduce(tensor)

    def broadcast(self, tensor, src):
        n0 = len(self.meter.calls)
        out = self.main.broadcast(tensor, src)
        for c in self.meter.calls[n0:]:
            c.root = src
        return out

    def all_gather(self, tensor):
        return self.gather.all_gather(tensor)


@dataclass
class HookState:
    """What the hook needs; pass it to ``register_comm_hook`` together with the hook."""

    # --- configuration
    compressor: object
    algorithm: str = "native"  # all-reduce algorithm (lowbw.comm.ALGORITHMS)
    group: object = None
    timeout: float | None = None  # seconds any wait on a peer may take (None: lowbw.comm's default)
    chunk_bytes: int | None = None
    granularity: str = "auto"  # param | bucket | auto (bucket for elementwise compressors)
    gather: str = "auto"  # all-gather path: ring | native | auto (ring)
    # --- per-rank compressor state, keyed by parameter name
    cstate: object = None  # lowbw.compress.State of this worker
    names: dict = field(default_factory=dict)  # id(parameter) -> state name
    sizes: dict = field(default_factory=dict)  # bucket index -> numel last seen (granularity="bucket")
    # --- accounting
    meter: Meter = field(default_factory=Meter)
    stats: HookStats = field(default_factory=HookStats)
    iteration: int = 0
    # --- runtime, made on first use (the process group exists by then)
    coll: object = None
    exchanger: _Exchanger = field(default_factory=lambda: _Exchanger("lowbw-hook"))
    notes: list = field(default_factory=list)  # what the hook said (e.g. that nothing was compressed)

    def collective(self):
        if self.coll is None:
            main = gather = DistCollective(self.algorithm, self.group, self.meter, self.timeout, self.chunk_bytes)
            opaque = collective_spec(self.algorithm).opaque  # torch's all-reduce, whose all-gather is gloo's
            ring = self.gather == "ring" or (self.gather == "auto" and opaque)
            if ring and opaque:
                gather = DistCollective("ring", self.group, self.meter, self.timeout, self.chunk_bytes)
            elif self.gather == "native" and not opaque:
                gather = DistCollective("native", self.group, self.meter, self.timeout, self.chunk_bytes)
            self.coll = _Split(main, gather, self.meter)
        return self.coll

    def per_parameter(self) -> bool:
        if self.granularity != "auto":
            return self.granularity == "param"
        return getattr(self.compressor, "name", "") not in ELEMENTWISE

    def name_of(self, param) -> str:
        """The state name of a parameter: its module name if known, else ``param<k>`` in order of first
        appearance (DDP's first buckets: the same on every rank)."""
        n = self.names.get(id(param))
        if n is None:
            n = self.names[id(param)] = f"param{len(self.names)}"
        return n

    def bucket_name(self, index: int, numel: int) -> str:
        if self.sizes.get(index, numel) != numel and self.cstate is not None:
            self.cstate.reset(f"bucket{index}")  # DDP rebuilt its buckets: this one holds other parameters now
        self.sizes[index] = numel
        return f"bucket{index}"

    def close(self) -> None:
        """Stop the exchange thread (it is a daemon; this only makes the end explicit)."""
        self.exchanger.close()


@dataclass
class _Job:
    """One bucket as the hook saw it: the flat buffer and its per-parameter views."""

    index: int
    buffer: torch.Tensor
    tensors: list  # per-parameter gradient views into buffer
    names: list  # their state names
    last: bool
    meters: list = field(default_factory=list)  # metering() contexts active where DDP called the hook


def lowbw_hook(state: HookState, bucket) -> torch.futures.Future[torch.Tensor]:
    """DDP communication hook: a Future of the bucket averaged over ranks through ``state.compressor``.

    Returns before any communication; the exchange thread compresses, communicates and decodes the
    average into the bucket's buffer, then completes the Future (with the buffer, or the error).
    """
    buf = bucket.buffer()
    if state.per_parameter():
        tensors = list(bucket.gradients())
        names = [state.name_of(p) for p in bucket.parameters()]
    else:
        tensors, names = [buf], [state.bucket_name(bucket.index(), buf.numel())]
    job = _Job(bucket.index(), buf, tensors, names, bucket.is_last(), active_meters())
    return state.exchanger.submit(lambda: _exchange(state, job))


def _exchange(state: HookState, job: _Job) -> torch.Tensor:
    """Runs on the exchange thread: the average over ranks written into ``job.buffer``."""
    t0 = time.perf_counter()
    coll = state.collective()
    meters = [state.meter, *(m for m in job.meters if m is not state.meter)]
    m0 = [len(m.calls) for m in meters]
    comp = state.compressor
    with contextlib.ExitStack() as stack:  # the caller's metering() contexts count this exchange too
        for m in meters[1:]:
            stack.enter_context(metering(m))
        if isinstance(comp, Cast) and len(job.tensors) == 1 and job.tensors[0] is job.buffer:
            _cast_in_place(comp, job.buffer, coll, state)
        elif type(comp).aggregate is Compressor.aggregate:
            _aggregate_together(comp, job, coll, state.cstate)
        else:
            for t, name in zip(job.tensors, job.names):
                t.copy_(comp.aggregate(t, coll, name, state.cstate))
    for m, k in zip(meters, m0):
        estimate_native(m.calls[k:])
    st = state.stats
    st.buckets += 1
    st.dense_bytes += job.buffer.numel() * job.buffer.element_size()
    if job.tensors and job.tensors[0] is not job.buffer:
        rules = [_compresses(comp, t.shape) for t in job.tensors]
        st.tensors += len(rules)
        st.uncompressed += sum(r is False for r in rules)
    if job.last:
        st.iterations += 1
        state.iteration += 1
        if st.iterations == 1 and st.tensors and st.uncompressed == st.tensors:
            _say_uncompressed(state)
    st.busy_s += time.perf_counter() - t0
    return job.buffer


def _say_uncompressed(state: HookState) -> None:
    """Once: the first backward pass compressed none of the model's tensors."""
    comp = state.compressor
    inner = getattr(comp, "inner", comp)
    rate = getattr(inner, "min_compression_rate", None)
    why = (f" (PowerSGD sends a tensor as it is unless it is a matrix whose rank-{getattr(inner, 'rank', '?')} "
           f"factors are min_compression_rate={rate:g} times smaller: an n x m matrix needs (n + m) r x {rate:g} "
           "< n m)") if rate is not None else ""
    msg = (f"lowbw hook: {getattr(comp, 'name', comp)} compressed none of the model's {state.stats.tensors} "
           f"gradient tensors: each is too small for it{why}; every gradient went out dense. Use a compressor "
           "that works on small tensors (fp16, blockwise, topk) or a larger model.")
    state.notes.append(msg)
    warnings.warn(msg, UncompressedWarning, stacklevel=1)


def _cast_in_place(comp, buf: torch.Tensor, coll, state: HookState) -> None:
    """``none``/``fp16``/``bf16`` on the flat bucket with as few passes as torch's fp16 hook: cast (a copy
    for fp16/bf16), divide by N, one finiteness check on the wire tensor, all-reduce it in place, cast back
    into the bucket. Same numbers as ``Cast.aggregate`` for power-of-two N (the division is then exact);
    the same errors: non-finite input, or |x| beyond fp16's range."""

    n = coll.world_size
    wire = buf.div_(n) if comp.wire == buf.dtype else buf.to(comp.wire).div_(n)
    if wire.numel() and not torch.isfinite(wire.sum(dtype=torch.float32)):
        bad = int((~torch.isfinite(buf)).sum())
        if bad:
            raise NonFiniteError(f"input has {bad} non-finite value(s) (NaN/Inf) out of {buf.numel()}; "
                                 "compressors do not pass them through")
        m = float(buf.abs().max()) * (n if wire is buf else 1)
        raise ValueError(f"{comp.kind}: input magnitude {m:.4g} exceeds {comp.kind}'s range; use bf16 or scale it")
    main = coll.main if isinstance(coll, _Split) else coll
    allreduce(wire, main.algorithm, "sum", main.group, main.timeout, meter=state.meter,
              chunk_bytes=main.chunk_bytes, window=main.window)
    main.calls.append(CallRecord("all_reduce", wire.numel() * wire.element_size(), main.algorithm, n))
    if wire is not buf:
        buf.copy_(wire)


def _aggregate_together(comp, job: _Job, coll, cstate) -> None:
    """Every tensor's payload in one collective (default aggregation; see the module docstring, step 4)."""
    n = coll.world_size
    payloads = [comp.compress(t, name, cstate) for t, name in zip(job.tensors, job.names)]
    if comp.summable:
        summed = _all_reduce_parts(payloads, coll)
        outs = [comp.decode(replace(p, parts=s)) for p, s in zip(payloads, summed)]
        if n > 1:
            for o in outs:
                o.div_(n)
    else:
        blobs = coll.all_gather(_pack(payloads))
        per_rank = [_unpack(blob, payloads, r) for r, blob in enumerate(blobs)]
        outs = [comp.combine([replace(p, parts=parts[i]) for parts in per_rank],
                             torch.zeros(p.numel, dtype=torch.float32, device=job.buffer.device))
                for i, p in enumerate(payloads)]
    for t, o in zip(job.tensors, outs):
        t.copy_(o.view(t.shape))


def _all_reduce_parts(payloads, coll) -> list[tuple]:
    """All parts summed over ranks: one all-reduce per dtype of the concatenated parts."""
    by_dtype: dict = {}
    for i, p in enumerate(payloads):
        for j, part in enumerate(p.parts):
            by_dtype.setdefault(part.dtype, []).append((i, j, part))
    out = [[None] * len(p.parts) for p in payloads]
    for items in by_dtype.values():
        flat = torch.cat([part.reshape(-1) for _, _, part in items])
        summed = coll.all_reduce(flat)
        off = 0
        for i, j, part in items:
            out[i][j] = summed[off:off + part.numel()]
            off += part.numel()
    return [tuple(o) for o in out]


def _pack(payloads) -> torch.Tensor:
    """One uint8 tensor: per payload its shape and part lengths (int64), then its parts' bytes."""
    dev = payloads[0].parts[0].device if payloads and payloads[0].parts else torch.device("cpu")
    pieces = []
    for p in payloads:
        hdr = torch.tensor([*p.shape, *(q.numel() for q in p.parts)], dtype=torch.int64)
        pieces.append(hdr.to(dev).view(torch.uint8))
        pieces += [q.contiguous().view(-1).view(torch.uint8) for q in p.parts]
    return torch.cat(pieces) if pieces else torch.empty(0, dtype=torch.uint8, device=dev)


def _unpack(blob: torch.Tensor, payloads, rank: int) -> list[tuple]:
    """Rank ``rank``'s parts from its packed ``blob``, read against this rank's payloads (same layout)."""
    out, off = [], 0
    for i, p in enumerate(payloads):
        k = len(p.shape) + len(p.parts)
        hdr = blob[off:off + 8 * k].clone().view(torch.int64).tolist()
        off += 8 * k
        if tuple(hdr[:len(p.shape)]) != tuple(p.shape):
            raise RuntimeError(f"lowbw hook: rank {rank} sent tensor {i} of shape {tuple(hdr[:len(p.shape)])}, "
                               f"this rank has {tuple(p.shape)} (the ranks' models differ)")
        parts = []
        for q, numel in zip(p.parts, hdr[len(p.shape):]):
            nb = numel * q.element_size()
            parts.append(blob[off:off + nb].clone().view(q.dtype))
            off += nb
        out.append(tuple(parts))
    return out


def make_hook(compressor="none", algorithm: str = "native", group=None, timeout=None, chunk_bytes=None,
              seed: int | None = None, granularity: str = "auto", gather: str = "auto", module=None, **params):
    """``(state, hook)`` for ``ddp_model.register_comm_hook(state, hook)``.

    ``compressor``: a ``lowbw.compress`` compressor or a registered name (with ``**params`` for ``make``).
    ``algorithm``: the all-reduce (``lowbw.comm.ALGORITHMS``; ``native`` = torch's). ``gather``: the path of
    all-gathered payloads: ``ring`` (ours), ``native`` (gloo's), ``auto`` (ring; measured faster).
    ``granularity``: ``param`` (each parameter's gradient on its own), ``bucket`` (DDP's flat bucket),
    ``auto`` (bucket for elementwise compressors, else param). ``module``: the model, to name each
    parameter's state after it (else ``param<k>``). ``seed``: seeds this worker's compressor State (give
    each rank its own for stochastic compressors, e.g. ``base + rank``). ``timeout``: seconds per wait.
    """

    check_algorithm(algorithm, ALLREDUCE_ALGORITHMS)
    if granularity not in GRANULARITIES:
        raise ValueError(f"make_hook: granularity={granularity!r}; allowed: {', '.join(GRANULARITIES)}")
    if gather not in GATHERS:
        raise ValueError(f"make_hook: gather={gather!r}; allowed: {', '.join(GATHERS)}")
    comp = resolve(compressor, **params)
    st = HookState(comp, algorithm, group, timeout, chunk_bytes, granularity, gather, cstate=State(seed))
    if module is not None:
        st.names = {id(p): name for name, p in module.named_parameters()}
    return st, lowbw_hook


compressor_hook = make_hook


@dataclass
class HookTimer:
    """What :func:`timed_hook` counts; the caller resets it per step."""

    seconds: float = 0.0  # wall seconds inside the hook's calls (on the thread of the backward pass)


def timed_hook(hook):
    """``(timed, timer)``: ``hook`` wrapped so that each call adds its seconds to ``timer.seconds``, with the
    ``(state, bucket)`` signature DDP's ``register_comm_hook`` checks. A step's wall time less these seconds
    and :attr:`HookStats.busy_s` is what DDP's own work and the model's computation took."""
    timer = HookTimer()

    def timed(state, bucket):
        t0 = time.perf_counter()
        try:
            return hook(state, bucket)
        finally:
            timer.seconds += time.perf_counter() - t0

    return timed, timer
