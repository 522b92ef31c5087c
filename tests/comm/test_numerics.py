"""Reducer.reduce_ordered: the rank-order reduction without copies equals the plain accumulate, bit for bit."""

from __future__ import annotations

import pytest
import torch

from lowbw.comm.numerics import OPS, Reducer


def _reference(op: str, xs: list[torch.Tensor], n: int) -> torch.Tensor:
    """((x_0 op x_1) op x_2) ... in fp32 for half types, then /n for avg, rounded once."""
    acc = xs[0].to(torch.float32 if xs[0].dtype in (torch.float16, torch.bfloat16) else xs[0].dtype, copy=True)
    for x in xs[1:]:
        x = x.to(acc.dtype)
        acc = {"sum": torch.add, "avg": torch.add, "prod": torch.mul, "max": torch.maximum,
               "min": torch.minimum}[op](acc, x)
    if op == "avg":
        acc = acc / n
    return acc.to(xs[0].dtype)


# avg on integers is rejected by Reducer (tested in test_comm_allreduce)
CASES = [(op, dt) for op in OPS for dt in (torch.float32, torch.float16, torch.bfloat16, torch.int64)
         if dt.is_floating_point or op != "avg"]


@pytest.mark.parametrize("op,dtype", CASES)
@pytest.mark.parametrize("n", [1, 2, 3, 5])
def test_reduce_ordered_bit_identical_wherever_the_own_part_sits(op, dtype, n):
    g = torch.Generator().manual_seed(n)
    if dtype.is_floating_point:
        xs = [torch.randn(257, generator=g).mul(1 + 0.7 * i).to(dtype) for i in range(n)]
    else:
        xs = [torch.randint(-50, 50, (257,), generator=g, dtype=dtype) for _ in range(n)]
    want = _reference(op, xs, n)
    red = Reducer(op, dtype, n)
    for own in [None, *range(n)]:
        parts = [None if i == own else x.clone() for i, x in enumerate(xs)]
        dst = xs[own].clone() if own is not None else torch.empty_like(xs[0])
        red.reduce_ordered(dst, parts)
        assert torch.equal(dst, want), (op, dtype, n, own)
        # only p_0 is scratch, and only when it precedes the own part
        for i in range(1, n):
            if parts[i] is not None:
                assert torch.equal(parts[i], xs[i])


def test_reduce_ordered_half_types_leave_p0_intact():
    """Half types keep p_0 intact (they reduce in a separate fp32 accumulator)."""
    xs = [torch.randn(10).half() for _ in range(3)]
    parts = [xs[0].clone(), xs[1].clone(), None]
    dst = xs[2].clone()
    Reducer("sum", torch.float16, 3).reduce_ordered(dst, parts)
    assert torch.equal(parts[0], xs[0])
