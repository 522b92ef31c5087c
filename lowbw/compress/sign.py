"""Sign compressors: ``signsgd``, ``ef_signsgd`` (scaled sign + error feedback), ``onebit`` (1-bit SGD).

All send one bit per entry (packed 8 per byte): the bit is 1 for negative entries, 0 for the rest (zeros
decode as positive).
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

from lowbw.compress._bits import chunk_rows, chunks, pack, unpack
from lowbw.compress.base import Compressor, Payload, State
from lowbw.compress.checks import check_choice, check_int
from lowbw.compress.quantize import chunk_target, row_views
from lowbw.compress.registry import register

__all__ = ["SignSGD", "ScaledSign", "OneBit"]


def _sign_bits(x: Tensor) -> Tensor:
    return pack((x < 0).view(torch.uint8), 1)


def _unpack_signs(packed: Tensor, n: int) -> Tensor:
    """+1.0 / -1.0 per entry."""
    return unpack(packed, 1, n).float().mul_(-2.0).add_(1.0)


def _l1_sum(x: Tensor, chunk: int = 1 << 20) -> Tensor:
    """sum(|x|) of a flat tensor, accumulated in fp64 over chunks of ``chunk`` entries (a 0-d fp64 tensor)."""
    total = torch.zeros((), dtype=torch.float64, device=x.device)
    for i in range(0, x.numel(), chunk):
        total += x[i:i + chunk].abs().sum(dtype=torch.float64)
    return total


class SignSGD(Compressor):
    """signSGD (Bernstein et al. 2018): send sign(g); decode to +-1. Averaging over ranks gives the mean sign
    (whose sign is the majority vote). Scale-free: the learning rate carries the magnitude."""

    name = "signsgd"
    passes = 2.0  # signs packed to bits (read 1), decode to +-1 (write 1)
    clip_at = "worker"  # the mean sign is the step (Bernstein et al.): clip the raw gradient, never the signs

    def _encode(self, x: Tensor, name: str, state: State, shape: torch.Size) -> tuple[list[Tensor], dict[str, Any]]:
        return [_sign_bits(x)], {}

    def decode(self, payload: Payload) -> Tensor:
        return _unpack_signs(payload.parts[0], payload.numel)


class ScaledSign(Compressor):
    """Scaled sign (Karimireddy et al. 2019, EF-SignSGD): ``||g||_1 / n * sign(g)``. Bits + one fp32 scale."""

    name = "ef_signsgd"
    passes = 4.0  # L1 norm (read 1), signs (read 1), decode (write 1) and scale (read 1 write 1)
    clip_at = "worker"  # the scaled sign is the step (Karimireddy et al.'s x -= C(p)): clip its input gradient

    def _encode(self, x: Tensor, name: str, state: State, shape: torch.Size) -> tuple[list[Tensor], dict[str, Any]]:
        n = x.numel()
        # the L1 sum in fp64: fp32 reductions lose precision with size and with the thread count (a
        # relative error near 1e-4 at millions of entries); chunked so the fp64 copy stays small
        scale = _l1_sum(x) / n if n else torch.zeros((), device=x.device)
        return [_sign_bits(x), scale.reshape(1).float()], {}

    def decode(self, payload: Payload) -> Tensor:
        bits, scale = payload.parts
        return _unpack_signs(bits, payload.numel).mul_(scale)


class OneBit(Compressor):
    """1-bit SGD (Seide et al. 2014): one bit per entry, decoded to the mean of the non-negative entries or
    the mean of the negative entries of its group; with error feedback (the registry's ``onebit`` always has it).

    ``granularity="block"``: groups are blocks of ``block_size`` consecutive entries (works on flat DDP buckets).
    ``granularity="column"``: groups are the columns of the tensor viewed as (shape[0], -1), as in the paper;
    tensors with fewer than 2 dimensions form a single group. Wire: bits + two fp32 means per group.
    """

    name = "onebit"
    # column means of each sign (read 2, write 1 mask), signs (read 1), decode (write 1, select read 1 write 1)
    passes = 7.0

    def __init__(self, granularity: str = "block", block_size: int = 2048):
        super().__init__()
        self.granularity = check_choice("onebit", "granularity", granularity, ("block", "column"))
        self.block_size = check_int("onebit", "block_size", block_size, 1)
        self.params = {"granularity": granularity, "block_size": block_size}

    def _groups(self, x: Tensor, shape: torch.Size) -> list[tuple[int, Tensor, int]]:
        """(first group index, 2-D view, reduce dim) triples: reduce along ``dim`` to get the groups' sums."""
        if self.granularity == "block":
            return [(b0, v, 1) for b0, v in row_views(x, self.block_size)]
        if x.numel() == 0:
            return []
        if len(shape) < 2:
            return [(0, x.view(-1, 1), 0)]
        return [(0, x.view(shape[0], -1), 0)]

    def _ngroups(self, n: int, shape: torch.Size) -> int:
        if self.granularity == "block":
            return math.ceil(n / self.block_size)
        if n == 0:
            return 0
        return 1 if len(shape) < 2 else n // shape[0]

    def _encode(self, x: Tensor, name: str, state: State, shape: torch.Size) -> tuple[list[Tensor], dict[str, Any]]:
        ng = self._ngroups(x.numel(), shape)
        means = torch.zeros(2 * ng, dtype=torch.float32, device=x.device)  # [pos means..., neg means...]
        pos_m, neg_m = means[:ng], means[ng:]
        target = chunk_target(x.device)
        for g0, v, dim in self._groups(x, shape):
            rows, cols = v.shape
            if dim == 1:  # groups are rows: chunk over rows
                step = chunk_rows(rows, cols, target)
                tmp = torch.empty((step, cols), device=x.device)
                for i, j in chunks(rows, step):
                    tb, vb = tmp[: j - i], v[i:j]
                    # the two sums separately: total - positive sum would cancel for a small minority group
                    psum = torch.clamp(vb, min=0.0, out=tb).sum(1)
                    nsum = torch.clamp(vb, max=0.0, out=tb).sum(1)
                    pcnt = torch.ge(vb, 0.0, out=tb).sum(1)  # bool stored as 0/1 floats
                    sl = slice(g0 + i, g0 + j)
                    pos_m[sl] = psum / pcnt.clamp(min=1)
                    neg_m[sl] = nsum / (cols - pcnt).clamp(min=1)
            else:  # groups are columns
                pcnt = (v >= 0).sum(0).float()
                pos_m[:] = v.clamp(min=0.0).sum(0) / pcnt.clamp(min=1)
                neg_m[:] = v.clamp(max=0.0).sum(0) / (rows - pcnt).clamp(min=1)
        return [_sign_bits(x), means], {}

    def decode(self, payload: Payload) -> Tensor:
        bits, means = payload.parts
        n = payload.numel
        neg = unpack(bits, 1, n).float()  # 1.0 for negative entries
        ng = means.numel() // 2
        pos_m, diff = means[:ng], means[ng:] - means[:ng]
        for g0, v, dim in self._groups(neg, payload.shape):
            if dim == 1:
                r = v.shape[0]
                v.mul_(diff[g0 : g0 + r, None]).add_(pos_m[g0 : g0 + r, None])
            else:
                v.mul_(diff[None, :]).add_(pos_m[None, :])
        return neg


register("signsgd", family="sign", bench=({},), doc="signSGD: 1 bit per entry, decoded to +-1")(SignSGD)
register("ef_signsgd", family="sign", error_feedback=True, configurable_ef=False, bench=({},),
         doc="EF-signSGD: scaled sign (mean |g|) with error feedback")(ScaledSign)
register("onebit", family="sign", error_feedback=True, configurable_ef=False, bench=({},),
         doc="1-bit SGD: per-block or per-column mean reconstruction with error feedback")(OneBit)
