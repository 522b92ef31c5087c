"""The alpha-beta cost model: hand-computed values of every formula, crossovers, calibration on synthetic data."""

from __future__ import annotations

import math
import random

import pytest

from lowbw.comm.algorithms import ALLREDUCE_ALGORITHMS
from lowbw.comm.tree import HEAP_TREE_MAX_CHUNK_BYTES
from lowbw.compress.protocol import CallRecord
from lowbw.net import costfit
from lowbw.net import costmodel as cm
from lowbw.net.costmodel import LinkParams

# alpha = 1 ms, 8 Mbit/s -> beta = 1 us/byte; M = 1e6 bytes -> M beta = 1 s
L = LinkParams(alpha_s=1e-3, bandwidth_bps=8e6)
M = 1e6


def test_units():
    assert cm.parse_rate("100mbit") == 1e8
    assert cm.parse_rate("1gbit") == 1e9
    assert cm.parse_rate("500kbit") == 5e5
    assert cm.parse_rate("1MB/s") == 8e6  # bytes only spelled out; "1mbps" is refused (tests/net/test_units.py)
    assert cm.parse_rate(123.0) == 123.0  # a number (not text) is bits/s
    assert cm.parse_time("5ms") == pytest.approx(0.005)
    assert cm.parse_time("100us") == pytest.approx(1e-4)
    assert cm.parse_time(None) == 0.0
    for bad in ("fast", "10 parsecs", "-1mbit", "1mbps", "10"):
        with pytest.raises(ValueError):
            cm.parse_rate(bad)
    assert L.beta == pytest.approx(1e-6)
    assert LinkParams.from_spec("8mbit", "1ms") == L
    with pytest.raises(ValueError):
        LinkParams(alpha_s=-1, bandwidth_bps=1)


@pytest.mark.parametrize("alg, expected", [
    ("ps", 2e-3 + 6.0),            # 2a + 2(N-1) M b
    ("ring", 6e-3 + 1.5),          # 2(N-1) a + 2(N-1)/N M b
    ("native", 6e-3 + 1.5),        # gloo's ring
    ("tree", 4e-3 + 4.0),          # 2a logN + 2 logN M b (N = 4: the pipelined binary tree agrees)
    ("butterfly", 4e-3 + 1.5),     # 2a logN + 2(N-1)/N M b
    ("alltoall", 3e-3 + 3.0),      # (N-1) a + (N-1) M b (N-1 pairwise rounds)
    ("roundrobin", 6e-3 + 1.5),    # 2(N-1) a + 2(N-1)/N M b
    ("allgather", 3e-3 + 3.0),     # (N-1) a + (N-1) M b
])
def test_allreduce_formulas_n4(alg, expected):
    assert cm.allreduce_time(alg, M, 4, L) == pytest.approx(expected)


def test_talk_formulas():
    assert cm.talk_allreduce_time("ps", M, 4, L) == pytest.approx(2e-3 + 6.0)
    assert cm.talk_allreduce_time("ring", M, 4, L) == pytest.approx(6e-3 + 1.5)
    assert cm.talk_allreduce_time("tree", M, 8, L) == pytest.approx(6e-3 + 6.0)  # 2a*3 + 2*3*M b
    assert cm.talk_allreduce_time("butterfly", M, 8, L) == pytest.approx(6e-3 + 1.75)
    # our pipelined tree: the root's link carries 2 vectors per phase whatever N is
    assert cm.allreduce_time("tree", M, 8, L) == pytest.approx(6e-3 + 4.0)
    with pytest.raises(ValueError):
        cm.talk_allreduce_time("alltoall", M, 4, L)


def test_non_power_of_two_and_edge_cases():
    # butterfly N=3: fold rank 0 into 1 (M), butterfly on 2 (M), unfold (M)
    assert cm.allreduce_time("butterfly", M, 3, L) == pytest.approx(4e-3 + 3.0)
    assert cm.allreduce_time("tree", M, 3, L) == pytest.approx(2e-3 + 4.0)  # root has two children, depth 1
    assert cm.allreduce_time("tree", M, 2, L) == pytest.approx(2e-3 + 2.0)
    for alg in ALLREDUCE_ALGORITHMS:
        assert cm.allreduce_time(alg, M, 1, L) == 0.0
        assert cm.allreduce_time(alg, 0, 4, LinkParams(0.0, 1e6)) == 0.0
    with pytest.raises(ValueError, match="unknown"):
        cm.allreduce_time("carrier-pigeon", M, 4, L)
    with pytest.raises(ValueError):
        cm.allreduce_time("ring", -1, 4, L)


