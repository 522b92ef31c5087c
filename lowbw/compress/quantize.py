"""Quantizers: ``none``, ``fp16``, ``bf16``, ``blockwise`` (8/16-bit, linear or non-linear code), ``qsgd``,
``terngrad`` and ``twobit``.

All elementwise pipelines run over cache-sized chunks of the tensor (see :func:`lowbw.compress._bits.chunks`)
and never loop in Python over blocks, so they stay well above 0.3 GB/s of input on 2 CPU cores.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

from lowbw.compress._bits import chunk_rows, chunks, pack, unpack
from lowbw.compress.base import Compressor, NonFiniteError, Payload, State
from lowbw.compress.checks import check_bool, check_choice, check_float, check_int
from lowbw.compress.registry import register
from lowbw.compress.rounds import Request, Rounds

__all__ = ["Cast", "Blockwise", "QSGD", "TernGrad", "TwoBit"]


# Elements per chunk on CPU (8 MiB of fp32). L2-sized chunks would be faster in a fresh process, but every op
# is an OpenMP parallel region, and once a second thread of the process has used OpenMP (a DDP hook's
# callback, the threaded sim) libgomp throttles its spin-waits and each region costs tens of microseconds
# more: fewer, larger chunks keep that worst case close to the best.
CPU_CHUNK = 1 << 21


def _warm_up_sqrt() -> None:
    """Call torch.sqrt once at import. On this project's 2-core CPU machines (torch 2.13, AVX-512) the first
    float32 ``torch.sqrt`` of a process returned results with relative errors up to 3e-4 in about one process
    in ten (later calls: correctly rounded), which moved some non-linear codes by one level. A first call on a
    throw-away tensor (small, and large enough to run on every intra-op thread) keeps real data off it."""
    torch.sqrt(torch.full((64,), 2.0))
    torch.sqrt(torch.full((1 << 16,), 2.0))


_warm_up_sqrt()


def chunk_target(device: torch.device) -> int:
    """Elements per chunk of the chunked elementwise passes on ``device``: L2-sized on CPU, unbounded on
    accelerators (where one kernel launch per op is best)."""
    return CPU_CHUNK if device.type == "cpu" else 1 << 62


def row_views(x: Tensor, block: int) -> list[tuple[int, Tensor]]:
    """(first block index, 2-D view) pairs covering ``x``: the full blocks, then the short tail block."""
    n = x.numel()
    nfull = n // block
    out: list[tuple[int, Tensor]] = []
    if nfull:
        out.append((0, x[: nfull * block].view(nfull, block)))
    if n - nfull * block:
        out.append((nfull, x[nfull * block :].view(1, n - nfull * block)))
    return out


def _has_tiny(scales: Tensor, tiny: float = 1e-20) -> bool:
    """Whether a positive scale is below ``tiny`` (where per-block reciprocal factors lose precision)."""
    return bool(((scales > 0) & (scales < tiny)).any()) if scales.numel() else False


def _raise_nonfinite(x: Tensor) -> None:
    nbad = int((~torch.isfinite(x)).sum())
    raise NonFiniteError(f"input has {nbad} non-finite value(s) (NaN/Inf) out of {x.numel()}; compressors do "
                         "not pass them through. Skip the step (e.g. a GradScaler's inf check) before compressing.")


# ---------------------------------------------------------------------------------------------------------
class Cast(Compressor):
    """Send the tensor in another float format: ``none`` (fp32), ``fp16``, ``bf16``. Summable.

    ``fp16``: a finite input beyond fp16's range (|x| > 65504) raises ValueError, so it never becomes a silent
    Inf. ``aggregate`` divides by N before the cast (as torch's fp16 hook does), so the all-reduced sum of N
    fp16 values cannot overflow either.
    """

    summable = True
    # fp16/bf16: read 1, write 0.5; decode read 0.5, write 1 (none: the cast is a no-op copy, read 1 write 1)
    passes = 3.0
    _WIRE = {"none": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}

    def __init__(self, kind: str = "none"):
        super().__init__()
        self.kind = check_choice("Cast", "kind", kind, tuple(self._WIRE))
        self.name = kind  # type: ignore[misc]
        self.params = {"kind": kind}
        self.wire = self._WIRE[kind]

    batched = True

    def _check_range(self, x: Tensor) -> None:
        if self.wire == torch.float16 and x.numel():
            lo, hi = torch.aminmax(x)
            m = max(float(hi), -float(lo))
            if m > 65504.0:
                raise ValueError(f"fp16: input magnitude {m:.4g} exceeds fp16's range (65504); use bf16 or scale it")

    def _encode(self, x: Tensor, name: str, state: State, shape: torch.Size) -> tuple[list[Tensor], dict[str, Any]]:
        self._check_range(x)
        return [x.to(self.wire, copy=True)], {}

    def decode(self, payload: Payload) -> Tensor:
        return payload.parts[0].to(torch.float32, copy=True)  # never the payload's own memory

    def _encode_batch(self, x: Tensor, name: str, states, shape: torch.Size) -> tuple[list[Tensor], list[dict]]:
        self._check_range(x)
        return [x.to(self.wire, copy=True)], [{} for _ in range(x.shape[0])]

    def _decode_batch(self, parts: list[Tensor], ref: Payload) -> Tensor:
        return parts[0].to(torch.float32, copy=True)

    def rounds(self, tensor: Tensor, name: str = "", state: State | None = None, world_size: int = 1) -> Rounds:
        """Divide by n before the cast (as torch's fp16 hook), all-reduce the cast values."""
        n = world_size
        payload = self.compress(tensor / n if n > 1 else tensor, name, state)
        (summed,) = yield Request("all_reduce", (payload.parts[0],))
        return summed.to(payload.dtype).view(payload.shape)

    def rounds_batch(self, xs: Tensor, name: str = "", states=None, world_size: int = 1) -> Rounds:
        n = world_size
        ys = xs / n if n > 1 else xs
        parts, _ = self._encode_batch(self._prepare_batch(ys), name, self._states(states, xs), xs.shape[1:])
        (summed,) = yield Request("all_reduce", (parts[0],))
        return summed.to(ys.dtype).view(xs.shape[1:])


register("none", family="dense", bench=({},), doc="no compression: fp32 on the wire")(lambda: Cast("none"))
register("fp16", family="precision", bench=({},), doc="cast to float16 (torch's fp16 hook)")(lambda: Cast("fp16"))
register("bf16", family="precision", bench=({},), doc="cast to bfloat16 (torch's bf16 hook)")(lambda: Cast("bf16"))


# ---------------------------------------------------------------------------------------------------------
class Blockwise(Compressor):
    """Block-wise absmax quantization to 2, 4, 8 or 16 bits: one fp32 scale per block of ``block_size`` values.

    ``codebook="linear"``: levels ``k/L * absmax`` for k in [-L, L] (L = 1, 7, 127 or 32767 for 2, 4, 8, 16
    bits: 2L + 1 symmetric codes, so 0 is exact), equal-width bins. 2 and 4-bit codes are packed, 4 or 2 to
    a byte (the low-bit pseudo-gradients of DiLoCo-style methods).
    ``codebook="nonlinear"``: square-root companding, levels ``sign(k) (k/L)^2 * absmax``: bins are densest
    near zero, where gradient entries concentrate (the optimal point density for a density p is ~ p^(1/3);
    gradients are heavy-tailed and peaked at 0, and a square law approximates that with closed-form encode
    and decode — no table search). Relative L2 error at 8 bits, block 2048: 0.77% on N(0,1), ~0.85% on
    ResNet gradients, vs 1.25% / 1.31% for bitsandbytes' dynamic code.
    ``stochastic=True``: stochastic rounding between the two neighbouring levels with probabilities that make
    the decoded value unbiased (in value space, also for the non-linear code).
    A tail block shorter than ``block_size`` gets its own scale. Wire: codes (ceil(n * bits/8) bytes) +
    4 bytes per block.
    """

    LEVELS = {2: 1, 4: 7, 8: 127, 16: 32767}  # bits -> L

    def __init__(self, bits: int = 8, block_size: int = 2048, codebook: str = "nonlinear", stochastic: bool = False):
        super().__init__()
        self.bits = check_choice("blockwise", "bits", bits, tuple(self.LEVELS))
        self.block_size = check_int("blockwise", "block_size", block_size, 1)
        self.codebook = check_choice("blockwise", "codebook", codebook, ("linear", "nonlinear"))
        self.stochastic = check_bool("blockwise", "stochastic", stochastic)
        self.params = {"bits": bits, "block_size": block_size, "codebook": codebook, "stochastic": stochastic}
        self.levels = self.LEVELS[bits]
        self.code_dtype = torch.int16 if bits == 16 else torch.int8

    name = "blockwise"
    # absmax per block (read 1), scaled and rounded codes (read 1, write 1 fp32 temporary, 0.25 codes),
    # decode (codes 0.25, fp32 levels write 1, scale read 1 write 1)
    passes = 6.5

    @staticmethod
    def _prepare(tensor: Tensor) -> Tensor:  # the finite check happens on the block scales (free)
        if not isinstance(tensor, Tensor):
            raise TypeError(f"expected a torch.Tensor, got {type(tensor).__name__}")
        if not tensor.is_floating_point():
            raise TypeError(f"expected a floating tensor (fp32/fp16/bf16/fp64), got {tensor.dtype}")
        x = tensor.detach().reshape(-1)
        return x if x.dtype == torch.float32 else x.float()

    def _encode(self, x: Tensor, name: str, state: State, shape: torch.Size) -> tuple[list[Tensor], dict[str, Any]]:
        B, L = self.block_size, float(self.levels)
        scales = torch.empty(math.ceil(x.numel() / B), dtype=torch.float32, device=x.device)
        codes = torch.empty(x.numel(), dtype=self.code_dtype, device=x.device)
        gen = state.generator(x.device) if self.stochastic else None
        target = chunk_target(x.device)
        # at 2 bits both codes have the levels {-s, 0, s}: round to the nearest in value (the linear path)
        nonlinear = self.codebook == "nonlinear" and self.levels > 1
        top = L * L if nonlinear else L
        for b0, v in row_views(x, B):
            rows, cols = v.shape
            cv = codes[b0 * B : b0 * B + v.numel()].view(rows, cols)
            step = chunk_rows(rows, cols, target)
            a = torch.empty((step, cols), device=x.device)
            if self.stochastic:
                u = torch.empty_like(a)
                if nonlinear:
                    k, t = torch.empty_like(a), torch.empty_like(a)
            for i, j in chunks(rows, step):
                xs, ab, s = v[i:j], a[: j - i], scales[b0 + i : b0 + j]
                torch.abs(xs, out=ab)
                torch.amax(ab, dim=1, out=s)  # the block scales, computed while the chunk is in cache
                safe = torch.where(s > 0, s, torch.ones_like(s))[:, None]
                # x * (top / s) with a per-block factor; but divide by s where it is so small that top / s
                # could overflow (exact for subnormal scales too)
                fast = not _has_tiny(s)
                if nonlinear:  # -> L * (|x|/s) * L in [0, L^2]
                    ab.mul_(top / safe) if fast else ab.div_(safe).mul_(top)
                    if not self.stochastic:
                        ab.sqrt_().add_(0.5)  # round(sqrt(.)) via truncation below
                    else:
                        # level k = floor(sqrt(tL)); up with prob (tL - k^2)/(2k+1): unbiased in value space
                        kb, tb, ub = k[: j - i], t[: j - i], u[: j - i]
                        torch.sqrt(ab, out=kb).floor_()
                        torch.addcmul(ab, kb, kb, value=-1.0, out=ab)  # tL - k^2
                        torch.mul(kb, 2.0, out=tb).add_(1.0)
                        ab.div_(tb).clamp_(0.0, 1.0).add_(torch.rand(ub.shape, generator=gen, device=ub.device,
                                                                       out=ub)).floor_().add_(kb)
                    ab.copysign_(xs)
                else:
                    if fast:
                        torch.mul(xs, top / safe, out=ab)
                    else:
                        torch.div(xs, safe, out=ab).mul_(top)
                    if not self.stochastic:
                        ab.round_()
                    else:
                        ab.add_(torch.rand(ab.shape, generator=gen, device=ab.device, out=u[: j - i])).floor_()
                cv[i:j].copy_(ab)  # float -> int truncates toward zero
        if scales.numel() and not bool(torch.isfinite(scales).all()):
            _raise_nonfinite(x)
        if self.bits < 8:  # codes k in [-L, L] -> k + L in [0, 2L], packed
            codes = pack(codes.add_(self.levels).view(torch.uint8), self.bits)
        return [codes, scales], {}

    batched = True

    @staticmethod
    def _block_views(n: int, B: int) -> list[tuple[int, int, int]]:
        """(first element, elements per block, blocks) of the full blocks and the tail block of a row."""
        nfull = n // B
        out = [(0, B, nfull)] if nfull else []
        return out + ([(nfull * B, n - nfull * B, 1)] if n - nfull * B else [])

    def _encode_batch(self, x: Tensor, name: str, states, shape: torch.Size) -> tuple[list[Tensor], list[dict]]:
        """All rows' blocks in one pass (deterministic rounding, 8/16 bits); else the row loop. A row's blocks
        and their arithmetic are those of ``_encode``: bit-identical codes and scales."""
        N, n = x.shape
        if self.stochastic or self.bits < 8 or n == 0:
            return super()._encode_batch(x, name, states, shape)
        L = float(self.levels)
        nonlinear = self.codebook == "nonlinear" and self.levels > 1
        top = L * L if nonlinear else L
        codes, scales = [], []
        for a, cols, rows in self._block_views(n, self.block_size):
            v = x[:, a:a + cols * rows].reshape(N * rows, cols)
            ab = torch.abs(v)
            s = torch.amax(ab, dim=1)
            if _has_tiny(s):  # _encode divides per chunk there: keep its exact arithmetic
                return super()._encode_batch(x, name, states, shape)
            safe = torch.where(s > 0, s, torch.ones_like(s))[:, None]
            if nonlinear:
                ab.mul_(top / safe).sqrt_().add_(0.5).copysign_(v)
            else:
                torch.mul(v, top / safe, out=ab).round_()
            codes.append(ab.to(self.code_dtype).view(N, rows * cols))  # float -> int truncates toward zero
            scales.append(s.view(N, rows))
        codes_t, scales_t = (torch.cat(codes, 1), torch.cat(scales, 1)) if len(codes) > 1 else (codes[0], scales[0])
        if not bool(torch.isfinite(scales_t).all()):
            _raise_nonfinite(x)
        return [codes_t, scales_t], [{} for _ in range(N)]

    def _decode_batch(self, parts: list[Tensor], ref: Payload) -> Tensor:
        codes, scales = parts
        N, n = codes.shape[0], ref.numel
        if self.bits < 8 or _has_tiny(scales) or n == 0:
            return super()._decode_batch(parts, ref)
        fac = scales / (float(self.levels) ** 2 if self.codebook == "nonlinear" else float(self.levels))
        out, b0 = [], 0
        for a, cols, rows in self._block_views(n, self.block_size):
            o = codes[:, a:a + cols * rows].reshape(N * rows, cols).float()
            f = fac[:, b0:b0 + rows].reshape(N * rows, 1)
            o.mul_(f) if self.codebook != "nonlinear" else o.mul_(torch.abs(o).mul_(f))
            out.append(o.view(N, rows * cols))
            b0 += rows
        return torch.cat(out, 1) if len(out) > 1 else out[0]

    def decode(self, payload: Payload) -> Tensor:
        codes, scales = payload.parts
        B, L = self.block_size, float(self.levels)
        n = payload.numel
        if self.bits < 8:
            codes = unpack(codes, self.bits, n).view(torch.int8).sub(self.levels)
        out = torch.empty(n, dtype=torch.float32, device=codes.device)
        target = chunk_target(codes.device)
        fast = not _has_tiny(scales)  # else s / L^2 could be subnormal: scale k / L by s instead
        fac = scales / (L * L if self.codebook == "nonlinear" else L)
        for b0, ov in row_views(out, B):
            rows, cols = ov.shape
            cv = codes[b0 * B : b0 * B + ov.numel()].view(rows, cols)
            step = chunk_rows(rows, cols, target)
            tmp = torch.empty((step, cols), device=out.device) if self.codebook == "nonlinear" else None
            for i, j in chunks(rows, step):
                o, sl = ov[i:j], slice(b0 + i, b0 + j)
                o.copy_(cv[i:j])
                f = fac[sl, None] if fast else scales[sl, None]
                if not fast:
                    o.div_(L)
                if tmp is None:
                    o.mul_(f)
                else:
                    o.mul_(torch.abs(o, out=tmp[: j - i]).mul_(f))  # sign(k) (k/L)^2 s
        return out


register("blockwise", family="quantize",
         bench=({"bits": 8, "codebook": "nonlinear"}, {"bits": 8, "codebook": "linear"},
                {"bits": 8, "codebook": "nonlinear", "stochastic": True}, {"bits": 16, "codebook": "nonlinear"}),
         doc="block-wise absmax quantization, 2/4/8/16 bits, linear or non-linear code")(Blockwise)


# ---------------------------------------------------------------------------------------------------------
def _code_width(n_values: int) -> int:
    """Smallest of 1, 2, 4, 8, 16 bits that holds ``n_values`` distinct codes."""
    for w in (1, 2, 4, 8, 16):
        if n_values <= (1 << w):
            return w
    raise ValueError(n_values)


class QSGD(Compressor):
    """QSGD (Alistarh et al. 2017): per bucket of ``block_size`` values, ``||v||_2 * sign(v_i) * xi_i / s`` with
    ``xi_i`` the stochastic rounding of ``s |v_i| / ||v||`` to an integer in [0, s]: unbiased.

    Codes are fixed-width: 2, 4, 8 or 16 bits for ``2 levels + 1`` values (no Elias coding); one fp32 norm per
    bucket. ``levels`` = s; the default 127 gives 8-bit codes; buckets of 512 as in the paper's experiments.
    """

    name = "qsgd"
    # norm (read 1), scaled levels and uniform noise (read 1, write 2), rounded codes (read 2, write 0.25),
    # decode (write 1, scale read 1 write 1)
    passes = 9.0
    batched = True  # the row loop of Compressor._encode_batch: no threads; each row draws from its own State

    def __init__(self, levels: int = 127, block_size: int = 512):
        super().__init__()
        self.levels = check_int("qsgd", "levels", levels, 1, 32767)
        self.block_size = check_int("qsgd", "block_size", block_size, 1)
        self.params = {"levels": levels, "block_size": block_size}
        self.width = _code_width(2 * self.levels + 1)

    def _encode(self, x: Tensor, name: str, state: State, shape: torch.Size) -> tuple[list[Tensor], dict[str, Any]]:
        B, s = self.block_size, float(self.levels)
        n = x.numel()
        norms = torch.empty(math.ceil(n / B), dtype=torch.float32, device=x.device)
        gen = state.generator(x.device)
        code_dtype = torch.int16 if self.width == 16 else torch.int8
        codes = torch.empty(n, dtype=code_dtype, device=x.device)
        target = chunk_target(x.device)
        for b0, v in row_views(x, B):
            rows, cols = v.shape
            cv = codes[b0 * B : b0 * B + v.numel()].view(rows, cols)
            step = chunk_rows(rows, cols, target)
            a = torch.empty((step, cols), device=x.device)
            u = torch.empty_like(a)
            for i, j in chunks(rows, step):
                ab, nb = a[: j - i], norms[b0 + i : b0 + j]
                torch.abs(v[i:j], out=ab)
                # bucket norms while the chunk is in cache; in fp64, as squares of fp32 entries under/overflow
                nb.copy_(torch.linalg.vector_norm(ab, dim=1, dtype=torch.float64))
                ab.div_(torch.where(nb > 0, nb, torch.ones_like(nb))[:, None]).mul_(s)
                ab.add_(torch.rand(ab.shape, generator=gen, device=ab.device, out=u[: j - i])).floor_()
                ab.clamp_(max=s).copysign_(v[i:j])
                cv[i:j].copy_(ab)
        if self.width < 8:
            codes = pack(codes.add_(self.levels).view(torch.uint8), self.width)
        return [codes, norms], {}

    def decode(self, payload: Payload) -> Tensor:
        codes, norms = payload.parts
        n = payload.numel
        if self.width < 8:
            q = unpack(codes, self.width, n).float().sub_(self.levels)
        else:
            q = codes.float()
        if not _has_tiny(norms):
            f = norms / self.levels
            for b0, v in row_views(q, self.block_size):
                v.mul_(f[b0 : b0 + v.shape[0], None])
        else:  # norm / s would round to a few subnormal steps: multiply the integer codes first (exact)
            for b0, v in row_views(q, self.block_size):
                v.mul_(norms[b0 : b0 + v.shape[0], None]).div_(self.levels)
        return q


register("qsgd", family="quantize", bench=({"levels": 127}, {"levels": 7}),
         doc="QSGD: stochastic s-level quantization, unbiased")(QSGD)


class TernGrad(Compressor):
    """TernGrad (Wen et al. 2017): ``s * sign(g_i) * b_i``, ``b_i ~ Bernoulli(|g_i| / s)``, ``s = max |g|``
    per tensor: unbiased. 2-bit codes (packed 4 per byte) + one fp32 scale."""

    name = "terngrad"
    # max (read 1), noise and comparison (read 2, write 1.25), decode (write 1, scale read 1 write 1)
    passes = 7.5
    batched = True  # the row loop of Compressor._encode_batch: no threads; each row draws from its own State

    def __init__(self) -> None:
        super().__init__()

    def _encode(self, x: Tensor, name: str, state: State, shape: torch.Size) -> tuple[list[Tensor], dict[str, Any]]:
        n = x.numel()
        smax = max(float(x.max()), -float(x.min())) if n else 0.0
        div = smax if smax > 0 else 1.0
        gen = state.generator(x.device)
        codes = torch.empty(n, dtype=torch.uint8, device=x.device)
        step = chunk_rows(n, 1, chunk_target(x.device))
        y = torch.empty(step, device=x.device)
        u = torch.empty(step, device=x.device)
        for i, j in chunks(n, step):
            yb, ub = y[: j - i], u[: j - i]
            torch.div(x[i:j], div, out=yb)
            torch.rand(ub.shape, generator=gen, device=ub.device, out=ub)
            # code = [y > u] + [y >= -u]: 2 (with prob y if y > 0), 0 (with prob -y if y < 0), else 1
            c = codes[i:j]
            c.copy_(yb > ub)
            c.add_(yb >= ub.neg_())
        return [pack(codes, 2), torch.tensor([smax], dtype=torch.float32, device=x.device)], {}

    def decode(self, payload: Payload) -> Tensor:
        packed, scale = payload.parts
        return unpack(packed, 2, payload.numel).float().sub_(1.0).mul_(scale)


register("terngrad", family="quantize", bench=({},),
         doc="TernGrad: stochastic ternary, per-tensor max scale, unbiased")(TernGrad)


class TwoBit(Compressor):
    """The 2-bit threshold quantizer (Strom 2015; MXNet's ``2bit``): +t if g >= t, -t if g <= -t, else 0.
    Meant with error feedback (the registry's default ``twobit`` keeps the residual). 2-bit codes; ``t`` is a
    parameter both sides know, so nothing else is sent."""

    name = "twobit"
    # two comparisons against the threshold (read 2, write 0.5), decode (write 1, select read 1 write 1)
    passes = 5.5
    batched = True  # the row loop of Compressor._encode_batch: no threads; each row draws from its own State

    def __init__(self, threshold: float = 0.5):
        super().__init__()
        self.threshold = check_float("twobit", "threshold", threshold, 0.0)
        self.params = {"threshold": threshold}

    def _encode(self, x: Tensor, name: str, state: State, shape: torch.Size) -> tuple[list[Tensor], dict[str, Any]]:
        n, t = x.numel(), self.threshold
        codes = torch.empty(n, dtype=torch.uint8, device=x.device)
        step = chunk_rows(n, 1, chunk_target(x.device))
        for i, j in chunks(n, step):
            xs, c = x[i:j], codes[i:j]
            c.copy_(xs >= t)
            c.add_(xs > -t)
        return [pack(codes, 2)], {}

    def decode(self, payload: Payload) -> Tensor:
        return unpack(payload.parts[0], 2, payload.numel).float().sub_(1.0).mul_(self.threshold)


register("twobit", family="quantize", error_feedback=True, configurable_ef=False,
         bench=({"threshold": "1std"},),  # "<k>std": k x the input's standard deviation
         doc="2-bit threshold quantization (+t, -t, 0) with residual")(TwoBit)
