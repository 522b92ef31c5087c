"""SparseLoCo's compressor (Sarfi et al. 2025): chunk-wise top-k of a decayed error-feedback accumulator,
values in 2 bits.

Used on DiLoCo's pseudo-gradients (``sync: diloco`` or :class:`lowbw.comm.DiLoCo` with outer SGD, no outer
momentum: the decayed accumulator stands in for it). For each tensor x and this worker's accumulator e:

1. e <- decay * e + x.
2. Split e into chunks of ``chunk`` values (a shorter tail chunk last); in each keep the
   k = ceil(ratio * chunk) entries of largest magnitude.
3. Code each kept value in 2 bits: its sign, and which of two magnitudes it takes: the mean magnitude of
   the larger half of the chunk's kept values, or of the smaller half (two fp32 levels per chunk).
4. e <- e - decoded (what was not sent, and the quantisation error, stay in e).

Wire per chunk: k indices within the chunk (int16, int32 for chunks over 32768), ceil(2k/8) bytes of
codes, 8 bytes of levels. Payloads are all-gathered and summed in rank order (not summable).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from lowbw.compress._bits import pack, unpack
from lowbw.compress.base import Compressor, Payload, State
from lowbw.compress.checks import check_float, check_int
from lowbw.compress.quantize import row_views
from lowbw.compress.registry import register
from lowbw.compress.sparsify import topk_count

__all__ = ["SparseLoCo"]


class SparseLoCo(Compressor):
    """See the module docstring. ``ratio``: kept fraction per chunk (SparseLoCo: 1-3 %); ``chunk``: values
    per chunk; ``decay``: the accumulator's decay (beta; 1 = plain error feedback)."""

    name = "sparseloco"
    # error feedback (read 2, write 1), top-k per chunk (read 1, write 1 magnitudes), 2-bit values (nothing
    # per entry), new residual (read 1, write 1), decode into zeros (write 1)
    passes = 8.0
    has_own_memory = True

    def __init__(self, ratio: float = 0.02, chunk: int = 4096, decay: float = 0.95):
        super().__init__()
        self.ratio = check_float("sparseloco", "ratio", ratio, 0.0, 1.0)
        self.chunk = check_int("sparseloco", "chunk", chunk, 1, 1 << 30)
        self.decay = check_float("sparseloco", "decay", decay, 0.0, 1.0, lo_open=False)
        self.params = {"ratio": ratio, "chunk": chunk, "decay": decay}
        self.index_dtype = torch.int16 if chunk <= 32768 else torch.int32

    def _encode(self, x: Tensor, name: str, state: State, shape: torch.Size) -> tuple[list[Tensor], dict[str, Any]]:
        slot = state[name]
        e = slot.get("sparseloco.e")
        if e is None or e.shape != x.shape or e.device != x.device:
            e = torch.zeros_like(x)
        e.mul_(self.decay).add_(x)  # 1.
        idx_parts, code_parts, level_parts = [], [], []
        for _, v in row_views(e, self.chunk):
            rows, cols = v.shape
            k = topk_count(self.ratio, cols)
            mag, idx = v.abs().topk(k, dim=1)  # 2. largest first
            h = (k + 1) // 2
            hi = mag[:, :h].mean(1)
            lo = mag[:, h:].mean(1) if k > h else hi
            levels = torch.stack([lo, hi], 1)  # [rows, 2]
            big = torch.zeros((rows, k), dtype=torch.uint8, device=x.device)
            big[:, :h] = 1
            neg = (v.gather(1, idx) < 0).to(torch.uint8)
            codes = big + 2 * neg  # 3. bit 0: the larger magnitude; bit 1: negative
            order = idx.argsort(1)  # indices ascending within each chunk
            idx, codes = idx.gather(1, order), codes.gather(1, order)
            v.scatter_add_(1, idx, -self._values(codes, levels))  # 4.
            idx_parts.append(idx.reshape(-1).to(self.index_dtype))
            code_parts.append(codes.reshape(-1))
            level_parts.append(levels.reshape(-1))
        slot["sparseloco.e"] = e
        dev = x.device
        return [_cat(idx_parts, self.index_dtype, dev), pack(_cat(code_parts, torch.uint8, dev), 2),
                _cat(level_parts, torch.float32, dev)], {}

    @staticmethod
    def _values(codes: Tensor, levels: Tensor) -> Tensor:
        """Decoded values [rows, k] of 2-bit codes [rows, k] with per-row levels [rows, 2] (lo, hi)."""
        mag = levels.gather(1, (codes & 1).long())
        return torch.where(codes >= 2, -mag, mag)

    def decode(self, payload: Payload) -> Tensor:
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


def _cat(parts: list[Tensor], dtype: torch.dtype, device: torch.device) -> Tensor:
    return torch.cat(parts) if parts else torch.empty(0, dtype=dtype, device=device)


register("sparseloco", configurable_ef=False,
         doc="SparseLoCo: chunk-wise top-k of a decayed EF accumulator, 2-bit values (pseudo-gradients)")(SparseLoCo)
