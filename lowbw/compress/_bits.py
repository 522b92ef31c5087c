"""Bit packing of small unsigned codes (1, 2 or 4 bits each) into bytes, in torch (CPU and CUDA alike).

Codes are packed little-end first: code ``i`` of a byte sits at bits ``[i*w, (i+1)*w)``. Packing views groups
of codes as one wider integer and folds them with shift-or steps (log2(8/w) of them), so it runs as a few
vectorised integer passes over ``n/8`` words with no per-bit loop. Assumes a little-endian host (x86, ARM,
CUDA), which ``torch.Tensor.view(dtype)`` makes observable.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Iterator

import torch
from torch import Tensor

__all__ = ["pack", "unpack", "packed_nbytes", "chunks", "chunk_rows"]

assert sys.byteorder == "little", "lowbw.compress._bits assumes a little-endian host"

# width -> (container dtype, fold shifts for packing, (shift, mask) steps for unpacking)
_SPEC = {
    1: (torch.int64, (7, 14, 28), ((28, 0x0000000F0000000F), (14, 0x0003000300030003), (7, 0x0101010101010101))),
    2: (torch.int32, (6, 12), ((12, 0x000F000F), (6, 0x03030303))),
    4: (torch.int16, (4,), ((4, 0x0F0F),)),
}


def packed_nbytes(n: int, width: int) -> int:
    return math.ceil(n * width / 8)


def pack(codes: Tensor, width: int) -> Tensor:
    """Pack a 1-D uint8 tensor of codes ``< 2**width`` into ``ceil(n*width/8)`` bytes."""
    if width == 8:
        return codes.clone()
    container, shifts, _ = _SPEC[width]
    n = codes.numel()
    per = 8 // width  # codes per byte == bytes per container
    nbytes = packed_nbytes(n, width)
    if n % per:
        padded = torch.zeros(nbytes * per, dtype=torch.uint8, device=codes.device)
        padded[:n] = codes
        codes = padded
    x = codes.view(container)
    for s in shifts:
        x = x | (x >> s)
    return (x & 0xFF).to(torch.uint8)


def unpack(packed: Tensor, width: int, n: int) -> Tensor:
    """Inverse of :func:`pack`: ``n`` uint8 codes."""
    if width == 8:
        return packed[:n]
    container, _, steps = _SPEC[width]
    x = packed.to(container)
    for s, mask in steps:
        x = (x | (x << s)) & mask
    return x.view(torch.uint8)[:n]


def chunk_rows(rows: int, cols: int, target: int) -> int:
    """Rows per chunk of a (rows, cols) array for chunks of about ``target`` elements (at least 1 row)."""
    return max(1, min(rows, target // max(cols, 1)))


def chunks(rows: int, step: int) -> Iterator[tuple[int, int]]:
    """``(start, stop)`` row ranges of ``step`` rows.

    Elementwise pipelines run chunk by chunk so that their intermediates stay in cache: on 2 CPU cores this
    is about 2x faster than whole-tensor passes, and the temporaries stay small.
    """
    for i in range(0, rows, step):
        yield i, min(i + step, rows)
