"""Natural compression (Horváth, Ho, Horváth, Sahu, Canini & Richtárik, "Natural Compression for Distributed
Deep Learning", MSML 2022, arXiv:1905.10988): every value is rounded at random to one of the two powers of two
around it, so that only its sign and exponent cross the wire (9 bits per value, of fp32's 32).

For ``t`` with ``2^a <= |t| < 2^(a+1)`` (their eq. 2):

    C_nat(t) = sign(t) 2^a        with probability (2^(a+1) - |t|) / 2^a,
               sign(t) 2^(a+1)    with probability (|t| - 2^a) / 2^a,

so ``E[C_nat(t)] = t`` (unbiased) and ``E[C_nat(t)^2] <= 9/8 t^2`` (variance at most ``t^2 / 8``). On fp32 this
is their "drop the mantissa" construction, one pass over the bits:

1. split each fp32 value into sign ``s``, biased exponent ``E`` (8 bits) and mantissa ``m`` (23 bits);
2. draw ``u ~ U[0, 1)`` and round up, ``E <- E + 1``, where ``u < m / 2^23`` (that is ``(|t| - 2^a) / 2^a``;
   for a subnormal ``|t| = (m / 2^23) 2^-126``, so the same rule rounds it to 0 or ``2^-126``, also unbiased);
3. send ``E`` (one byte per value) and ``s`` (one bit per value, packed); the receiver rebuilds
   ``(-1)^s 2^(E - 127)`` (``E = 0``: zero).

Deliberate variant: a value in ``[2^127, 2^128)`` that would round up to ``2^128`` (fp32's infinity) is kept at
``2^127`` (biased only there; gradients are never that large). The payload's size depends on the shape alone:
``n + ceil(n / 8)`` bytes. Not summable (an exponent is not additive): the exchange all-gathers the payloads
and averages the decoded values in rank order. No error feedback by default: the compressor is unbiased.

GRACE (Xu et al. 2021, ``grace_dl``, written with the authors' group) ships this rounding too, as bit operations
on the fp32 word (its CuPy and TensorFlow versions) and as one signed byte whose exponent is clamped to
[-110, 17] (its torch.distributed version); this module sends the paper's 9 bits and clamps only at fp32's top.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from lowbw.compress._bits import chunk_rows, chunks, pack, unpack
from lowbw.compress.base import Compressor, Payload, State
from lowbw.compress.quantize import chunk_target
from lowbw.compress.registry import register

__all__ = ["Natural"]

_MANTISSA = 1 << 23  # fp32's mantissa: 23 bits
_TOP = 254  # the largest finite biased exponent (255 is inf / NaN)


class Natural(Compressor):
    """Natural compression: stochastic rounding to a power of two, unbiased; 8-bit exponents + 1-bit signs."""

    name = "natural"
    # read x (1), draw u (write 1, read 1), exponents (write 0.25), signs (1/32); decode: read 0.28, write 1
    passes = 4.6
    batched = True  # the row loop of Compressor._encode_batch: each row draws from its own State

    def __init__(self) -> None:
        super().__init__()

    def _encode(self, x: Tensor, name: str, state: State, shape: torch.Size) -> tuple[list[Tensor], dict[str, Any]]:
        n = x.numel()
        gen = state.generator(x.device)
        exps = torch.empty(n, dtype=torch.uint8, device=x.device)
        signs = torch.empty(n, dtype=torch.uint8, device=x.device)
        step = chunk_rows(n, 1, chunk_target(x.device))
        u = torch.empty(step, device=x.device)
        for i, j in chunks(n, step):
            bits = x[i:j].view(torch.int32)
            e = (bits >> 23) & 0xFF  # step 1: biased exponent
            m = (bits & (_MANTISSA - 1)).float().div_(_MANTISSA)  # mantissa as a fraction, exact in fp32
            ub = u[: j - i]
            torch.rand(ub.shape, generator=gen, device=ub.device, out=ub)
            e += ub < m  # step 2: round up with probability m / 2^23
            exps[i:j] = e.clamp_(max=_TOP)  # 2^128 would be inf: kept at 2^127
            signs[i:j] = (bits < 0).to(torch.uint8)
        return [exps, pack(signs, 1)], {}

    def decode(self, payload: Payload) -> Tensor:
        exps, packed = payload.parts
        n = payload.numel
        bits = exps.to(torch.int32) << 23
        bits |= unpack(packed, 1, n).to(torch.int32) << 31
        return bits.view(torch.float32).clone()


register("natural", family="quantize", bench=({},),
         doc="natural compression: stochastic rounding to a power of two (sign + exponent, 9 bits), unbiased")(Natural)
