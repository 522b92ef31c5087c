"""Compressor.aggregate through the Collective protocol, with a tiny threaded fake collective (in this file).

Every compressor's aggregate over N ranks must equal the mean of what each rank's payload decompresses to;
summable compressors use only all-reduce, the others all-gather (with empty parts allowed: no hang).
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable
from typing import Any

import pytest
import torch

from lowbw.compress import CallRecord, Collective, Compressor, State, available, make

# ---------------------------------------------------------------------------------------------------------
# a list-based, threaded fake of the Collective protocol (deterministic: sums in rank order)


class FakeGroup:
    def __init__(self, world_size: int, timeout: float = 30.0):
        self.world_size = world_size
        self.barrier = threading.Barrier(world_size, timeout=timeout)
        self.slots: list[Any] = [None] * world_size
        self.colls = [FakeCollective(self, r) for r in range(world_size)]


class FakeCollective:
    def __init__(self, group: FakeGroup, rank: int):
        self.group, self.rank, self.world_size = group, rank, group.world_size
        self.calls: list[CallRecord] = []

    def _exchange(self, op: str, t: torch.Tensor) -> list[torch.Tensor]:
        self.calls.append(CallRecord(op, t.numel() * t.element_size(), "fake", self.world_size))
        g = self.group
        g.slots[self.rank] = t.detach().clone()
        g.barrier.wait()
        vals = list(g.slots)
        g.barrier.wait()
        return vals

    def all_reduce(self, tensor: torch.Tensor) -> torch.Tensor:
        vals = self._exchange("all_reduce", tensor)
        assert all(v.shape == tensor.shape and v.dtype == tensor.dtype for v in vals), "all_reduce shape mismatch"
        out = vals[0].clone()
        for v in vals[1:]:
            out += v
        return out

    def all_gather(self, tensor: torch.Tensor) -> list[torch.Tensor]:
        assert tensor.dim() == 1, "all_gather takes 1-D tensors"
        vals = self._exchange("all_gather", tensor)
        assert all(v.dtype == tensor.dtype for v in vals), "all_gather dtype mismatch"
        return [v.clone() for v in vals]

    def broadcast(self, tensor: torch.Tensor, src: int) -> torch.Tensor:
        vals = self._exchange("broadcast", tensor)
        assert vals[src].shape == tensor.shape and vals[src].dtype == tensor.dtype, "broadcast shape mismatch"
        return vals[src].clone()


def run_ranks(world_size: int, fn: Callable[[FakeCollective], Any]) -> tuple[list[Any], FakeGroup]:
    """Run ``fn(coll)`` on ``world_size`` threads; return the per-rank results (re-raising any error)."""
    group = FakeGroup(world_size)
    results: list[Any] = [None] * world_size
    errors: list[BaseException] = []

    def target(r: int) -> None:
        try:
            results[r] = fn(group.colls[r])
        except BaseException as e:  # noqa: BLE001 - re-raised below
            errors.append(e)
            group.barrier.abort()

    threads = [threading.Thread(target=target, args=(r,)) for r in range(world_size)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads), "a rank hung"
    if errors:
        raise errors[0]
    return results, group


def test_fake_collective_satisfies_protocol():
    assert isinstance(FakeGroup(1).colls[0], Collective)
    # and behaves as one: rank r contributes r + 1; the sum is 1 + 2 + 3, the gather in rank order
    res, _ = run_ranks(3, lambda c: (c.all_reduce(torch.full((2,), c.rank + 1.0)),
                                     c.all_gather(torch.tensor([c.rank + 1.0]))))
    for total, gathered in res:
        assert torch.equal(total, torch.full((2,), 6.0))
        assert [float(g) for g in gathered] == [1.0, 2.0, 3.0]


# ---------------------------------------------------------------------------------------------------------
CUSTOM = {"powersgd", "artopk", "demo"}  # their own aggregate (demo: sign of the average), own test files


def _inputs(world: int, shape=(40, 25), seed=0) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(shape, generator=g) * (r + 1) for r in range(world)]


@pytest.mark.parametrize("name", sorted(set(available()) - CUSTOM))
@pytest.mark.parametrize("world", [3])
def test_aggregate_is_mean_of_decompressed(name, world):
    """Two steps (so error feedback / momentum state matter): aggregate == mean over ranks of decompress, or the
    compressor's own ``combine`` of the payloads where it overrides the mean."""
    params = {"alpha": 1.0} if name == "threshold" else {}
    comp = make(name, **params)
    steps = [_inputs(world, seed=s) for s in range(2)]
    states = [State(seed=100 + r) for r in range(world)]
    mirror = copy.deepcopy(states)

    def fn(coll):
        return [comp.aggregate(steps[s][coll.rank], coll, "w", states[coll.rank]) for s in range(2)]

    results, group = run_ranks(world, fn)
    for s in range(2):
        payloads = [comp.compress(steps[s][r], "w", mirror[r]) for r in range(world)]
        if type(comp).combine is Compressor.combine:
            expect = torch.stack([comp.decompress(p) for p in payloads]).mean(0)
        else:  # the authors' own average (SparseLoCo: over the workers that sent each index)
            expect = comp.combine(payloads, torch.zeros(steps[s][0].numel())).view_as(steps[s][0])
        # fp16/bf16 divide by N before the cast (as torch's hook does): equal up to their rounding
        tol = {"fp16": 5e-3, "bf16": 5e-2}.get(name, 1e-5)
        for r in range(world):
            torch.testing.assert_close(results[r][s], expect, rtol=tol, atol=tol)
    ops = {c.op for coll in group.colls for c in coll.calls}
    assert ops == ({"all_reduce"} if comp.summable else {"all_gather"})


