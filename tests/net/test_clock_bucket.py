"""The testbed's token bucket in the virtual clock (``clock_shaper_burst_bytes``): the pure arithmetic of
:func:`lowbw.net.costmodel.bucket_steps_time` by hand-computed cases, calls split into steps, one bucket shared
by an exchange's back-to-back calls, and the run-config key (0: the clock is unchanged)."""

from __future__ import annotations

import pytest

from lowbw.compress.protocol import CallRecord
from lowbw.net.costmodel import LinkParams, allreduce_time, bucket_steps_time, call_steps, calls_time

ALPHA = 1e-4  # s: refills 100 bytes at 1 MB/s
BETA = 1e-6  # s/byte: 1 MB/s


def test_plain_link_without_bucket():
    steps = [(600.0, "both"), (0.0, "both"), (250.0, "up")]
    assert bucket_steps_time(steps, ALPHA, BETA, 0.0) == pytest.approx(3 * ALPHA + 850 * BETA)


def test_bucket_drains_and_refills_by_hand():
    # b = 1000: msg 1 free (T 1000 -> 400); msg 2: T = 400 + 100 = 500, 100 paced (T -> 0);
    # msg 3: T = 100, 500 paced. 3 alpha + 600 beta = 0.0009 s (plain: 0.0021 s)
    steps = [(600.0, "both")] * 3
    assert bucket_steps_time(steps, ALPHA, BETA, 1000.0) == pytest.approx(3 * ALPHA + 600 * BETA)
    # the refill is capped at the bucket: a long alpha (refill 5000 bytes) only tops it up to b
    assert bucket_steps_time(steps, 5e-3, BETA, 1000.0) == pytest.approx(3 * 5e-3)
    assert bucket_steps_time([(3000.0, "both")], 5e-3, BETA, 1000.0) == pytest.approx(5e-3 + 2000 * BETA)


def test_two_directions_have_their_own_buckets():
    # ps-like: the reduce fills the root's downlink, the broadcast its uplink: each phase finds a full bucket
    assert bucket_steps_time([(800.0, "down"), (800.0, "up")], ALPHA, BETA, 1000.0) == pytest.approx(2 * ALPHA)
    # ring-like: both phases on both directions: the second finds 200 + 100 tokens, 500 bytes paced
    assert bucket_steps_time([(800.0, "both"), (800.0, "both")], ALPHA, BETA, 1000.0) == pytest.approx(
        2 * ALPHA + 500 * BETA)
    with pytest.raises(ValueError, match="bad bucket"):
        bucket_steps_time([], ALPHA, BETA, -1.0)


def test_call_steps_keep_the_collective_time():
    link = LinkParams(ALPHA, 8 / BETA)
    for op, alg, n in [("all_reduce", "ring", 2), ("all_reduce", "ring", 4), ("all_gather", "ring", 4),
                       ("all_reduce", "ps", 4), ("all_reduce", "tree", 4), ("broadcast", "ring", 3)]:
        steps = call_steps(op, alg, 4000.0, n)
        plain = calls_time([CallRecord(op, 4000, alg, n)], link)
        assert bucket_steps_time(steps, ALPHA, BETA, 0.0) == pytest.approx(plain), (op, alg, n)
    # lowbw.comm's all_gather: N-1 latency-only steps (the sizes), then N-1 steps of one rank's payload each
    assert call_steps("all_gather", "ring", 4000.0, 3) == [(0.0, "both")] * 2 + [(4000.0, "both")] * 2
    assert call_steps("all_reduce", "ps", 4000.0, 3) == [(8000.0, "down"), (8000.0, "up")]
    assert call_steps("all_reduce", "ring", 4000.0, 1) == []


def test_back_to_back_calls_share_one_bucket():
    link = LinkParams(ALPHA, 8 / BETA)
    rec = CallRecord("all_reduce", 1600, "ring", 2)  # two steps of 800 bytes each
    # alone: 2 alpha + 500 beta (as in the ring-like case above)
    one = calls_time([rec], link, bucket_bytes=1000.0)
    assert one == pytest.approx(2 * ALPHA + 500 * BETA)
    # back to back: the second call starts with 0 + 100 tokens (not a full bucket): 2 alpha + 1400 beta more
    two = calls_time([rec, rec], link, bucket_bytes=1000.0)
    assert two == pytest.approx(one + 2 * ALPHA + 1400 * BETA)
    # a per-call burst (costmodel's LinkParams.burst_bytes) gives each call its own full bucket: faster
    per_call = 2 * allreduce_time("ring", 1600, 2, LinkParams(ALPHA, 8 / BETA, burst_bytes=1000.0))
    assert per_call < two
    # zipped per-rank lists time the same calls the same way
    assert calls_time([[rec, rec], [rec, rec]], link, bucket_bytes=1000.0) == pytest.approx(two)
    # bucket 0: exactly the plain path
    assert calls_time([rec, rec], link, bucket_bytes=0.0) == calls_time([rec, rec], link)
    with pytest.raises(ValueError, match="not both"):
        calls_time([rec], LinkParams(ALPHA, 8 / BETA, burst_bytes=10.0), bucket_bytes=1000.0)


def test_run_config_key_reaches_the_clock():
    from lowbw.train.config import RunConfig
    from lowbw.train.world import ShapedLink, comm_cost, link_for

    base = {"workers": 2, "bandwidth_mbit": 10.0, "clock_overhead_ms": 1.0}
    plain = RunConfig.from_dict(base)
    shaped = RunConfig.from_dict({**base, "clock_shaper_burst_bytes": 15140})
    lp, ls = link_for(plain, "world"), link_for(shaped, "world")
    assert type(lp) is LinkParams and lp == LinkParams(1e-3, 10e6 * plain.link_goodput)
    assert isinstance(ls, ShapedLink) and ls.bucket_bytes == pytest.approx(15140 * shaped.link_goodput)
    calls = {0: [[CallRecord("all_gather", 3000, "ring", 2)] * 12] * 2}  # a per-layer step: 12 small calls
    cp, cs = comm_cost(calls, lp), comm_cost(calls, ls)
    assert cp["v_comm"] == calls_time(calls[0], lp)  # the plain clock, bit for bit
    assert cs["v_comm"] < cp["v_comm"]  # the bucket hides bytes ...
    assert cs["v_comm"] >= 24 * 1e-3  # ... never latency
    # the re-timing coefficients stay those of the plain link
    assert (cs["v_alpha"], cs["v_beta_bytes"]) == (cp["v_alpha"], cp["v_beta_bytes"])


def test_bad_key_values_fail_naming_the_key():
    from lowbw.train.config import RunConfig

    with pytest.raises(ValueError, match="clock_shaper_burst_bytes"):
        RunConfig.from_dict({"workers": 2, "clock_shaper_burst_bytes": -1})
    # per-worker links and traces take the bucket too (lowbw.train.links: on the slowest hop where every step
    # waits for it), as bench e10check's cells need
    cfg = RunConfig.from_dict({"workers": 2, "clock_shaper_burst_bytes": 15140, "worker_bandwidth_mbit": [10, 100]})
    assert cfg.clock_shaper_burst_bytes == 15140