def test_volumes_match_the_byte_meter_formulas():
    assert cm.allreduce_volume("ring", M, 4) == pytest.approx(1.5 * M)   # 2(N-1)/N M per rank
    assert cm.allreduce_volume("ps", M, 4) == pytest.approx(6 * M)       # the root carries 2(N-1) M
    assert cm.lower_bound(M, 4) == pytest.approx(1.5 * M)


def test_lower_bound_is_a_lower_bound():
    for n in range(2, 9):
        lb = cm.lower_bound(M, n, L)
        assert lb == pytest.approx(2 * (n - 1) / n)
        for alg in ALLREDUCE_ALGORITHMS:
            assert cm.allreduce_time(alg, M, n, L) >= lb - 1e-12


def test_allgather_broadcast_art_and_compressed():
    assert cm.allgather_time(M, 4, L) == pytest.approx(3e-3 + 3.0)
    # variable sizes: the rank that contributed nothing receives everything else
    assert cm.allgather_time([M, 2 * M, 0, M], 4, L) == pytest.approx(3e-3 + 4.0)
    assert cm.allgather_time([M], None, L) == 0.0
    assert cm.broadcast_time(M, 4, L, "tree") == pytest.approx(2 * (1e-3 + 1.0))
    assert cm.broadcast_time(M, 4, L, "flat") == pytest.approx(1e-3 + 3.0)
    assert cm.broadcast_time(M, 4, L, "pipeline") == pytest.approx(3e-3 + 1.0)
    c = 0.01
    # ART-ring = a[2(N-1) + logN] + M c b [2(N-1)/N + logN]
    assert cm.art_topk_time(M, c, 4, L, "ring") == pytest.approx(1e-3 * (6 + 2) + 0.01 * (1.5 + 2))
    # ART-tree = 3 a logN + 3 M c b logN
    assert cm.art_topk_time(M, c, 4, L, "tree") == pytest.approx(3 * 1e-3 * 2 + 3 * 0.01 * 2)
    assert cm.compressed_allgather_time(M * c, 4, L) == pytest.approx(3e-3 + 3 * 0.01)
    assert cm.collective_time("art_topk", "tree", M, 4, L, density=c) == cm.art_topk_time(M, c, 4, L, "tree")
    with pytest.raises(ValueError):
        cm.art_topk_time(M, 2.0, 4, L)


def test_collective_time_and_calls_time():
    calls = [CallRecord("all_reduce", int(M), "ring", 4), CallRecord("all_gather", int(M), "ring", 4),
             CallRecord("broadcast", int(M), "tree", 4)]
    # lowbw.comm's all_gather first all-gathers the sizes: (N-1) more latency terms, no bandwidth
    want = (6e-3 + 1.5) + (3e-3 + 3e-3 + 3.0) + 2 * (1e-3 + 1.0)
    assert cm.calls_time(calls, L) == pytest.approx(want)
    assert cm.calls_time([], L) == 0.0
    assert cm.collective_time("all_gather", "ring", M, 4, L, exchange_sizes=False) == pytest.approx(3e-3 + 3.0)
    # per-rank lists: all_gather uses every rank's own contribution
    per_rank = [[CallRecord("all_gather", s, "ring", 4)] for s in (int(M), int(2 * M), 0, int(M))]
    assert cm.calls_time(per_rank, L) == pytest.approx(3e-3 + 3e-3 + 4.0)
    with pytest.raises(ValueError, match="op"):
        cm.collective_time("scatter", "ring", M, 4, L)


def test_step_time_and_minimum_training_time():
    assert cm.step_time(1.0, 0.5, 0.1) == pytest.approx(1.6)
    assert cm.step_time(1.0, 0.5, 0.1, overlap=True) == pytest.approx(1.0)
    assert cm.step_time(0.2, 0.5, 0.1, overlap=True) == pytest.approx(0.6)
    r = cm.min_training_time(1000, 0.1, M, 4, L)  # comm bound: 1.5 s per step
    assert r["min_s"] == pytest.approx(1500) and r["bound"] == "communication"
    r = cm.min_training_time(1000, 2.0, M, 4, L)
    assert r["min_s"] == pytest.approx(2000) and r["bound"] == "compute"


