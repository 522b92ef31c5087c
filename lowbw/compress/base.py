"""The compressor interface: ``Payload``, ``Compressor``, ``State``, ``ErrorFeedback`` (the registry is
:mod:`lowbw.compress.registry`).

Contract (every compressor in ``lowbw.compress`` follows it):

* ``compress(tensor, name="", state=None) -> Payload`` and ``decompress(payload) -> Tensor`` (same shape and
  dtype as the input). Inputs may be fp32/fp16/bf16/fp64, any shape, any size (0 included), CPU or CUDA;
  the math runs in fp32. A payload never aliases the input tensor.
* ``Payload.parts`` are the 1-D tensors that cross the wire; ``Payload.nbytes`` is exactly their bytes plus
  the header (8 bytes per dimension of the original shape and 8 bytes per part: its length). ``meta`` holds
  plain values every rank derives identically (a shared seed, a step counter): never sent, never counted.
* Non-finite inputs (NaN or +-Inf anywhere) raise :class:`NonFiniteError` (a ``ValueError``); nothing is
  passed through silently. The check costs one ``sum`` over the tensor.
* State (error-feedback residuals, DGC momentum, PowerSGD's P/Q) lives in a :class:`State`, keyed by tensor
  name: one compressor object serves many tensors and many workers (one ``State`` per worker). With
  ``state=None`` the compressor's own default state is used (handy for one worker).
* ``aggregate(tensor, coll, name, state)`` returns the average over ranks of what every rank's payload
  decompresses to, talking only to the :class:`~lowbw.compress.protocol.Collective` protocol: summable
  payloads are all-reduced and decompressed once (divided by N); the rest are all-gathered part by part
  (parts may be empty on some ranks) and decompressed-and-averaged in rank order (deterministic).
* Batched path (the ``sim`` backend holds all ranks in one process): ``compress_batch(xs, name, states)``,
  ``decompress_batch(payloads)`` and ``aggregate_batch(xs, coll, name, states)`` take row i of ``xs``
  (shape ``[N, *shape]``) as rank i's tensor and ``states[i]`` as its State, and give exactly (bit for bit)
  what the per-tensor calls give rank by rank: the same payloads, decoded values, residuals and random streams.
  Compressors with ``batched = True`` run them as tensor operations over all rows at once (falling back to a
  row loop inside where a case is not batched: stochastic rounding, sub-byte packing, ties at the top-k
  threshold...); ``aggregate_batch`` talks to a :class:`BatchCollective` (the ranks' collective calls, made
  once for all rows) and returns the average every rank receives (the same on every rank).
* Rounds: ``aggregate``/``aggregate_batch`` run the generators ``rounds``/``rounds_batch``, which yield a
  :class:`~lowbw.compress.rounds.Request` per round of communication; a bucket of tensors runs theirs
  together, one packed call per round (:mod:`lowbw.comm.packing`), with each tensor's arithmetic
  unchanged. A compressor that overrides ``aggregate`` itself (DeMo, AR-Top-k) is not packed (``packs``).
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar, Protocol

import numpy as np
import torch
from torch import Tensor

from lowbw.compress.protocol import Collective
from lowbw.compress.rounds import Request, Rounds, run_alone

__all__ = [
    "Payload",
    "Compressor",
    "BatchCollective",
    "State",
    "ErrorFeedback",
    "NonFiniteError",
    "HEADER_BYTES_PER_DIM",
    "HEADER_BYTES_PER_PART",
]

HEADER_BYTES_PER_DIM = 8  # the original shape, one int64 per dimension
HEADER_BYTES_PER_PART = 8  # the length of each wire part, one int64

FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64)


class NonFiniteError(ValueError):
    """The input to a compressor contains NaN or +-Inf."""


@dataclass(frozen=True)
class Payload:
    """What one rank sends for one tensor.

    ``parts``: 1-D tensors on the wire (values, indices, scales, packed codes...).
    ``shape``/``dtype``: of the original tensor (decompress restores both).
    ``meta``: values all ranks agree on without sending them (shared seed, step); not counted in ``nbytes``.
    """

    parts: tuple[Tensor, ...]
    shape: torch.Size
    dtype: torch.dtype
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def data_nbytes(self) -> int:
        """Bytes of the parts alone (what a collective carries)."""
        return sum(p.numel() * p.element_size() for p in self.parts)

    @property
    def header_nbytes(self) -> int:
        return HEADER_BYTES_PER_DIM * len(self.shape) + HEADER_BYTES_PER_PART * len(self.parts)

    @property
    def nbytes(self) -> int:
        """Exact bytes on the wire: parts + header (shape and part lengths)."""
        return self.data_nbytes + self.header_nbytes

    @property
    def numel(self) -> int:
        return math.prod(self.shape)


class BatchCollective(Protocol):
    """The collective calls of all ``world_size`` ranks of a group, made once for all of them (``sim``).

    Row i of an argument is rank i's tensor. Implementations give exactly what every rank of the per-rank
    :class:`~lowbw.compress.protocol.Collective` would receive, and record one call per rank.
    """

    world_size: int

    def all_reduce(self, rows: Tensor) -> Tensor:
        """The elementwise sum of the rows (``rows.shape[1:]``), as every rank receives it."""
        ...

    def all_gather(self, rows: Tensor) -> Tensor:
        """Every rank's 1-D part (``rows``: ``[N, L]``, equal lengths), in rank order, as every rank receives it."""
        ...


