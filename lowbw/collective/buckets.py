"""Buckets as DDP forms them: which tensors of a model travel together, one collective call per bucket.

The tensors, in reverse order of the model's parameters (the order backward produces their gradients), are
put into buckets of about ``bucket_mb`` MB (``DEFAULT_BUCKET_MB`` = 25, DDP's ``bucket_cap_mb``): a tensor
joins the open bucket, and the bucket closes once it holds ``bucket_mb`` MB or more (DDP's
``_compute_bucket_assignment_by_size``), so a bucket overshoots the cap by at most its last tensor and a tensor
larger than the cap is a bucket of its own. Deliberate variant: DDP caps its *first* bucket at 1 MB
(``first_bucket_bytes_cap``) so that the first all-reduce starts early in the backward pass; lowbw exchanges
after the backward pass, so every bucket has the same cap. The sizes are the tensors' fp32 bytes (what DDP
counts), whatever their compressed payloads are.

The number of messages of a bucketed exchange is then a property of the bucket size: ``len(assign(...))``
buckets, each one call per round of its compressor (:mod:`lowbw.comm.packing`). Pure index arithmetic,
no torch: the trainer, the collectives' benchmark and the advisor (``lowbw advise --bucket-mb``) share it.
"""

from __future__ import annotations

__all__ = ["DEFAULT_BUCKET_MB", "assign", "cap_bytes"]

DEFAULT_BUCKET_MB = 25.0  # DDP's bucket_cap_mb default


def cap_bytes(bucket_mb: float) -> int:
    """The bucket cap in bytes (MB = 2**20 bytes, as DDP's ``bucket_cap_mb``); a clear error for a cap <= 0."""
    if not bucket_mb > 0:
        raise ValueError(f"bucket_mb={bucket_mb!r}: must be > 0 (MB per bucket, as DDP's bucket_cap_mb)")
    return int(bucket_mb * (1 << 20))


def assign(nbytes: list[int] | tuple[int, ...], bucket_mb: float = DEFAULT_BUCKET_MB) -> list[list[int]]:
    """Buckets of the tensors whose sizes (bytes, in model order) are ``nbytes``: lists of tensor indices.

    1. walk the tensors from last to first (the order their gradients are ready in the backward pass);
    2. append each to the open bucket; close the bucket once its bytes reach the cap;
    3. a last, partly filled bucket closes at the end.

    Each bucket lists its tensors in model order (ascending indices: a contiguous range of the flat row),
    and the buckets come in the order they close (the model's end first), as DDP's do.
    """
    cap = cap_bytes(bucket_mb)
    out: list[list[int]] = []
    cur: list[int] = []
    size = 0
    for i in reversed(range(len(nbytes))):
        cur.append(i)
        size += int(nbytes[i])
        if size >= cap:
            out.append(sorted(cur))
            cur, size = [], 0
    if cur:
        out.append(sorted(cur))
    return out