def test_crossovers():
    # ring (6 latency steps, 1.5 M) vs ps (2 steps, 6 M) at N=4: M* = (2-6) a / ((1.5-6) b) = 888.9 bytes
    m = cm.crossover_nbytes("ring", "ps", 4, L)
    assert m == pytest.approx(4e-3 / 4.5e-6)
    assert cm.best_algorithm(m / 10, 4, L, ["ring", "ps"]) == "ps"
    assert cm.best_algorithm(m * 10, 4, L, ["ring", "ps"]) == "ring"
    # never cross: same bytes, fewer steps always wins
    assert cm.crossover_nbytes("butterfly", "roundrobin", 4, L) is None
    # bandwidth-bound regime: a bandwidth-optimal algorithm wins; latency-bound: few steps win
    assert cm.best_algorithm(100 * M, 8, L) in ("ring", "roundrobin", "butterfly")
    assert cm.best_algorithm(10, 8, LinkParams(1e-2, 1e10)) == "ps"  # 2 latency steps
    names = [a for a, _ in cm.ranking(M, 4, L)]
    assert names[0] == "butterfly" and names[-1] == "ps"


def test_calibration_recovers_alpha_beta_from_noisy_pingpong():
    rng = random.Random(0)
    true = LinkParams(alpha_s=2e-4, bandwidth_bps=9.5e7)
    sizes = [2**k for k in range(10, 24)]
    times = [true.message(s) * (1 + rng.gauss(0, 0.01)) for s in sizes]
    fit = costfit.fit_alpha_beta(sizes, times)
    assert fit.link.bandwidth_bps == pytest.approx(true.bandwidth_bps, rel=0.03)
    assert fit.link.alpha_s == pytest.approx(true.alpha_s, rel=0.1)
    assert fit.r2 > 0.99 and fit.max_rel_err < 0.05
    # alpha fixed, beta fitted
    fit2 = costfit.fit_alpha_beta(sizes, times, alpha_s=2e-4, weights="absolute")
    assert fit2.link.alpha_s == 2e-4 and fit2.link.bandwidth_bps == pytest.approx(9.5e7, rel=0.03)


def test_calibration_from_allreduce_measurements_predicts_other_algorithms():
    true = LinkParams(alpha_s=5e-4, bandwidth_bps=1e8)
    algs, sizes, n = ["ring", "ps", "tree", "alltoall"], [1e5, 1e6, 1e7], 4
    A = [cm._allreduce_terms(a, n)[0] for a in algs for _ in sizes]
    B = [cm._allreduce_terms(a, n)[1] for a in algs for _ in sizes]
    ms = [s for _ in algs for s in sizes]
    ts = [cm.allreduce_time(a, s, n, true) for a in algs for s in sizes]
    fit = costfit.fit_alpha_beta(ms, ts, latency_steps=A, byte_factors=B)
    assert fit.link.alpha_s == pytest.approx(5e-4, rel=1e-6)
    want = cm.allreduce_time("butterfly", 3e7, n, true)
    assert cm.allreduce_time("butterfly", 3e7, n, fit.link) == pytest.approx(want)


def test_fit_rejects_nonsense():
    with pytest.raises(ValueError):
        costfit.fit_alpha_beta([1], [1])
    with pytest.raises(ValueError, match="beta"):
        costfit.fit_alpha_beta([1, 2, 3], [3, 2, 1])
    assert math.isfinite(costfit.fit_alpha_beta([1, 2], [1, 2]).link.alpha_s)


def test_pipelined_tree_fill():
    # N=4 heap tree, one chunk (store-and-forward): reduce 2 M b, broadcast 2 M b + 1 M b down to rank 3
    m = HEAP_TREE_MAX_CHUNK_BYTES / 2
    assert cm.allreduce_time("tree", m, 4, L, chunk_bytes=4 * m) == pytest.approx(4e-3 + 5 * m * 1e-6)
    # lowbw.comm's heap tree sends at most 256 KiB per message, so the fill is 262144 B x 1 us/B here
    assert cm.allreduce_time("tree", M, 4, L, chunk_bytes=4 * M) == pytest.approx(4e-3 + 4.0 + 0.262144)
    # many small chunks: the fill vanishes
    assert cm.allreduce_time("tree", M, 4, L, chunk_bytes=M / 100) == pytest.approx(4e-3 + 4.01)
    # depth 1 (N <= 3): nothing to fill; other algorithms ignore chunking
    assert cm.allreduce_time("tree", M, 3, L, chunk_bytes=M) == cm.allreduce_time("tree", M, 3, L)
    assert cm.allreduce_time("ring", M, 4, L, chunk_bytes=M) == cm.allreduce_time("ring", M, 4, L)


