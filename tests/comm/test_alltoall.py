"""The ``alltoall`` collective (lowbw.comm.alltoall): registered, runs to the rank-order sum, moves and costs
what its schedule says: N-1 pairwise rounds of the whole vector, (N-1) M bytes each way per rank."""

from __future__ import annotations

import pytest
import torch

from lowbw.comm import Meter, ThreadCollective, alltoall, run_threads
from lowbw.comm.algorithms import ALLREDUCE_ALGORITHMS, BROADCAST_FOR
from lowbw.comm.registry import COLLECTIVES
from lowbw.net import costlinks as cl
from lowbw.net import costmodel as cm
from lowbw.net.costlinks import WorkerLink
from lowbw.net.costmodel import LinkParams

L = LinkParams(alpha_s=1e-3, bandwidth_bps=8e6)  # beta = 1 us/byte


def test_registered_with_its_broadcast_and_gather():
    assert COLLECTIVES["alltoall"] is alltoall.SPEC
    assert "alltoall" in ALLREDUCE_ALGORITHMS and BROADCAST_FOR["alltoall"] == "flat"
    assert alltoall.SPEC.gather == "direct"


@pytest.mark.parametrize("n", [2, 3, 5])
def test_sum_in_rank_order_and_bytes(n):
    numel = 7 * n + 3  # does not split evenly: alltoall sends whole vectors anyway
    xs = [torch.randn(numel, generator=torch.Generator().manual_seed(r)) for r in range(n)]
    meters = [Meter() for _ in range(n)]
    colls = ThreadCollective.group(n, "alltoall", chunk_bytes=64, meters=meters)
    outs = run_threads(lambda r, c: c.all_reduce(xs[r].clone()), colls)
    want = xs[0].clone()
    for x in xs[1:]:
        want += x  # x_0 + x_1 + ... in rank order
    for out in outs:
        assert torch.equal(out, want)
    for m in meters:
        call = m.calls[0]
        assert call.bytes_sent == call.bytes_recv == (n - 1) * numel * 4


@pytest.mark.parametrize("n", range(2, 9))
def test_cost_from_its_schedule(n):
    m = 1e6
    # N-1 rounds; in each every link carries one whole vector each way
    assert cm.allreduce_time("alltoall", m, n, L) == pytest.approx((n - 1) * (1e-3 + m * 1e-6))
    assert cm.allreduce_volume("alltoall", m, n) == pytest.approx((n - 1) * m)
    # broadcast: the root sends N-1 copies; all-gather: everyone to everyone at once
    assert cm.collective_time("broadcast", "alltoall", m, n, L) == cm.broadcast_time(m, n, L, "flat")
    assert cm.collective_time("all_gather", "alltoall", m, n, L) == cm.collective_time("all_gather", "direct", m, n, L)
    # unequal links: no per-link form, so the closed form on the slowest link (an upper bound)
    links = [WorkerLink(8e6 * (i + 1), 8e6, 1e-3, 1e-3 * i) for i in range(n)]
    assert cl.links_allreduce_time("alltoall", m, links) == cm.allreduce_time("alltoall", m, n, cl.slowest_link(links))
