"""The ``doubling`` collective (lowbw.comm.doubling): registered, runs to the sum over its binary tree of ranks
(the same bits on every rank, run after run), moves the bytes and costs the time its schedule says, worked out
by hand: log2 P swaps of the whole vector, and for N not a power of two a fold and an unfold."""

from __future__ import annotations

import pytest
import torch

from lowbw.comm import Meter, ThreadCollective, doubling, run_threads
from lowbw.comm.algorithms import ALLREDUCE_ALGORITHMS, BROADCAST_FOR
from lowbw.comm.registry import COLLECTIVES, expected
from lowbw.net import calibrated
from lowbw.net import costmodel as cm
from lowbw.net.costmodel import LinkParams

L = LinkParams(alpha_s=1e-3, bandwidth_bps=8e6)  # beta = 1 us/byte


def _tree_sum(xs: list[torch.Tensor]) -> torch.Tensor:
    """The reference: pairs (2i, 2i+1) folded for the N - P ranks beyond the power of two P, then at distance
    d = 1, 2, ... every virtual rank v adds v XOR d's partial sum; N=4: (x0 + x1) + (x2 + x3)."""
    n = len(xs)
    p = 1 << (n.bit_length() - 1)
    r = n - p
    vs = [xs[2 * i] + xs[2 * i + 1] for i in range(r)] + xs[2 * r:]
    d = 1
    while d < p:
        vs = [vs[v] + vs[v ^ d] if v & d == 0 else vs[v ^ d] + vs[v] for v in range(p)]
        d *= 2
    return vs[0]


def _run(n: int, xs: list[torch.Tensor], op: str = "sum", meters=None) -> list[torch.Tensor]:
    colls = ThreadCollective.group(n, "doubling", chunk_bytes=64, meters=meters)
    return run_threads(lambda r, c: c.all_reduce(xs[r].clone(), op), colls)


def test_registered_with_its_broadcast():
    assert COLLECTIVES["doubling"] is doubling.SPEC
    assert "doubling" in ALLREDUCE_ALGORITHMS and BROADCAST_FOR["doubling"] == "tree"


def test_the_reference_tree_by_hand():
    a, b, c, d = (torch.tensor([float(v)]) for v in (1, 2, 3, 4))
    assert torch.equal(_tree_sum([a, b, c, d]), (a + b) + (c + d))
    assert torch.equal(_tree_sum([a, b, c]), (a + b) + c)


@pytest.mark.parametrize("n", range(2, 8))
def test_sum_over_its_tree_on_every_rank_and_its_bytes(n):
    numel = 5 * n + 3
    xs = [torch.randn(numel, generator=torch.Generator().manual_seed(r)) for r in range(n)]
    meters = [Meter() for _ in range(n)]
    outs = _run(n, xs, meters=meters)
    want = _tree_sum(xs)
    for out in outs:
        assert torch.equal(out, want)  # the same bits everywhere
    assert torch.equal(_run(n, xs)[0], want)  # and run after run
    # integers: exact in any order, so the rank-order sum too
    ints = [torch.randint(-100, 100, (numel,), generator=torch.Generator().manual_seed(r)).float() for r in range(n)]
    assert torch.equal(_run(n, ints)[n - 1], sum(ints[1:], ints[0]))
    # bytes by hand: P = 4 for n = 4..7, R = n - 4; a folding rank sends M, its partner (k + 1) M, the rest k M
    p = 1 << (n.bit_length() - 1)
    k, r_ = p.bit_length() - 1, n - p
    M = numel * 4
    for rank, m in enumerate(meters):
        sent = M if rank < 2 * r_ and rank % 2 == 0 else (k + 1) * M if rank < 2 * r_ else k * M
        assert m.calls[0].bytes_sent == m.calls[0].bytes_recv == sent == expected("doubling", M, n, rank)[0]


def test_average_divides_once_at_the_end():
    xs = [torch.full((9,), float(r + 1)) for r in range(4)]
    for out in _run(4, xs, op="avg"):
        assert torch.equal(out, torch.full((9,), 2.5))


@pytest.mark.parametrize(("n", "steps", "link"), [(2, 1, 1), (4, 2, 2), (8, 3, 3), (3, 3, 3), (5, 4, 4), (6, 4, 4)])
def test_cost_from_its_schedule(n, steps, link):
    m = 1e6
    # steps: log2 P swaps (+ fold and unfold); each carries the whole vector M on the busiest link
    assert doubling.cost(n).steps == steps and doubling.cost(n).link_bytes == link
    assert cm.allreduce_time("doubling", m, n, L) == pytest.approx(steps * 1e-3 + link * m * 1e-6)
    # against the ring on 8 workers: 3 steps instead of 14, 3 M instead of 1.75 M on the link
    if n == 8:
        assert cm.allreduce_time("doubling", 1e3, 8, L) < cm.allreduce_time("ring", 1e3, 8, L)
        assert cm.allreduce_time("doubling", 1e7, 8, L) > cm.allreduce_time("ring", 1e7, 8, L)


def test_handshakes_and_step_messages_by_hand():
    assert calibrated.handshake_steps("doubling", 4) == 2 and calibrated.handshake_steps("doubling", 6) == 3
    assert doubling.step_messages(100.0, 4, 64.0) == [(100.0, "exchange")] * 2
    assert doubling.step_messages(100.0, 6, 64.0) == [(100.0, "fold"), *[(100.0, "exchange")] * 3]
