"""SparseLoCo's compressor (Sarfi et al. 2025): top-k per chunk of a decayed error-feedback accumulator,
values in 2 bits. Two named variants (``variant``), which pick the same top-k entries of the same chunks
where their chunks agree and differ in the chunks, the 2-bit code and the aggregate:

``authors`` (the default): as the team's code computes it (tplr-y/CCLoco at 5bfce52, ``CCLoco`` with
``use_quantization``, ``quantization_bins=4``, ``quantization_range=6``, ``oned_chunk_strat=rate_2d``;
tplr-ai/templar at c2397ac, ``TopKCompressor``/``ChunkingTransformer`` with the same hparams). For each tensor x
and this worker's accumulator e:

1. e <- decay * e + x.
2. Tiles: a 2-D tensor [R, C] is cut into tiles of n1 x n2 values, n1 (n2) the largest divisor of R (C) that is
   at most ``tile``; a 1-D tensor into runs of n1 values, n1 the largest divisor of its length at most
   ``tile**2``. (Tensors of more dimensions are viewed as [shape[0], rest]: an extension, the authors' code
   handles only 1-D and 2-D.)
3. In each tile keep the k entries of largest magnitude: K = max(1, round(ratio * tile**2)) per 2-D tile
   (clamped to the tile's size), max(1, round(n1 * K / tile**2)) per 1-D run.
4. Code the tensor's kept values in 4 bins (2 bits) from their mean and standard deviation: shift = mean,
   c = value - shift, scale = 6 * std(c, unbiased) / 4, bin = clamp(round(c / scale + 2), 0, 3); the decoded
   value is shift + the mean of the c that fell in its bin (5 fp32 per tensor: shift and 4 bin means).
5. e <- e - decoded.
6. Aggregate: the payloads are all-gathered and each index gets the mean over the workers that sent it (a
   ``scatter_reduce(..., "mean", include_self=False)`` over the concatenated workers' values in rank order):
   an index only one of R workers sent gets that worker's value, not 1/R of it.

Wire per tensor: k int16 indices within the tile per tile, ceil(2k/8) bytes of codes over all tiles, 20 bytes
of bin values. (templar packs the indices in 12 bits and sends the codes as one byte each; CCLoco sends int64
indices; templar's validator also clips each worker's values to the median of the workers' norms, which is
not part of SparseLoCo's algorithm and not reproduced here.)

``lowbw`` (this project's first implementation, kept as a named variant):

1. e <- decay * e + x.
2. Split the flattened e into runs of ``chunk`` values (a shorter tail run last); in each keep the
   k = ceil(ratio * chunk) entries of largest magnitude.
3. Code each kept value in 2 bits: its sign, and which of two magnitudes it takes: the mean magnitude of
   the larger half of the chunk's kept values, or of the smaller half (two fp32 levels per chunk).
4. e <- e - decoded (what was not sent, and the quantisation error, stay in e).
5. Aggregate: the decoded payloads are summed in rank order and divided by the number of workers R.

Wire per chunk: k indices within the chunk (int16, int32 for chunks over 32768), ceil(2k/8) bytes of
codes, 8 bytes of levels.

Both are used on DiLoCo's pseudo-gradients (``sync: diloco`` or :class:`lowbw.comm.DiLoCo` with outer SGD, no
outer momentum: the decayed accumulator stands in for it).
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

from lowbw.compress._bits import pack, unpack
from lowbw.compress.base import Compressor, Payload, State
from lowbw.compress.checks import check_choice, check_float, check_int
from lowbw.compress.demo import largest_divisor_at_most
from lowbw.compress.quantize import row_views
from lowbw.compress.registry import register
from lowbw.compress.sparsify import topk_count

__all__ = ["SparseLoCo", "VARIANTS"]

#: the named variants (see the module docstring)
VARIANTS = ("authors", "lowbw")
_BINS = 4  # the authors' quantization_bins for 2-bit values
_RANGE = 6.0  # the authors' quantization_range, in standard deviations


class SparseLoCo(Compressor):
    """See the module docstring. ``ratio``: kept fraction (SparseLoCo: 1-3 %); ``decay``: the accumulator's
    decay (beta; 1 = plain error feedback); ``variant``: ``authors`` or ``lowbw``; ``tile``: the authors' chunk
    side (64; ``authors`` only); ``chunk``: values per run (4096; ``lowbw`` only)."""

    name = "sparseloco"
    # error feedback (read 2, write 1), top-k per chunk (read 1, write 1 magnitudes), 2-bit values (nothing
    # per entry), new residual (read 1, write 1), decode into zeros (write 1)
    passes = 8.0
    has_own_memory = True

    def __init__(self, ratio: float = 0.02, chunk: int | None = None, decay: float = 0.95,
                 variant: str = "authors", tile: int | None = None):
        super().__init__()
        self.ratio = check_float("sparseloco", "ratio", ratio, 0.0, 1.0)
        self.decay = check_float("sparseloco", "decay", decay, 0.0, 1.0, lo_open=False)
        self.variant = check_choice("sparseloco", "variant", variant, VARIANTS)
        if variant == "authors" and chunk is not None:
            raise ValueError(f"sparseloco: invalid parameter chunk={chunk!r}; allowed: only with variant='lowbw' "
                             "(variant='authors' cuts tiles of tile x tile)")
        if variant == "lowbw" and tile is not None:
            raise ValueError(f"sparseloco: invalid parameter tile={tile!r}; allowed: only with variant='authors'")
        self.chunk = check_int("sparseloco", "chunk", 4096 if chunk is None else chunk, 1, 1 << 30)
        self.tile = check_int("sparseloco", "tile", 64 if tile is None else tile, 1, 181)  # tile**2 fits int16
        self.params = {"ratio": ratio, "decay": decay, "variant": variant}
        self.params.update({"tile": self.tile} if variant == "authors" else {"chunk": self.chunk})
        self.index_dtype = torch.int16 if variant == "authors" or self.chunk <= 32768 else torch.int32
        self.topk = max(1, round(self.ratio * self.tile ** 2))  # the authors' top_k per full 2-D tile

    def _encode(self, x: Tensor, name: str, state: State, shape: torch.Size) -> tuple[list[Tensor], dict[str, Any]]:
        slot = state[name]
        e = slot.get("sparseloco.e")
        if e is None or e.shape != x.shape or e.device != x.device:
            e = torch.zeros_like(x)
        e.mul_(self.decay).add_(x)  # 1.
        parts = self._encode_authors(e, shape) if self.variant == "authors" else self._encode_lowbw(e)
        slot["sparseloco.e"] = e
        return parts, {}

    def decode(self, payload: Payload) -> Tensor:
        if self.variant == "authors":
            idx, vals, g = self._authors_sparse(payload)
            tiles = torch.zeros(g.tiled, dtype=torch.float32, device=vals.device)
            tiles.scatter_(-1, idx, vals)
            return g.untile(tiles)
        return self._decode_lowbw(payload)

    def combine(self, payloads: list[Payload], out: Tensor) -> Tensor:
        """``authors``: the mean over the workers that sent each index (step 6); ``lowbw``: sum / R."""
        if self.variant != "authors":
            return super().combine(payloads, out)
        sparse = [self._authors_sparse(p) for p in payloads]
        g = sparse[0][2]
        idx = torch.cat([s[0] for s in sparse], dim=-1)
        vals = torch.cat([s[1] for s in sparse], dim=-1)
        tiles = torch.zeros(g.tiled, dtype=torch.float32, device=out.device)
        tiles.scatter_reduce_(-1, idx, vals, reduce="mean", include_self=False)
        out.copy_(g.untile(tiles))
        return out

    # ----- authors -----------------------------------------------------------------------------------
    def _encode_authors(self, e: Tensor, shape: torch.Size) -> list[Tensor]:
        g = _Tiling.of(shape, self.tile)
        t = g.tile(e)  # 2.
        k = g.k(self.topk, self.tile)
        idx = t.abs().topk(k, dim=-1, largest=True, sorted=False).indices  # 3.
        val = t.gather(-1, idx)
        codes, lookup, shift = _quantize(val)  # 4.
        rec = torch.zeros_like(t)
        rec.scatter_(-1, idx, lookup[codes.long()] + shift)
        e.sub_(g.untile(rec))  # 5.
        return [idx.reshape(-1).to(torch.int16), pack(codes.reshape(-1), 2),
                torch.cat([shift.reshape(1), lookup])]

    def _authors_sparse(self, payload: Payload) -> tuple[Tensor, Tensor, _Tiling]:
        """(indices [*tiles, k] int64, decoded values [*tiles, k], tiling) of an ``authors`` payload."""
        idx_w, packed, params = payload.parts
        g = _Tiling.of(payload.shape, self.tile)
        k = g.k(self.topk, self.tile)
        idx = idx_w.long().view(*g.tiled[:-1], k)
        codes = unpack(packed, 2, idx_w.numel()).view(idx.shape)
        return idx, params[1:][codes.long()] + params[0], g

    # ----- lowbw -------------------------------------------------------------------------------------
    def _encode_lowbw(self, e: Tensor) -> list[Tensor]:
        idx_parts, code_parts, level_parts = [], [], []
        for _, v in row_views(e, self.chunk):
            rows, cols = v.shape
            k = topk_count(self.ratio, cols)
            mag, idx = v.abs().topk(k, dim=1)  # 2. largest first
            h = (k + 1) // 2
            hi = mag[:, :h].mean(1)
            lo = mag[:, h:].mean(1) if k > h else hi
            levels = torch.stack([lo, hi], 1)  # [rows, 2]
            big = torch.zeros((rows, k), dtype=torch.uint8, device=e.device)
            big[:, :h] = 1
            neg = (v.gather(1, idx) < 0).to(torch.uint8)
            codes = big + 2 * neg  # 3. bit 0: the larger magnitude; bit 1: negative
            order = idx.argsort(1)  # indices ascending within each chunk
            idx, codes = idx.gather(1, order), codes.gather(1, order)
            v.scatter_add_(1, idx, -self._values(codes, levels))  # 4.
            idx_parts.append(idx.reshape(-1).to(self.index_dtype))
            code_parts.append(codes.reshape(-1))
            level_parts.append(levels.reshape(-1))
        dev = e.device
        return [_cat(idx_parts, self.index_dtype, dev), pack(_cat(code_parts, torch.uint8, dev), 2),
                _cat(level_parts, torch.float32, dev)]

    @staticmethod
    def _values(codes: Tensor, levels: Tensor) -> Tensor:
        """Decoded values [rows, k] of 2-bit codes [rows, k] with per-row levels [rows, 2] (lo, hi)."""
        mag = levels.gather(1, (codes & 1).long())
        return torch.where(codes >= 2, -mag, mag)

    def _decode_lowbw(self, payload: Payload) -> Tensor:
        idx_all, packed, levels_all = payload.parts
        n = payload.numel
        out = torch.zeros(n, dtype=torch.float32, device=levels_all.device)
        codes_all = unpack(packed, 2, idx_all.numel())
        pos, row = 0, 0
        for _, o in row_views(out, self.chunk):
            rows, cols = o.shape
            k = topk_count(self.ratio, cols)
            idx = idx_all[pos: pos + rows * k].long().view(rows, k)
            codes = codes_all[pos: pos + rows * k].view(rows, k)
            levels = levels_all[2 * row: 2 * (row + rows)].view(rows, 2)
            o.scatter_(1, idx, self._values(codes, levels))
            pos, row = pos + rows * k, row + rows
        return out


def _quantize(val: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """The authors' statistical quantisation of one tensor's kept values (step 4): (bins uint8 like ``val``,
    the 4 bins' mean centred values fp32, the shift = mean)."""
    shift = val.mean() if val.numel() else torch.zeros((), dtype=val.dtype, device=val.device)  # empty: no NaN
    c = val - shift
    std = c.norm() / math.sqrt(c.numel() - 1) if c.numel() > 1 else torch.zeros((), dtype=val.dtype)
    scale = _RANGE * std / _BINS
    if scale == 0 or torch.isnan(scale) or torch.isinf(scale):
        scale = torch.tensor(1.0, dtype=c.dtype, device=val.device)
    codes = (c.float() / scale + _BINS // 2).round().clamp(0, _BINS - 1).to(torch.uint8)
    flat = codes.long().flatten()
    sums = torch.zeros(_BINS, dtype=torch.float32, device=val.device).scatter_add_(0, flat, c.float().flatten())
    counts = torch.zeros(_BINS, dtype=torch.float32, device=val.device).scatter_add_(
        0, flat, torch.ones_like(c.float().flatten()))
    lookup = torch.where(counts > 0, sums / counts, 0.0)
    return codes, lookup, shift


class _Tiling:
    """How the ``authors`` variant tiles a tensor of one shape (step 2)."""

    def __init__(self, dims: tuple[int, ...], sides: tuple[int, ...]):
        self.dims = dims  # the tensor as 1-D (n,) or 2-D (R, C)
        self.sides = sides  # tile sides: (n1,) or (n1, n2)
        if len(dims) == 1:
            self.tiled = (dims[0] // sides[0], sides[0])  # [runs, n1]
        else:
            self.tiled = (dims[0] // sides[0], dims[1] // sides[1], sides[0] * sides[1])  # [Y, X, n1*n2]

    @staticmethod
    def of(shape: torch.Size, tile: int) -> _Tiling:
        n = math.prod(shape)
        if len(shape) >= 2 and n > 0:
            dims = (shape[0], n // shape[0])
            return _Tiling(dims, (largest_divisor_at_most(dims[0], tile), largest_divisor_at_most(dims[1], tile)))
        return _Tiling((n,), (largest_divisor_at_most(n, tile * tile) if n else 1,))

    def k(self, topk: int, tile: int) -> int:
        """Kept values per tile (step 3; at least 1, at most the tile)."""
        size = self.tiled[-1]
        k = topk if len(self.dims) == 2 else max(1, round(size * topk / tile ** 2))
        return min(max(k, 1), size)

    def tile(self, flat: Tensor) -> Tensor:
        if len(self.dims) == 1:
            return flat.view(self.tiled)
        (R, C), (n1, n2) = self.dims, self.sides
        return flat.view(R // n1, n1, C // n2, n2).permute(0, 2, 1, 3).reshape(self.tiled)

    def untile(self, tiles: Tensor) -> Tensor:
        if len(self.dims) == 1:
            return tiles.reshape(-1)
        (R, C), (n1, n2) = self.dims, self.sides
        return tiles.view(R // n1, C // n2, n1, n2).permute(0, 2, 1, 3).reshape(-1)


def _cat(parts: list[Tensor], dtype: torch.dtype, device: torch.device) -> Tensor:
    return torch.cat(parts) if parts else torch.empty(0, dtype=dtype, device=device)


register("sparseloco", family="sparseloco", whole_method=True, configurable_ef=False,
         doc="SparseLoCo: top-k per chunk of a decayed EF accumulator, 2-bit values (pseudo-gradients); variant: "
             "authors (64x64 tiles, 4 bins from mean and std, mean over senders) | lowbw")(SparseLoCo)