class State:
    """Per-worker mutable state of compressors, keyed by tensor name.

    ``state[name]`` is a dict the compressors write into under namespaced keys (``"ef.residual"``,
    ``"dgc.u"``...). ``state.shared`` holds name-independent entries (PowerSGD's random stream).
    ``seed``: if given, stochastic compressors draw from this state's own ``torch.Generator`` (one per device,
    seeded with ``seed``), so results do not depend on the global RNG or on thread interleaving; give each
    worker its own seed (e.g. ``base_seed + rank``). If ``None`` the global torch RNG is used.
    """

    def __init__(self, seed: int | None = None):
        self.seed = seed
        self._by_name: dict[str, dict[str, Any]] = {}
        self.shared: dict[str, Any] = {}
        self._generators: dict[str, torch.Generator] = {}

    def __getitem__(self, name: str) -> dict[str, Any]:
        d = self._by_name.get(name)
        if d is None:
            d = self._by_name[name] = {}
        return d

    def __contains__(self, name: str) -> bool:
        return name in self._by_name

    def names(self) -> list[str]:
        return list(self._by_name)

    def reset(self, name: str | None = None) -> None:
        """Forget everything (or one tensor's entries)."""
        if name is None:
            self._by_name.clear()
            self.shared.clear()
        else:
            self._by_name.pop(name, None)

    def state_dict(self) -> dict[str, Any]:
        """This state as plain data (tensors, numbers, strings, lists, dicts), so that a checkpoint loads with
        ``torch.load(weights_only=True)``: the generators as their state tensors, a numpy ``RandomState`` in
        ``shared`` (PowerSGD's stream) as its MT19937 state."""
        return {"seed": self.seed, "by_name": {k: dict(v) for k, v in self._by_name.items()},
                "shared": {k: _plain(v) for k, v in self.shared.items()},
                "generators": {k: g.get_state() for k, g in self._generators.items()}}

    def load_state_dict(self, s: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` gave (the streams continue exactly where they were saved)."""
        self.seed = s["seed"]
        self._by_name = {k: dict(v) for k, v in s["by_name"].items()}
        self.shared = {k: _unplain(v) for k, v in s["shared"].items()}
        self._generators = {}
        for k, st in s["generators"].items():
            g = self._generators[k] = torch.Generator(device=k)
            g.set_state(st.cpu())  # a generator state is a CPU byte tensor, wherever the checkpoint was mapped

    def generator(self, device: torch.device) -> torch.Generator | None:
        """The generator stochastic compressors draw from on ``device`` (``None``: the global RNG)."""
        if self.seed is None:
            return None
        key = str(device)
        g = self._generators.get(key)
        if g is None:
            g = self._generators[key] = torch.Generator(device=device)
            g.manual_seed(self.seed)
        return g


_MT19937 = "numpy.MT19937"  # the tag of a numpy RandomState in State.state_dict's ``shared``


def _plain(v: Any) -> Any:
    """A ``State.shared`` value as plain data: a numpy ``RandomState`` becomes its legacy MT19937 state
    (key words as int64, position, cached Gaussian); anything else is kept as it is."""
    if isinstance(v, np.random.RandomState):
        name, keys, pos, has_gauss, gauss = v.get_state(legacy=True)
        assert name == "MT19937"
        return {"kind": _MT19937, "keys": torch.from_numpy(keys.astype(np.int64)), "pos": int(pos),
                "has_gauss": int(has_gauss), "cached_gaussian": float(gauss)}
    return v


def _unplain(v: Any) -> Any:
    """The inverse of :func:`_plain`."""
    if isinstance(v, dict) and v.get("kind") == _MT19937:
        rng = np.random.RandomState()
        rng.set_state(("MT19937", v["keys"].cpu().numpy().astype(np.uint32), v["pos"], v["has_gauss"],
                       v["cached_gaussian"]))
        return rng
    return v


def check_finite_input(x: Tensor) -> None:
    """Raise NonFiniteError if ``x`` holds NaN/Inf: one sum (NaN/Inf make it non-finite); the exact, slower
    check only when the sum is not finite (which a finite input can also cause, by overflowing)."""
    if x.numel() == 0:
        return
    s = x.sum()  # in x's dtype: no upcast copy of the tensor
    if not torch.isfinite(s):
        bad = ~torch.isfinite(x)
        if bool(bad.any()):
            nbad = int(bad.sum())
            raise NonFiniteError(
                f"input has {nbad} non-finite value(s) (NaN/Inf) out of {x.numel()}; compressors do not pass "
                "them through. Skip the step (e.g. a GradScaler's inf check) before compressing."
            )


def name_seed(seed: int, name: str, step: int) -> int:
    """A 63-bit seed every rank derives identically from (seed, tensor name, step)."""
    h = zlib.crc32(name.encode()) & 0xFFFFFFFF
    return (int(seed) * 1_000_003 + h * 7919 + int(step) * 2_654_435_761) % (2**63 - 1)


class Compressor:
    """Base class. Subclasses implement ``_encode`` and ``decode`` on flat fp32 tensors.

    ``_encode(x, name, state, shape) -> (parts, meta)``: ``x`` is the flat fp32 input (possibly a view of the
    caller's tensor: never modify it, never return views of it), ``shape`` the original shape.
    ``decode(payload) -> flat fp32 tensor``. ``decode_add(payload, out)`` adds the decoded tensor into ``out``
    and ``_subtract_decoded(payload, acc)`` subtracts it (override both for sparse payloads).
    """

    name: ClassVar[str] = "?"
    summable: ClassVar[bool] = False
    #: True for compressors with their own memory (DGC, PowerSGD, ARTopk): ErrorFeedback refuses to wrap them
    has_own_memory: ClassVar[bool] = False
    #: True where every rank's payload parts have lengths set by the tensor's shape alone (top-k): a
    #: bucket's all-gather then needs no size exchange (lowbw.comm.packing)
    fixed_size: ClassVar[bool] = False
    #: memory traffic of one compress + decompress of n fp32 entries, in passes over the gradient (4 n bytes):
    #: each full read or write of an n-entry fp32 tensor (input, temporaries, state, output) counts 1, a
    #: 16-bit one 0.5, an 8-bit one 0.25; payloads of k << n entries count nothing. A device's roofline
    #: (:mod:`lowbw.advise.device`) times a compressor it has no measurement of as passes x 4 n / bandwidth.
    passes: ClassVar[float] = 4.0
    #: the passes of ``_subtract_decoded`` (error feedback's new residual): a dense decode (write 1) and the
    #: subtraction (read 2, write 1); sparse payloads override it with 0 (a scatter of k entries)
    subtract_passes: ClassVar[float] = 4.0
    #: where a run's ``grad_clip`` applies (lowbw.train.schemes.synchronous): "aggregate", the averaged
    #: gradient after the exchange (DDP: ``clip_grad_norm_`` after backward, whose hook did the all-reduce), or
    #: "worker", each worker's raw gradient before compression, for compressors whose aggregate is an update
    #: direction of a size the method fixes (a sign: clipping it would shrink every step to lr / ||sign||, while
    #: the references clip the raw gradient and never rescale the signed update)
    clip_at: ClassVar[str] = "aggregate"

    def __init__(self) -> None:
        self._default_state: State | None = None
        self.params: dict[str, Any] = {}

    # ----- public API -------------------------------------------------------------------------------
    def compress(self, tensor: Tensor, name: str = "", state: State | None = None) -> Payload:
        x = self._prepare(tensor)
        parts, meta = self._encode(x, name, self._state(state), tensor.shape)
        return Payload(tuple(parts), tensor.shape, tensor.dtype, meta)

    def decompress(self, payload: Payload) -> Tensor:
        return self.decode(payload).to(payload.dtype).view(payload.shape)

    def aggregate(self, tensor: Tensor, coll: Collective, name: str = "", state: State | None = None) -> Tensor:
        """Average over ranks of the decompressed payloads (see the module docstring): :meth:`rounds` run on
        ``coll``, one call per requested tensor."""
        return run_alone(self.rounds(tensor, name, state, coll.world_size), coll)

    def rounds(self, tensor: Tensor, name: str = "", state: State | None = None, world_size: int = 1) -> Rounds:
        """:meth:`aggregate` as a generator (:mod:`lowbw.compress.rounds`): yields each round's
        :class:`~lowbw.compress.rounds.Request`, receives its results, returns the average over
        ``world_size`` ranks. A bucket's tensors run theirs together, one call per round (``packed``)."""
        payload = self.compress(tensor, name, state)
        return (yield from self._payload_rounds(payload, world_size))

    @property
    def packs(self) -> bool:
        """Whether :meth:`rounds` is this compressor's exchange (a bucket packs it); False where a subclass
        talks to the collective in an ``aggregate`` of its own (DeMo, AR-Top-k): a bucket then calls that per
        tensor."""
        cls = type(self)
        return cls.aggregate is Compressor.aggregate and cls.aggregate_batch is Compressor.aggregate_batch

    # ----- batched path (all ranks' rows of one tensor; see the module docstring) -------------------
    #: True where compress_batch/aggregate_batch run as batched tensor operations (else: per-row loops)
    batched: ClassVar[bool] = False

    def compress_batch(self, xs: Tensor, name: str = "", states: Sequence[State] | None = None) -> list[Payload]:
        """``[compress(xs[i], name, states[i]) for i]``, computed over all rows at once where ``batched``."""
        states = self._states(states, xs)
        if not self.batched:
            return [self.compress(xs[i], name, states[i]) for i in range(xs.shape[0])]
        shape = xs.shape[1:]
        parts, metas = self._encode_batch(self._prepare_batch(xs), name, states, shape)
        return [Payload(tuple(p[i] for p in parts), shape, xs.dtype, metas[i]) for i in range(xs.shape[0])]

    def decompress_batch(self, payloads: Sequence[Payload]) -> Tensor:
        """``torch.stack([decompress(p) for p in payloads])`` (payloads of one tensor: same shape and meta)."""
        if not self.batched or not payloads:
            return torch.stack([self.decompress(p) for p in payloads])
        ref = payloads[0]
        parts = [torch.stack([p.parts[j] for p in payloads]) for j in range(len(ref.parts))]
        return self._decode_batch(parts, ref).to(ref.dtype).view(len(payloads), *ref.shape)

    def aggregate_batch(self, xs: Tensor, coll: BatchCollective, name: str = "",
                        states: Sequence[State] | None = None) -> Tensor:
        """The average over the group of the rows' decompressed payloads, as every rank's :meth:`aggregate`
        returns it (``xs.shape[1:]``); the same calls on ``coll`` as the ranks make on their collectives."""
        if not self.batched:
            raise TypeError(f"{self!r} has no batched path (batched=False): aggregate rank by rank")
        return run_alone(self.rounds_batch(xs, name, states, coll.world_size), coll)

    def rounds_batch(self, xs: Tensor, name: str = "", states: Sequence[State] | None = None,
                     world_size: int = 1) -> Rounds:
        """:meth:`aggregate_batch` as a generator (as :meth:`rounds`; requests carry ``[N, ...]`` rows)."""
        states = self._states(states, xs)
        shape, n = xs.shape[1:], world_size
        parts, metas = self._encode_batch(self._prepare_batch(xs), name, states, shape)
        ref = Payload(tuple(p[0] for p in parts), shape, xs.dtype, metas[0])
        if self.summable:
            summed = yield Request("all_reduce", tuple(parts))
            out = self.decode(replace(ref, parts=tuple(summed)))
            if n > 1:
                out = out / n
        else:
            gathered = yield Request("all_gather", tuple(parts), self.fixed_size)
            out = torch.zeros(ref.numel, dtype=torch.float32, device=xs.device)
            self._decode_add_rows(gathered, ref, out)
            if n > 1:
                out /= n
        return out.to(xs.dtype).view(shape)

    def _states(self, states: Sequence[State] | None, xs: Tensor) -> list[State]:
        if states is None:
            if xs.shape[0] != 1:
                raise ValueError(f"states=None: give one State per row ({xs.shape[0]} rows)")
            states = [self._state(None)]
        if len(states) != xs.shape[0]:
            raise ValueError(f"states: need one per row ({xs.shape[0]}), got {len(states)}")
        return list(states)

    def _prepare_batch(self, xs: Tensor) -> Tensor:
        """``xs`` ``[N, *shape]`` -> ``[N, n]`` fp32 (possibly a view: never modify it), checked like ``_prepare``."""
        if not isinstance(xs, Tensor) or xs.dim() < 1:
            raise TypeError(f"expected a torch.Tensor of shape [N, ...], got {type(xs).__name__}")
        x = self._prepare(xs)  # this class's input checks, on all rows at once
        return x.view(xs.shape[0], -1)

    def _encode_batch(self, x: Tensor, name: str, states: Sequence[State], shape: torch.Size
                      ) -> tuple[list[Tensor], list[dict[str, Any]]]:
        """``_encode`` of every row of ``x`` ``[N, n]``: parts stacked ``[N, L]`` (equal lengths), metas per row.
        This default is the row loop; batched compressors override it."""
        enc = [self._encode(x[i], name, states[i], shape) for i in range(x.shape[0])]
        nparts = len(enc[0][0])
        return [torch.stack([e[0][j] for e in enc]) for j in range(nparts)], [e[1] for e in enc]

    def _decode_batch(self, parts: list[Tensor], ref: Payload) -> Tensor:
        """``decode`` of every row (``parts[j][i]``: row i's part j; ``ref``: row 0's payload) -> ``[N, n]``."""
        N = parts[0].shape[0] if parts else 0
        return torch.stack([self.decode(replace(ref, parts=tuple(p[i] for p in parts))) for i in range(N)])

    def _decode_add_rows(self, parts: list[Tensor], ref: Payload, out: Tensor) -> None:
        """``out += decode(row i)`` for i = 0, 1, ... in rank order (as ``_payload_rounds`` does)."""
        for d in self._decode_batch(parts, ref):
            out += d

    def _subtract_decoded_rows(self, parts: list[Tensor], ref: Payload, acc: Tensor) -> None:
        """``acc[i] -= decode(row i)`` in place for every row of ``acc`` ``[N, n]`` (``_subtract_decoded``)."""
        acc -= self._decode_batch(parts, ref)

    # ----- helpers ----------------------------------------------------------------------------------
    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.params.items())
        return f"{type(self).__name__}({args})"

    def _state(self, state: State | None) -> State:
        if state is not None:
            return state
        if self._default_state is None:
            self._default_state = State()
        return self._default_state

    @staticmethod
    def _prepare(tensor: Tensor) -> Tensor:
        if not isinstance(tensor, Tensor):
            raise TypeError(f"expected a torch.Tensor, got {type(tensor).__name__}")
        if tensor.dtype not in FLOAT_DTYPES:
            raise TypeError(f"expected a floating tensor (fp32/fp16/bf16/fp64), got {tensor.dtype}")
        x = tensor.detach().reshape(-1)
        if x.dtype != torch.float32:
            x = x.float()
        check_finite_input(x)
        return x

    def _encode(self, x: Tensor, name: str, state: State, shape: torch.Size) -> tuple[list[Tensor], dict[str, Any]]:
        raise NotImplementedError

    def decode(self, payload: Payload) -> Tensor:
        """The payload's values as a flat fp32 tensor of ``payload.numel`` (``decompress`` before the reshape
        and cast); the parts may be sums over ranks where the compressor is ``summable``."""
        raise NotImplementedError

    def decode_add(self, payload: Payload, out: Tensor) -> None:
        """``out += decode(payload)`` in place on a flat fp32 ``out`` (sparse compressors scatter-add)."""
        out += self.decode(payload)

    def _subtract_decoded(self, payload: Payload, acc: Tensor) -> None:
        """``acc -= decode(payload)`` in place (sparse compressors override with an indexed update)."""
        acc -= self.decode(payload)

    def _payload_rounds(self, payload: Payload, n: int) -> Rounds:
        """The exchange of a compressed ``payload`` over ``n`` ranks: summable parts all-reduced and decoded
        once (/ n); the rest all-gathered and decoded-and-summed in rank order (/ n)."""
        if self.summable:
            summed = yield Request("all_reduce", payload.parts)
            out = self.decode(replace(payload, parts=tuple(summed)))
            if n > 1:
                out = out / n
        else:
            gathered = yield Request("all_gather", payload.parts, self.fixed_size)
            device = payload.parts[0].device if payload.parts else torch.device("cpu")
            out = torch.zeros(payload.numel, dtype=torch.float32, device=device)
            self.combine([replace(payload, parts=tuple(g[r] for g in gathered)) for r in range(n)], out)
        return out.to(payload.dtype).view(payload.shape)

    def combine(self, payloads: list[Payload], out: Tensor) -> Tensor:
        """The group's average of the gathered payloads of one tensor (rank order) into ``out``, a zeroed flat
        fp32 tensor: here the decoded payloads summed in rank order and divided by their number. A compressor
        whose authors aggregate otherwise (SparseLoCo's mean over the senders of each index) overrides it."""
        for p in payloads:
            self.decode_add(p, out)
        if len(payloads) > 1:
            out /= len(payloads)
        return out


class ErrorFeedback(Compressor):
    """Error feedback around any compressor: send C(g + e), keep e <- g + e - D(C(g + e)).

    The residual is fp32 and lives in ``state[name]["ef.residual"]``. Mass is conserved: the decompressed
    payload plus the new residual equals the input plus the old residual.
    """

    def __init__(self, inner: Compressor):
        super().__init__()
        if not isinstance(inner, Compressor):
            raise TypeError(f"ErrorFeedback wraps a Compressor, got {type(inner).__name__}")
        if isinstance(inner, ErrorFeedback):
            raise ValueError("ErrorFeedback: the compressor already has error feedback")
        if inner.has_own_memory:
            raise ValueError(f"ErrorFeedback: {inner.name} keeps its own memory (configure it with its parameters)")
        self.inner = inner
        self.params = dict(inner.params)

    @property
    def summable(self) -> bool:  # type: ignore[override]
        return self.inner.summable

    @property
    def fixed_size(self) -> bool:  # type: ignore[override]
        return self.inner.fixed_size

    @property
    def passes(self) -> float:  # type: ignore[override]
        """The inner compressor's passes, plus g + e (read 2, write 1) and the new residual's subtraction."""
        return self.inner.passes + 3.0 + self.inner.subtract_passes

    @property
    def clip_at(self) -> str:  # type: ignore[override]
        return self.inner.clip_at

    @property
    def name(self) -> str:  # type: ignore[override]
        return self.inner.name

    def __repr__(self) -> str:
        return f"ErrorFeedback({self.inner!r})"

    def _encode(self, x: Tensor, name: str, state: State, shape: torch.Size) -> tuple[list[Tensor], dict[str, Any]]:
        slot = state[name]
        r = slot.get("ef.residual")
        if r is None or r.shape != x.shape or r.device != x.device:
            corrected = x.clone()
        else:
            corrected = r.add_(x)  # reuse the residual's memory for g + e
        try:
            payload_parts, meta = self.inner._encode(corrected, name, state, shape)
        except BaseException:
            if corrected is r:
                r.sub_(x)  # leave the residual as it was
            raise
        payload = Payload(tuple(payload_parts), shape, torch.float32, meta)
        self.inner._subtract_decoded(payload, corrected)  # corrected -> new residual, in place
        slot["ef.residual"] = corrected
        return list(payload_parts), meta

    def decode(self, payload: Payload) -> Tensor:
        return self.inner.decode(payload)

    def decode_add(self, payload: Payload, out: Tensor) -> None:
        self.inner.decode_add(payload, out)

    @property
    def batched(self) -> bool:  # type: ignore[override]
        return self.inner.batched

    def _encode_batch(self, x: Tensor, name: str, states: Sequence[State], shape: torch.Size
                      ) -> tuple[list[Tensor], list[dict[str, Any]]]:
        """``_encode`` of every row: corrected = residual + x, the inner rows' encoding, new residual =
        corrected - decoded (row i's residual is stored as a view of this step's ``[N, n]`` batch)."""
        slots = [st[name] for st in states]
        res = [s.get("ef.residual") for s in slots]
        ok = [r is not None and r.shape == x.shape[1:] and r.device == x.device for r in res]
        if all(ok):
            corrected = torch.stack(res).add_(x)
        elif not any(ok):
            corrected = x.clone()
        else:
            corrected = torch.stack([r + xi if o else xi.clone() for r, xi, o in zip(res, x, ok, strict=True)])
        parts, metas = self.inner._encode_batch(corrected, name, states, shape)
        ref = Payload(tuple(p[0] for p in parts), shape, torch.float32, metas[0])
        self.inner._subtract_decoded_rows(parts, ref, corrected)
        for i, slot in enumerate(slots):
            slot["ef.residual"] = corrected[i]
        return parts, metas

    def _decode_batch(self, parts: list[Tensor], ref: Payload) -> Tensor:
        return self.inner._decode_batch(parts, ref)

    def _decode_add_rows(self, parts: list[Tensor], ref: Payload, out: Tensor) -> None:
        self.inner._decode_add_rows(parts, ref, out)

    def residual(self, state: State | None, name: str = "") -> Tensor | None:
        """The current residual for ``name`` (flat fp32), or None before the first step."""
        return self._state(state)[name].get("ef.residual")
