"""lowbw.train.allocator: a training process's step reuses its heap instead of faulting in fresh pages."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

SCRIPT = """
import resource
import torch
from lowbw.train.allocator import steady_allocator
from lowbw.train.optim import FlatOptimizer
print(steady_allocator())
P = 535_818  # the quick profile's MLP: 2.1 MB rows; SGD's update makes two temporaries of a row per step
p, g = torch.randn(1, P), torch.randn(1, P)
opt = FlatOptimizer("sgd", (1, P), "cpu", momentum=0.9, weight_decay=1e-4)
for _ in range(10):
    opt.step(p, g, 1e-3)
f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(40):
    opt.step(p, g, 1e-3)
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0)
"""


@pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="glibc's mallopt")
def test_optimiser_steps_fault_in_no_pages():
    # with glibc's dynamic threshold the 2 MB temporaries are mmapped anew in most fresh processes: 500-1000
    # minor faults a step, 20-40 thousand in 40 steps; with the fixed thresholds they come from the heap, already
    # mapped. A one-off growth of the heap by one row (523 pages of 4 KB, seen once on CI) is not that failure:
    # the bound allows the pages of 4 rows in 40 steps, a tenth of one row per step
    row_pages = 535_818 * 4 // 4096
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, check=True).stdout.split()
    assert out[0] == "True"
    assert int(out[1]) < 4 * row_pages, f"{out[1]} page faults in 40 optimiser steps (bound {4 * row_pages})"


def test_steady_allocator_sets_the_thresholds_once(monkeypatch):
    """mallopt is called with glibc's parameter numbers (malloc.h: M_MMAP_THRESHOLD -3, M_TRIM_THRESHOLD -1)
    and the module's byte counts, once per process however often it is called; not glibc: False, no call."""
    import ctypes

    from lowbw.train import allocator

    calls = []

    class Mallopt:  # a C function: callable, with argtypes to set
        argtypes = None

        def __call__(self, param, value):
            calls.append((param, value))
            return 1

    class GlibcLike:
        def __init__(self, name):
            self.mallopt, self.gnu_get_libc_version = Mallopt(), object()

    class NotGlibc:
        def __init__(self, name):
            self.mallopt = Mallopt()

    allocator.steady_allocator.cache_clear()
    try:
        monkeypatch.setattr(ctypes, "CDLL", GlibcLike)
        assert allocator.steady_allocator() is True and allocator.steady_allocator() is True
        assert calls == [(-3, 32 * 2**20), (-1, 128 * 2**20)]
        allocator.steady_allocator.cache_clear()
        calls.clear()
        monkeypatch.setattr(ctypes, "CDLL", NotGlibc)
        assert allocator.steady_allocator() is False and calls == []
    finally:
        allocator.steady_allocator.cache_clear()
