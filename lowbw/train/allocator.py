"""Steady CPU step times: glibc's malloc thresholds fixed for a training process.

PyTorch's CPU tensors come from ``posix_memalign``. glibc serves a request at or above its mmap threshold
with a fresh ``mmap``: its pages fault in, one by one, when first written, and go back to the kernel on
``free``. The threshold starts at 128 KB and then follows the largest mmapped chunk freed so far (up to
32 MB). A training step's temporaries of 128 KB to a few MB (activations, the optimiser's clone of the
gradient, DDP's concatenated gradient, gloo's buffers) therefore cost a page fault per 4 KB on *every* step in
one process and none in another, depending only on what each happened to free before. That is CPU time the
step spends in the kernel, different per worker and per run, which a simulator cannot predict and a
benchmark should not measure.

:func:`steady_allocator` sets both thresholds once (``mallopt``, as the ``MALLOC_MMAP_THRESHOLD_`` and
``MALLOC_TRIM_THRESHOLD_`` environment variables would before start): requests below
:data:`MMAP_THRESHOLD_BYTES` come from the heap, and the heap keeps up to :data:`TRIM_THRESHOLD_BYTES` of
freed memory for the next step rather than unmapping it (the next step reuses it at once). Every lowbw
training process calls it (the sim, each ``procs``/torchrun worker, the benchmarks that time steps). Larger
requests (a big model's full gradient) are mmapped (glibc's rule above the threshold).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools

__all__ = ["MMAP_THRESHOLD_BYTES", "TRIM_THRESHOLD_BYTES", "steady_allocator"]

MMAP_THRESHOLD_BYTES = 32 << 20  # requests below this come from the heap (glibc's largest dynamic value)
TRIM_THRESHOLD_BYTES = 128 << 20  # freed memory at the heap's top that is kept for reuse, not unmapped
_M_TRIM_THRESHOLD = -1  # glibc's mallopt parameter numbers (malloc.h)
_M_MMAP_THRESHOLD = -3


@functools.cache
def steady_allocator() -> bool:
    """Fix glibc's mmap and trim thresholds for this process (once); True if they are set, False where the C
    library is not glibc (macOS, musl), which leaves the allocator as it is."""
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
        libc.gnu_get_libc_version  # noqa: B018  (glibc only)
    except (OSError, AttributeError, TypeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    return bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)) and bool(mallopt(_M_TRIM_THRESHOLD,
                                                                                     TRIM_THRESHOLD_BYTES))