def _keep_largest(x: torch.Tensor, k: int) -> torch.Tensor:
    flat = x.reshape(-1)
    out = torch.zeros_like(flat)
    order = sorted(range(flat.numel()), key=lambda i: -abs(float(flat[i])))[:k]
    out[order] = flat[order]
    return out.reshape(x.shape)


@pytest.mark.parametrize(("name", "reference"), [
    ("none", lambda x: x),
    ("fp16", lambda x: x.half().float()),
    ("bf16", lambda x: x.bfloat16().float()),
    ("topk", lambda x: _keep_largest(x, 10)),  # ratio 0.01 of 1000 entries; no residual yet on a first step
])
def test_aggregate_alone_is_the_compressed_input(name, reference):
    """World 1, first step: the average of one rank's contribution is that rank's gradient as its compressor
    keeps it, here computed without the compressor (a cast; the 10 largest magnitudes)."""
    comp = make(name)
    x = _inputs(1)[0]
    res, _ = run_ranks(1, lambda c: comp.aggregate(x, c, "w", State(seed=0)))
    assert torch.equal(res[0], reference(x))


@pytest.mark.parametrize("name", ["blockwise", "topk", "signsgd", "qsgd", "randomk", "fp16"])
def test_call_bytes_equal_payload_bytes(name):
    comp = make(name)
    x = _inputs(2)

    def fn(coll):
        comp.aggregate(x[coll.rank], coll, "w", State(seed=coll.rank))
        return sum(c.nbytes for c in coll.calls)

    sent, _ = run_ranks(2, fn)
    for r in range(2):
        assert sent[r] == comp.compress(x[r], "w", State(seed=r)).data_nbytes


def test_empty_payload_on_some_ranks_does_not_hang():
    """GRACE's gloo hang: a threshold drops everything on one rank (empty parts) but not on another."""
    comp = make("threshold", alpha=0.5, error_feedback=False)
    x = [torch.zeros(100), torch.linspace(-1, 1, 100)]
    results, _ = run_ranks(2, lambda coll: comp.aggregate(x[coll.rank], coll, "w", State()))
    expect = torch.where(x[1].abs() >= 0.5, x[1], torch.zeros(())) / 2
    for r in results:
        torch.testing.assert_close(r, expect)


def test_empty_everywhere_and_empty_tensor():
    comp = make("topk")
    results, _ = run_ranks(3, lambda coll: comp.aggregate(torch.zeros(0, 4), coll, "w", State()))
    assert all(r.shape == (0, 4) for r in results)
    comp = make("threshold", alpha=10.0)
    results, _ = run_ranks(2, lambda coll: comp.aggregate(torch.ones(7), coll, "w", State()))
    assert all(torch.equal(r, torch.zeros(7)) for r in results)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_aggregate_keeps_dtype(dtype):
    comp = make("blockwise")
    x = [t.to(dtype) for t in _inputs(2)]
    results, _ = run_ranks(2, lambda coll: comp.aggregate(x[coll.rank], coll, "w", State()))
    assert results[0].dtype == dtype and results[0].shape == x[0].shape
    torch.testing.assert_close(results[0].float(), (x[0].float() + x[1].float()) / 2, rtol=0.05, atol=0.05)


def test_fp16_aggregate_divides_before_sum():
    """Like torch's fp16 hook: N values near fp16's max do not overflow in the all-reduced sum."""
    comp = make("fp16")
    x = torch.full((8,), 60000.0)
    results, _ = run_ranks(3, lambda coll: comp.aggregate(x, coll, "w", State()))
    assert torch.isfinite(results[0]).all()
    torch.testing.assert_close(results[0], x, rtol=1e-3, atol=0)
