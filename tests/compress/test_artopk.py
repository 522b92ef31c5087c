"""ARTopk: leader selection (star / var) and aggregate (count then indices broadcast, values all-reduced / N)."""

from __future__ import annotations

import math

import pytest
import torch

from lowbw.compress import State, make
from lowbw.compress.artopk import choose_leader
from tests.compress.test_aggregate import run_ranks


def test_choose_leader():
    assert [choose_leader("star", s, 3) for s in range(5)] == [0, 1, 2, 0, 1]
    assert choose_leader("var", 0, 3, [1.0, 5.0, 2.0]) == 1
    assert choose_leader("var", 7, 3, [5.0, 1.0, 5.0]) == 0  # ties: lowest rank
    with pytest.raises(ValueError):
        choose_leader("var", 0, 3, [1.0])


def _reference(xs: list[torch.Tensor], leader: int, ratio: float) -> torch.Tensor:
    n = xs[0].numel()
    k = max(1, math.ceil(ratio * n))
    idx = xs[leader].abs().topk(k).indices
    out = torch.zeros(n)
    out[idx] = sum(x[idx] for x in xs) / len(xs)
    return out


@pytest.mark.parametrize("mode", ["star", "var"])
def test_aggregate_two_steps_with_error_feedback(mode):
    world, n, ratio = 3, 200, 0.05
    g = torch.Generator().manual_seed(0)
    steps = [[torch.randn(n, generator=g) * (1 + r) for r in range(world)] for _ in range(2)]
    comp = make("artopk", ratio=ratio, mode=mode)
    states = [State() for _ in range(world)]

    def fn(coll):
        return [comp.aggregate(steps[s][coll.rank], coll, "w", states[coll.rank]) for s in range(2)]

    results, group = run_ranks(world, fn)
    resid = [torch.zeros(n) for _ in range(world)]
    k = math.ceil(ratio * n)
    for s in range(2):
        corrected = [steps[s][r] + resid[r] for r in range(world)]
        if mode == "star":
            leader = s % world
        else:
            leader = max(range(world), key=lambda r: float(corrected[r].var()))
        ref = _reference(corrected, leader, ratio)
        for r in range(world):
            torch.testing.assert_close(results[r][s], ref, rtol=1e-5, atol=1e-6)
        idx = ref.nonzero().squeeze(1)
        for r in range(world):
            resid[r] = corrected[r].clone()
            resid[r][idx] = 0.0
    for r in range(world):
        torch.testing.assert_close(states[r]["w"]["artopk.residual"], resid[r])
    ops = [c.op for c in group.colls[0].calls]
    per_step = (["all_gather"] if mode == "var" else []) + ["broadcast", "broadcast", "all_reduce"]
    assert ops == per_step * 2
    assert [c.nbytes for c in group.colls[0].calls if c.op != "all_gather"][:3] == [8, 4 * k, 4 * k]


def test_single_worker_view_is_topk_with_error_feedback():
    x = torch.randn(100)
    a = make("artopk", ratio=0.1)
    b = make("topk", ratio=0.1)
    sa, sb = State(), State()
    for _ in range(2):
        torch.testing.assert_close(a.decompress(a.compress(x, "w", sa)), b.decompress(b.compress(x, "w", sb)))


def test_empty_tensor_aggregate():
    comp = make("artopk")
    results, _ = run_ranks(2, lambda coll: comp.aggregate(torch.zeros(0), coll, "w", State()))
    assert all(r.numel() == 0 for r in results)
