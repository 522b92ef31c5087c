"""The cost model on per-worker links: equal links reproduce the star model; a ring is bounded by its
slowest link; a parameter server's placement matters."""

from __future__ import annotations

import pytest

from lowbw.compress.protocol import CallRecord
from lowbw.net import costlinks as cl
from lowbw.net import costmodel as cm
from lowbw.net.costlinks import WorkerLink, best_root, links_allreduce_time, message_time, ps_time, ring_time
from lowbw.net.link import LinkSpec

M = 4e6  # bytes
FAST, SLOW = 1e9, 1e7


@pytest.mark.parametrize("algorithm", ["ring", "native", "ps", "tree", "butterfly", "allgather"])
@pytest.mark.parametrize("n", [2, 3, 4])
def test_equal_links_reproduce_the_star_model(algorithm, n):
    link = cm.LinkParams(alpha_s=0.002, bandwidth_bps=1e8)
    links = [WorkerLink.symmetric(link)] * n
    assert links_allreduce_time(algorithm, M, links) == pytest.approx(cm.allreduce_time(algorithm, M, n, link))


def test_message_crosses_the_senders_uplink_and_the_receivers_downlink():
    a, b = WorkerLink(1e8, 1e9, 0.01, 0.0), WorkerLink(1e9, 1e7, 0.0, 0.005)
    assert message_time(a, b, 1e6) == pytest.approx(0.01 + 0.005 + 8e6 / 1e7)
    assert message_time(b, a, 1e6) == pytest.approx(8e6 / 1e9)


def test_a_ring_is_bounded_by_its_slowest_link():
    fast = WorkerLink(FAST, FAST)
    one_slow = [fast, fast, WorkerLink(SLOW, SLOW), fast]
    all_slow = [WorkerLink(SLOW, SLOW)] * 4
    assert ring_time(M, one_slow) == pytest.approx(ring_time(M, all_slow)) == pytest.approx(2 * 3 * 8 * M / 4 / SLOW)
    # only a slow *uplink*: still every step waits for it
    assert ring_time(M, [fast, WorkerLink(SLOW, FAST), fast]) == pytest.approx(2 * 2 * 8 * M / 3 / SLOW)


def test_parameter_server_placement_matters():
    links = [WorkerLink(SLOW, SLOW), WorkerLink(FAST, FAST), WorkerLink(FAST, FAST), WorkerLink(FAST, FAST)]
    on_slow, on_fast = ps_time(M, links, root=0), ps_time(M, links, root=1)
    # root on the slow link: 3 M through its 10 Mbit/s downlink and again through its uplink
    assert on_slow == pytest.approx(2 * 3 * 8 * M / SLOW)
    # root on a fast link: the slow worker's own M each way bounds it
    assert on_fast == pytest.approx(2 * 8 * M / SLOW)
    assert best_root(M, links) == (1, pytest.approx(on_fast))
    # a ring moves 2 (N-1)/N M through the slow link, 3/4 of the well-placed PS's 2 M
    assert ring_time(M, links) == pytest.approx(0.75 * on_fast)


def test_shared_link_and_caps():
    # PS root's downlink 100 Mbit/s shared by 3 senders of 1 Gbit/s: 3 M at 100; with one sender capped at
    # 10 Mbit/s that sender's M at 10 is longer
    root = WorkerLink(1e8, 1e8)
    links = [root, WorkerLink(FAST, FAST), WorkerLink(FAST, FAST), WorkerLink(FAST, FAST)]
    assert ps_time(M, links, 0) == pytest.approx(2 * 3 * 8 * M / 1e8)
    links[3] = WorkerLink(SLOW, FAST)  # slow uplink only: gather waits for it, broadcast does not
    assert ps_time(M, links, 0) == pytest.approx(8 * M / SLOW + 3 * 8 * M / 1e8)


def test_other_algorithms_use_the_slowest_link_as_a_bound():
    links = [WorkerLink(FAST, FAST, 0.001), WorkerLink(FAST, SLOW, 0.0, 0.004)]
    slowest = cm.LinkParams(alpha_s=0.005, bandwidth_bps=SLOW)
    assert links_allreduce_time("tree", M, links) == pytest.approx(cm.allreduce_time("tree", M, 2, slowest))