def test_tree_chunk_cap_is_the_one_lowbw_comm_uses():
    # N=8 (depth 3): two chunks of fill, each capped at lowbw.comm.tree's message size whatever chunk_bytes says
    cap = HEAP_TREE_MAX_CHUNK_BYTES
    fill = cm.allreduce_time("tree", 10 * cap, 8, L, chunk_bytes=4 * cap) - cm.allreduce_time("tree", 10 * cap, 8, L)
    assert fill == pytest.approx(2 * cap * L.beta)


def test_talk_crossover_ring_vs_tree():
    # the talk: ring beats tree iff M > (a/b) (N-1-logN) / (logN - (N-1)/N); N=8: (a/b) * 4 / 2.125
    m = cm.crossover_nbytes("ring", "tree", 8, L, talk=True)
    assert m == pytest.approx(1e-3 / 1e-6 * 4 / (3 - 7 / 8))
    assert cm.talk_allreduce_time("ring", m * 1.01, 8, L) < cm.talk_allreduce_time("tree", m * 1.01, 8, L)
    assert cm.talk_allreduce_time("ring", m * 0.99, 8, L) > cm.talk_allreduce_time("tree", m * 0.99, 8, L)


def test_token_bucket_burst_shortens_transfers_that_start_on_idle_links():
    plain = LinkParams(alpha_s=1e-4, bandwidth_bps=1e9)
    tb = LinkParams(alpha_s=1e-4, bandwidth_bps=1e9, burst_bytes=125_000)  # tbf, 1 ms at 1 Gbit/s
    assert tb.message(1e6) == pytest.approx(plain.message(1e6) - 1e-3)
    assert tb.message(1e4) == pytest.approx(1e-4)  # inside the burst: latency only
    M, n = 1e6, 4
    # streaming algorithms get one burst, ps/tree two (root downlink, then uplink)
    assert cm.allreduce_time("ring", M, n, tb) == pytest.approx(cm.allreduce_time("ring", M, n, plain) - 1e-3)
    assert cm.allreduce_time("ps", M, n, tb) == pytest.approx(cm.allreduce_time("ps", M, n, plain) - 2e-3)
    assert cm.allreduce_time("tree", M, n, tb, chunk_bytes=4 << 20) == pytest.approx(
        cm.allreduce_time("tree", M, n, plain, chunk_bytes=4 << 20) - 3e-3)  # + the fill chunk's link
    # never below the latency terms, whatever the burst
    huge = LinkParams(alpha_s=1e-4, bandwidth_bps=1e9, burst_bytes=1e12)
    assert cm.allreduce_time("ring", M, n, huge) == pytest.approx(2 * (n - 1) * 1e-4)
    assert cm.allreduce_time("ring", M, 1, tb) == 0.0
    with pytest.raises(ValueError):
        LinkParams(alpha_s=0, bandwidth_bps=1e9, burst_bytes=-1)


def test_calibration_recovers_a_token_bucket_burst():
    true = LinkParams(alpha_s=8e-5, bandwidth_bps=9.6e8, burst_bytes=110_000)
    sizes = [1 << 18, 1 << 20, 1 << 22, 1 << 24]
    fit = costfit.fit_alpha_beta(sizes, [true.message(s) for s in sizes], alpha_s=8e-5, weights="absolute",
                            fit_burst=True)
    assert fit.link.burst_bytes == pytest.approx(110_000, rel=1e-6)
    assert fit.link.bandwidth_bps == pytest.approx(9.6e8, rel=1e-9) and fit.to_dict()["burst_bytes"] > 0
    # a plain link: no burst is invented
    plain = costfit.fit_alpha_beta(sizes, [8e-5 + s * 8 / 9.6e8 for s in sizes], alpha_s=8e-5, fit_burst=True)
    assert plain.link.burst_bytes == pytest.approx(0, abs=1e-3)
    # a fixed burst: only beta is fitted
    fixed = costfit.fit_alpha_beta(sizes, [true.message(s) for s in sizes], alpha_s=8e-5, burst_bytes=110_000)
    assert fixed.link.bandwidth_bps == pytest.approx(9.6e8, rel=1e-9) and fixed.link.burst_bytes == 110_000
    with pytest.raises(ValueError, match="alpha_s"):
        costfit.fit_alpha_beta(sizes, [true.message(s) for s in sizes], fit_burst=True)
