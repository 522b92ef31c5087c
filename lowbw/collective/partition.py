"""How a flat tensor of n elements is cut: into N contiguous segments (one per rank) and into chunks that
stream through a pipeline. Pure index arithmetic, no torch: the collectives' modules import it at load time
and their cost formulas are read without torch (``lowbw advise``).
"""

from __future__ import annotations

__all__ = ["split", "chunk_ranges"]


def split(n: int, parts: int) -> list[tuple[int, int]]:
    """``parts`` contiguous ranges covering ``range(n)``; the first ``n % parts`` are one longer."""
    base, rem = divmod(n, parts)
    out, lo = [], 0
    for i in range(parts):
        hi = lo + base + (1 if i < rem else 0)
        out.append((lo, hi))
        lo = hi
    return out


def chunk_ranges(lo: int, hi: int, chunk: int) -> list[tuple[int, int]]:
    """``[lo, hi)`` cut into pieces of at most ``chunk`` elements (no pieces if empty)."""
    return [(a, min(a + chunk, hi)) for a in range(lo, hi, chunk)]