def test_from_testbed_links_and_bad_values():
    w = WorkerLink.from_spec(LinkSpec.parse("10mbit", delay="20ms", up="2mbit", down_delay="1ms"), alpha_s=1e-4)
    assert w == WorkerLink(2e6, 1e7, 0.0201, 0.001)
    with pytest.raises(ValueError, match="rate in both directions"):
        WorkerLink.from_spec(LinkSpec.parse(None))
    with pytest.raises(ValueError, match="root 4 is not a rank of 4"):
        ps_time(M, [WorkerLink(1, 1)] * 4, root=4)
    with pytest.raises(ValueError, match="invalid worker link"):
        WorkerLink(0, 1)
    with pytest.raises(ValueError, match="unknown all-reduce"):
        links_allreduce_time("gossip", M, [WorkerLink(1, 1)] * 2)
    assert ring_time(M, [WorkerLink(1, 1)]) == 0.0 and ps_time(M, [WorkerLink(1, 1)]) == 0.0


# ------------------------------------------------------------------ all-gather, broadcast, call sequences
LINK = cm.LinkParams(alpha_s=0.002, bandwidth_bps=1e8)


@pytest.mark.parametrize("n", [2, 3, 4])
@pytest.mark.parametrize("algorithm", ["ring", "native", "ps", "tree", "alltoall", "butterfly"])
def test_equal_links_give_the_star_models_call_times(n, algorithm):
    """calls_time on equal per-worker links == lowbw.net.costmodel.calls_time: all-reduce, all-gather of
    unequal (compressed) payloads, broadcast; one rank's sequence and per-rank lists."""
    links = [WorkerLink.symmetric(LINK)] * n
    seq = [CallRecord("all_reduce", 4000, algorithm, n), CallRecord("broadcast", 300, algorithm, n),
           CallRecord("all_gather", 1000, algorithm, n)]
    assert cl.calls_time(seq, links) == pytest.approx(cm.calls_time(seq, LINK), rel=1e-12)
    per_rank = [[CallRecord("all_gather", 1000 + 100 * r, algorithm, n), CallRecord("all_reduce", 64, algorithm, n)]
                for r in range(n)]
    assert cl.calls_time(per_rank, links) == pytest.approx(cm.calls_time(per_rank, LINK), rel=1e-12)
    for how in ("tree", "flat", "pipeline"):
        assert cl.broadcast_time(M, links, how) == pytest.approx(cm.broadcast_time(M, n, LINK, how), rel=1e-12)
    for how in ("ring", "direct"):
        sizes = [1e5 * (r + 1) for r in range(n)]
        assert cl.allgather_time(sizes, links, how) == pytest.approx(cm.allgather_time(sizes, n, LINK, how), rel=1e-12)
    assert cl.collective_time("art_topk", "ring", M, links, density=0.01) == pytest.approx(
        cm.collective_time("art_topk", "ring", M, n, LINK, density=0.01), rel=1e-12)


def test_ring_allgather_is_bounded_by_its_slowest_hop():
    # hop 1 -> 2 runs at 10 Mbit/s (worker 2's downlink): it forwards everything but worker 2's contribution
    links = [WorkerLink(FAST, FAST, 0.001), WorkerLink(FAST, FAST, 0.003), WorkerLink(FAST, SLOW),
             WorkerLink(FAST, FAST)]
    sizes = [1e5, 2e5, 3e5, 4e5]
    assert cl.allgather_time(sizes, links, "ring") == pytest.approx(3 * 0.003 + 8 * (1e6 - 3e5) / SLOW)
    # direct: worker 2's downlink takes the other three at 10 Mbit/s
    assert cl.allgather_time(sizes, links, "direct") == pytest.approx(0.003 + 8 * 7e5 / SLOW)


def test_broadcast_from_the_root_over_unequal_links():
    links = [WorkerLink(SLOW, FAST), WorkerLink(FAST, FAST), WorkerLink(FAST, FAST)]
    # flat: the root's 10 Mbit/s uplink sends two copies; pipeline: every byte once through it
    assert cl.broadcast_time(M, links, "flat") == pytest.approx(2 * 8 * M / SLOW)
    assert cl.broadcast_time(M, links, "pipeline") == pytest.approx(8 * M / SLOW)
    # from rank 1 the chain 1 -> 2 -> 0 never uses the slow uplink
    assert cl.broadcast_time(M, links, "pipeline", root=1) == pytest.approx(8 * M / FAST)
    with pytest.raises(ValueError, match="unknown broadcast"):
        cl.broadcast_time(M, links, "gossip")
    with pytest.raises(ValueError, match="3 sizes for 2 links"):
        cl.allgather_time([1, 2, 3], links[:2])


def test_one_slow_worker_sets_a_ring_calls_time():
    links = [WorkerLink(FAST, FAST)] * 3 + [WorkerLink(SLOW, SLOW)]
    seq = [CallRecord("all_reduce", int(M), "ring", 4)]
    assert cl.calls_time(seq, links) == pytest.approx(2 * 3 * 8 * (M / 4) / SLOW)
