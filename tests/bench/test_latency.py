"""E1's latency axis: the grid plan (cells the link emulator cannot carry skipped, before any testbed) and the
calibrated model's delay terms (gloo's handshakes, token buckets refilled between steps). No root needed."""

from __future__ import annotations

import pytest

from lowbw.bench import collectives as B
from lowbw.net import calibrated as M
from lowbw.net import linkemu
from lowbw.net.costmodel import LinkParams, allreduce_time

GRID = {**B.DEFAULTS, "workers": [2, 3, 4], "rates_mbit": [10, 100], "delay_ms": [0, 5, 20, 50],
        "sizes_mb": [0.004, 0.064, 1], "algorithms": ["ring", "tree", "ps", "butterfly"], "max_seconds": 2}


def test_plan_skips_the_cells_the_emulator_cannot_carry_and_says_why():
    cells, skipped = B.plan_grid(GRID, netem=False, netns=True)
    whole = [s for s in skipped if s.get("cell")]
    limit = linkemu.MAX_TOTAL_BPS / 1e6
    want = {(n, r, d) for n in (2, 3, 4) for r in (10, 100) for d in (5, 20, 50) if n * r > limit}
    assert {(s["workers"], s["rate_mbit"], s["delay_ms"]) for s in whole} == want == {
        (n, 100, d) for n in (3, 4) for d in (5, 20, 50)}
    for s in whole:
        assert "Mbit/s" in s["why"] and s["sizes_mb"] == GRID["sizes_mb"] and s["algorithms"] == GRID["algorithms"]
    planned = {(c["workers"], c["rate_mbit"], c["delay_ms"]) for c in cells}
    assert not planned & want
    # zero delay needs no emulator: 100 Mbit/s x 4 workers is measured there
    assert (4, 100, 0) in planned and len(planned) == 24 - len(want)
    # what is too slow is listed per (size, algorithm), not as a cell
    slow = [s for s in skipped if not s.get("cell")]
    assert slow and all(s["predicted_s"] > GRID["max_seconds"] for s in slow)
    assert B.predicted_seconds(cells) > 0


def test_plan_with_netem_skips_no_cell_and_rejects_negative_delays():
    _, skipped = B.plan_grid(GRID, netem=True, netns=True)
    assert not [s for s in skipped if s.get("cell")]
    with pytest.raises(ValueError, match="delay_ms"):
        B.plan_grid({**GRID, "delay_ms": [0, -5]}, netem=False, netns=True)


def test_emulator_refusal_matches_the_emulators_limit():
    limit = linkemu.MAX_TOTAL_BPS
    assert B.emulator_refusal(2, limit / 2, 0.02, 0.1, netem=False) is None
    assert "Mbit/s" in B.emulator_refusal(3, limit / 2, 0.02, 0.1, netem=False)
    assert B.emulator_refusal(3, limit / 2, 0.02, 0.1, netem=True) is None


def test_calibration_keys_carry_the_delay():
    assert B.calibration_key(3, 10, 0) == "N3_10mbit"
    assert B.calibration_key(3, 10.0, 20) == "N3_10mbit_20ms"


@pytest.mark.parametrize("n", [2, 3, 4])
@pytest.mark.parametrize("alg", ["ring", "butterfly"])
def test_step_messages_add_up_to_the_models_link_bytes(alg, n):
    m = 1e6
    steps = M.step_messages(alg, m, n)
    assert steps is not None
    # the model's byte term with beta = 1 s/byte, no latency and no burst: the busiest link's bytes
    assert sum(b for b, _ in steps) == pytest.approx(allreduce_time(alg, m, n, LinkParams(0.0, 8.0)))


def test_handshake_steps():
    assert [M.handshake_steps("butterfly", n) for n in (2, 3, 4)] == [2, 3, 4]
    assert {M.handshake_steps(a, n) for a in ("ring", "ps", "tree") for n in (2, 3, 4)} == {1}
    assert M.handshake_steps("ring", 1) == 0 and M.handshake_steps("alltoall", 4) is None


def _cal(alpha, rate_bps, handshake=0.0, burst=15_000.0):
    """A calibration as calibrate writes it with the shapers' bucket known (``burst``: wire bytes)."""
    fit = {"alpha_s": alpha, "bandwidth_bps": rate_bps, "burst_bytes": burst * M.TCP_PAYLOAD_PER_FRAME}
    return {"fit": fit, "fit_duplex": dict(fit), "nominal_rate_bps": rate_bps, "handshake_s": handshake,
            "shaper_burst_bytes": burst, "gamma_s_per_byte": 0.0}


def test_calibrated_time_adds_handshakes_and_refilled_bursts():
    n, m = 3, 64_000.0
    b = 15_000.0 * M.TCP_PAYLOAD_PER_FRAME
    link = LinkParams(0.02, 1e7, burst_bytes=b)
    # no handshake, a gap far below the bucket's refill time: the plain model
    cal0 = _cal(1e-6, 1e7)
    assert M.refilled_burst_bytes(cal0, "ring", m, n) == pytest.approx(0.0, abs=10)
    # 20 ms one way: each of the ring's 2(N-1) - 1 later steps gets the full bucket again
    cal = _cal(0.02, 1e7, handshake=0.02)
    free = M.refilled_burst_bytes(cal, "ring", m, n)
    seg = m / n
    assert free == pytest.approx((2 * (n - 1) - 1) * min(b, seg))
    t = M.calibrated_time(cal, "ring", m, n)
    assert t == pytest.approx(allreduce_time("ring", m, n, link) + 0.02 - free * 8 / 1e7)
    # ps and tree stream their two phases: only the handshake is added
    assert M.calibrated_time(cal, "ps", m, n) == pytest.approx(allreduce_time("ps", m, n, link) + 0.02)
    # tiny messages: nothing left to make free, and never a negative byte term
    assert M.refilled_burst_bytes(cal, "ring", 4000.0, n) == 0.0
    assert M.calibrated_time(cal, "butterfly", 4000.0, n) >= 7 * 0.02 - 1e-12


def test_calibration_measures_the_handshake_from_the_exchange():
    a, beta = 0.02, 8e-7
    pp = [{"nbytes": nb, "one_way_s": a + max(0, nb - 15_000) * beta,
           "exchange_s": 2 * a + max(0, nb - 15_000) * beta * 1.01} for nb in (1024, 16384, 1 << 18, 1 << 20)]
    cal = M.calibrate(pp, 1e7)
    assert cal["handshake_s"] == pytest.approx(a, rel=1e-6)
    # the exchange's beta is fitted through its own intercept, so it does not absorb the handshake
    assert cal["fit_duplex"]["bandwidth_bps"] == pytest.approx(8 / (beta * 1.01), rel=1e-3)
    assert M.model_link(cal, "ring").alpha_s == pytest.approx(a)  # every algorithm: the one-way alpha


def test_remodel_finds_the_calibration_of_a_delayed_testbed():
    cal = _cal(0.02, 1e7, handshake=0.02)
    row = {"workers": 3, "rate_mbit": 10, "delay_ms": 20, "algorithm": "ring", "nbytes": 64_000, "size_mb": 0.064,
           "ok": True, "time_s": 0.12, "chunk_bytes": None}
    res = B.remodel({"rows": [row], "calibration": {"N3_10mbit_20ms": cal}})
    assert res["rows"][0]["model_s"] == pytest.approx(M.calibrated_time(cal, "ring", 64_000, 3))


def test_plan_under_loopback_emulation_skips_no_cell():
    # the in-process limiter adds the delay itself: the userspace emulator's limit does not apply
    _, skipped = B.plan_grid({**GRID, "emulation": "loopback-ratelimit"}, netem=False)
    assert not [s for s in skipped if s.get("cell")]


def test_a_known_bucket_is_used_not_fitted():
    """With delay the largest ping-pong pays a loss-recovery round trip; a fitted burst absorbs it (several
    buckets), the configured bucket does not, and beta stays near the shaped rate."""
    a, beta, bucket = 0.02, 8 / 9.5e6, 15140
    burst = bucket * M.TCP_PAYLOAD_PER_FRAME
    pp = [{"nbytes": nb, "one_way_s": a + max(0, nb - burst) * beta + (0.04 if nb >= 1 << 20 else 0.0),
           "exchange_s": 2 * a + max(0, nb - burst) * beta} for nb in (1024, 16384, 65536, 1 << 18, 1 << 20)]
    fitted = M.calibrate(pp, 1e7)
    assert fitted["fit"]["burst_bytes"] > 1.5 * bucket
    known = M.calibrate(pp, 1e7, bucket_bytes=bucket)
    assert known["fit"]["burst_bytes"] == pytest.approx(burst) and known["shaper_burst_bytes"] == bucket
    assert known["fit"]["bandwidth_bps"] == pytest.approx(9.5e6, rel=0.05)
    link = M.model_link(known, "ps")
    assert link.message(65536) == pytest.approx(pp[2]["one_way_s"], rel=0.03)  # a few buckets: right
    assert M.model_link(fitted, "ps").message(65536) < 0.85 * pp[2]["one_way_s"]  # the fitted burst: far off


def test_the_trees_window_paces_it_only_where_the_delay_bandwidth_product_exceeds_the_window():
    m, c = 10e6, 256 << 10
    slow = _cal(0.05, 1e8, handshake=0.05)  # 100 Mbit/s, 50 ms: a cycle of ~0.12 s per 4 x 256 KiB
    cb = c * 8 / 1e8
    # 39 chunks in 10 windows: 9 waits of a cycle, then the last window's 3 chunks; the link alone: 10 MB
    paced = 9 * (0.05 + 0.05 + cb) + 3 * cb
    assert M.window_wait(slow, "tree", m, 2) == pytest.approx(2 * (paced - m * 8 / 1e8))
    assert paced > 1.3 * m * 8 / 1e8  # the window, not the link, paces it
    assert M.window_wait(_cal(0.005, 1e8, handshake=0.005), "tree", m, 2) == 0.0  # 5 ms: the link paces it
    assert M.window_wait(slow, "tree", M.WINDOW * c, 2) == 0.0  # one window: nothing waits
    assert M.window_wait(slow, "ps", m, 2) == 0.0 and M.window_wait(slow, "ring", m, 2) == 0.0


def test_a_folding_butterfly_starts_its_exchanges_on_full_buckets():
    """Without delay nothing refills, but the exchanges leave by links the fold did not use."""
    cal = _cal(1e-6, 1e7)
    b = 15_000.0 * M.TCP_PAYLOAD_PER_FRAME
    m = 16_000.0  # fold 16 KB (link 1), halving 8 KB (link 2: full bucket), doubling 8 KB, unfold 16 KB
    free = M.refilled_burst_bytes(cal, "butterfly", m, 3)
    assert free == pytest.approx(8_000.0 + (b - 8_000.0), abs=50)  # the halving, and the rest of link 2's bucket
    assert M.refilled_burst_bytes(cal, "butterfly", m, 4) == pytest.approx(0.0, abs=50)  # one link throughout


@pytest.mark.parametrize("n", [2, 3])
def test_the_trees_chain_below_four_workers_is_the_models_two_idle_starts(n):
    """N = 2, 3: each phase's shared link has not carried data before it: nothing beyond the model."""
    cal = _cal(0.02, 1e7, handshake=0.02)
    b = 15_000.0 * M.TCP_PAYLOAD_PER_FRAME
    for m in (4000.0, 16_000.0, 64_000.0):
        assert M.tree_chain_paced_bytes(cal, m, n) == pytest.approx(2 * (n - 1) * m - 2 * min(b, (n - 1) * m))
        assert M.refilled_burst_bytes(cal, "tree", m, n) == pytest.approx(0.0, abs=1e-6)


def test_the_trees_chain_at_four_workers_frees_a_bucket_per_hop_and_the_roots_twice():
    """N = 4, one chunk: 3 -> 1 -> 0 -> {1, 2} -> 3. With 20 ms gaps every bucket is full again (25 KB refill
    against 14.5 KB): each hop frees b, the root's stream to 1 frees b and shares the rest round robin."""
    b = 15_000.0 * M.TCP_PAYLOAD_PER_FRAME
    m = 32_000.0
    cal = _cal(0.02, 1e7, handshake=0.02)
    assert M.tree_chain_paced_bytes(cal, m, 4) == pytest.approx((m - b) + (m - b) + 2 * (m - b) + (m - b))
    # the model charges 4m - 2b (two idle starts) + (m - b) (the fill chunk): the chain frees 2 b more
    assert M.refilled_burst_bytes(cal, "tree", m, 4, 4 << 20) == pytest.approx(2 * b)
    link = LinkParams(0.02, 1e7, burst_bytes=b)
    want = allreduce_time("tree", m, 4, link, 4 << 20) + 0.02 - 2 * b * 8 / 1e7
    assert M.calibrated_time(cal, "tree", m, 4, 4 << 20) == pytest.approx(want)
    # the latency terms and the chain's bytes, whether or not the model was told the chunk size
    chain = 4 * 0.02 + 0.02 + (5 * m - 5 * b) * 8 / 1e7
    assert M.calibrated_time(cal, "tree", m, 4) == pytest.approx(chain) == pytest.approx(want)


def test_the_trees_chain_without_delay_refills_by_the_time_between_hops():
    """alpha ~ 0: 0's downlink, drained by 2 -> 0, has nothing for 1 -> 0; 1's downlink refills while 1 -> 0
    is paced (m - b at the shaped rate: full again); 1's uplink refills only while the root's stream to 1 is
    paced: 2 (m - b) beta, i.e. 2 (m - b) payload bytes per byte at the line rate."""
    b = 15_000.0 * M.TCP_PAYLOAD_PER_FRAME
    m = 16_000.0  # m - b = 1 660 bytes
    cal = _cal(1e-9, 1e7)
    payload = M.TCP_PAYLOAD_PER_FRAME  # refill in payload bytes; beta here is the wire rate's
    f4 = 2 * (m - b) * payload
    assert f4 < b
    chain = M.tree_chain(cal, m, 4)
    assert chain.free["1->0"] == pytest.approx(0.0, abs=1.0) and chain.free["1->3"] == pytest.approx(f4, abs=1.0)
    via3 = (m - b) + m + 2 * (m - b) + (m - f4)
    # the root's second stream waits for the uplink to carry both (2m - b paced): without delay it ends last
    via2 = (m - b) + m + (2 * m - b)
    assert via2 > via3 and chain.paced == pytest.approx(via2, abs=1.0)
    assert chain.arrive["0->2"] > chain.arrive["1->3"]


def test_the_trees_chain_applies_to_one_chunk_on_at_most_four_workers():
    cal = _cal(0.02, 1e7, handshake=0.02)
    assert M.tree_chain_paced_bytes(cal, 300_000.0, 4) is None  # > 256 KiB: chunks stream
    assert M.tree_chain_paced_bytes(cal, 64_000.0, 4, chunk_bytes=32_000) is None
    assert M.tree_chain_paced_bytes(cal, 64_000.0, 5) is None
    assert M.tree_chain_paced_bytes({**cal, "shaper_burst_bytes": None}, 64_000.0, 4) is None
    assert M.refilled_burst_bytes(cal, "tree", 300_000.0, 4) == 0.0


@pytest.mark.parametrize("n", [2, 3, 4])
def test_software_steps_are_the_models_latency_steps(n):
    assert M.software_steps("ring", n) == 2 * (n - 1)
    assert M.software_steps("ps", n) == 2
    assert M.software_steps("tree", n) == {2: 2, 3: 2, 4: 4}[n]
    assert M.software_steps("butterfly", n) == {2: 2, 3: 4, 4: 4}[n]


def test_software_cost_is_calibrated_from_tiny_calls_and_charged_per_step():
    """A tiny call's time beyond the model, per latency step, is charged at every size; a tiny call
    faster than the model charges nothing (not a negative cost)."""
    n, s = 4, 4e-4
    cal = _cal(1e-4, 1e8)
    tiny = {}
    for alg in ("ring", "tree", "ps", "butterfly"):
        base = M.calibrated_time(cal, alg, 256, n)
        k = M.software_steps(alg, n)
        tiny[alg] = {"nbytes": 256, "times_s": [base + k * s * f for f in (0.8, 0.9, 1.0, 1.1, 1.2)]}
    sw = M.software_calibration(cal, tiny, n)
    for alg, e in sw.items():
        assert e["per_step_s"] == pytest.approx(s) and e["steps"] == M.software_steps(alg, n)
        assert e["per_step_q25_s"] == pytest.approx(0.9 * s) and e["per_step_q75_s"] == pytest.approx(1.1 * s)
    with_sw = {**cal, "software": sw}
    # 4 MB on the ps: nothing refills, so exactly k s more
    assert M.calibrated_time(with_sw, "ps", 4e6, n) - M.calibrated_time(cal, "ps", 4e6, n) == pytest.approx(2 * s)
    assert M.software_step_s(with_sw, "ring") == pytest.approx(s) and M.software_step_s(cal, "ring") == 0.0
    fast = M.software_calibration(
        cal, {"ring": {"nbytes": 256, "times_s": [0.5 * M.calibrated_time(cal, "ring", 256, n)]}}, n)
    assert fast["ring"]["per_step_s"] < 0 and M.software_step_s({**cal, "software": fast}, "ring") == 0.0


def test_the_software_gap_refills_the_buckets_between_ring_steps():
    """Without delay a ring step's bucket barely refills in alpha; in alpha + s (0.4 ms at 100 Mbit/s:
    ~4.8 KB of payload) most of a 16 KB segment beyond the first goes free."""
    n, m = 4, 64_000.0
    cal = _cal(7e-5, 1e8)
    sw = {**cal, "software": {"ring": {"per_step_s": 4e-4}}}
    free0, free = M.refilled_burst_bytes(cal, "ring", m, n), M.refilled_burst_bytes(sw, "ring", m, n)
    refill = 4.7e-4 * 1e8 / 8 * M.TCP_PAYLOAD_PER_FRAME
    assert free - free0 == pytest.approx((2 * (n - 1) - 1) * 4e-4 * 1e8 / 8 * M.TCP_PAYLOAD_PER_FRAME, rel=1e-6)
    assert free < (2 * (n - 1) - 1) * refill + 1e-6
    t0 = M.calibrated_time(cal, "ring", m, n)
    assert M.calibrated_time(sw, "ring", m, n) == pytest.approx(t0 + 6 * 4e-4 - (free - free0) * 8 / 1e8)


def test_start_lag_is_the_latest_ranks_first_message_median_over_calls():
    lags = [[1e-4, 5e-4, None, 3e-4], [2e-4, 9e-4, 4e-4, 1e-4], [None, None, None, None], [7e-4, 1e-4, 1e-4, 1e-4]]
    got = M.start_lag(lags)
    assert got["start_lag_s"] == pytest.approx(7e-4) and got["start_lag_calls"] == 3  # of 5e-4, 9e-4, 7e-4
    assert got["start_lag_q25_s"] == pytest.approx(6e-4) and got["start_lag_q75_s"] == pytest.approx(8e-4)
    assert M.start_lag([]) is None and M.start_lag([[None, None]]) is None


def test_start_lag_is_charged_once_per_call_and_refills_no_bucket():
    """A tiny call's time t = T + L + k s: L (from its traces) is taken out before s is derived; at every
    size the call pays L once and k s per step, and only s refills the ring's buckets between steps."""
    n, s, lag = 4, 3e-4, 6e-4
    cal = _cal(7e-5, 1e8)
    base = M.calibrated_time(cal, "ring", 256, n)
    k = M.software_steps("ring", n)
    tiny = {"ring": {"nbytes": 256, "times_s": [base + lag + k * s] * 5,
                     "start_lags_s": [[lag, lag / 2, lag / 3, 0.0]] * 5}}
    sw = M.software_calibration(cal, tiny, n)["ring"]
    assert sw["start_lag_s"] == pytest.approx(lag) and sw["per_step_s"] == pytest.approx(s)
    with_lag = {**cal, "software": {"ring": sw}}
    spread = {**cal, "software": {"ring": {"per_step_s": s + lag / k}}}  # the same tiny time, all per step
    assert M.software_start_s(with_lag, "ring") == pytest.approx(lag) and M.software_start_s(spread, "ring") == 0
    assert M.calibrated_time(with_lag, "ring", 256, n) == pytest.approx(M.calibrated_time(spread, "ring", 256, n))
    m = 64_000.0  # 16 KB segments: the buckets refill in alpha + s, not alpha + s + L / k
    only_steps = {**cal, "software": {"ring": {"per_step_s": s}}}
    free = M.refilled_burst_bytes(with_lag, "ring", m, n)
    assert free == pytest.approx(M.refilled_burst_bytes(only_steps, "ring", m, n))
    assert free < M.refilled_burst_bytes(spread, "ring", m, n)
    assert M.calibrated_time(with_lag, "ring", m, n) == pytest.approx(M.calibrated_time(only_steps, "ring", m, n) + lag)
    assert M.calibrated_time(with_lag, "ring", m, n) > M.calibrated_time(spread, "ring", m, n)
    plain = {k2: v for k2, v in tiny["ring"].items() if k2 != "start_lags_s"}
    untraced = M.software_calibration(cal, {"ring": plain}, n)
    assert "start_lag_s" not in untraced["ring"] and untraced["ring"]["per_step_s"] == pytest.approx(s + lag / k)


def test_a_start_lag_beyond_the_tiny_calls_cost_is_charged_only_up_to_it():
    n = 3
    cal = _cal(1e-4, 1e8)
    base = M.calibrated_time(cal, "tree", 256, n)
    sw = M.software_calibration(cal, {"tree": {"nbytes": 256, "times_s": [base + 2e-4] * 3,
                                               "start_lags_s": [[5e-4, 1e-4, 1e-4]] * 3}}, n)["tree"]
    assert sw["start_lag_s"] == pytest.approx(5e-4) and sw["start_lag_charged_s"] == pytest.approx(2e-4)
    assert sw["per_step_s"] == pytest.approx(0.0, abs=1e-12)
    assert M.calibrated_time({**cal, "software": {"tree": sw}}, "tree", 256, n) == pytest.approx(base + 2e-4)


def test_merge_start_lag_keeps_the_targets_tiny_calls_and_splits_their_cost():
    cal = _cal(1e-4, 1e8)
    cal["pingpong"] = []
    own_t = M.calibrated_time(cal, "ring", 256, 4) + 3e-3
    target = {"rows": [], "calibration": {"N4_100mbit": {**cal, "software": {
        "ring": {"nbytes": 256, "times_s": [own_t] * 3}}}}}
    source = {"calibration": {"N4_100mbit": {**cal, "software": {"ring": {
        "nbytes": 256, "times_s": [own_t + 5e-3] * 3, "start_lags_s": [[6e-4, 1e-4, 1e-4, 1e-4]] * 3}}},
        "N2_100mbit": {**cal, "software": {"ring": {"nbytes": 256, "times_s": [1.0], "start_lags_s": [[1e-4]]}}}},
        "testbeds": [], "provenance": {"git_commit": "abc"}, "finished_at": "t", "elapsed_s": 1}
    assert B.merge_start_lag(target, source, "lag.json") == ["N4_100mbit"]  # N2: not in the target
    got = target["calibration"]["N4_100mbit"]
    e = got["software"]["ring"]
    assert e["times_s"] == [own_t] * 3 and e["start_lag_s"] == pytest.approx(6e-4)  # the target's own times
    assert e["per_step_s"] == pytest.approx((3e-3 - 6e-4) / 6)
    assert got["start_lag_measured"]["source"] == "lag.json" and target["runs"][-1]["calibration_keys"] == [
        "N4_100mbit"]


def test_merge_software_keeps_the_targets_own_calibration_and_records_the_run():
    cal = _cal(0.005, 1e7, handshake=0.005)
    cal["pingpong"] = []  # remodel leaves a calibration without a stored ping-pong as it is
    row = {"workers": 4, "rate_mbit": 10, "delay_ms": 5, "algorithm": "ps", "nbytes": 4000, "size_mb": 0.004,
           "ok": True, "time_s": 0.03, "chunk_bytes": None}
    target = {"rows": [row], "calibration": {"N4_10mbit_5ms": dict(cal)}}
    before = M.calibrated_time(cal, "ps", 4000, 4)
    tiny = {"ps": {"nbytes": 256, "times_s": [M.calibrated_time(cal, "ps", 256, 4) + 2e-3] * 3, "late_starts": 0,
                   "start_lags_s": [[5e-4, 1e-4, 1e-4, 1e-4]] * 3}}
    source = {"calibration": {"N4_10mbit_5ms": {**_cal(0.0051, 1e7), "software": tiny},
                              "N2_10mbit": {**_cal(1e-4, 1e7), "software": tiny}},
              "testbeds": [{"workers": 4, "rate_bps": 1e7, "delay_s": 0.005, "loadavg_before": 0.5,
                            "loadavg_after": 0.7}],
              "provenance": {"git_commit": "abc"}, "finished_at": "2026-11-24T05:00:00Z", "elapsed_s": 60}
    assert B.merge_software(target, source, "cal.json") == ["N4_10mbit_5ms"]
    got = target["calibration"]["N4_10mbit_5ms"]
    assert got["fit"]["alpha_s"] == 0.005  # the target's own ping-pong calibration
    assert got["software_measured"] == {"source": "cal.json", "git_commit": "abc",
                                        "finished_at": "2026-11-24T05:00:00Z", "loadavg": (0.5, 0.7)}
    assert target["runs"][-1]["calibration_keys"] == ["N4_10mbit_5ms"]
    # against the target's model: 2 ms, of which the 0.5 ms start lag once and the rest over two steps
    assert got["software"]["ps"]["start_lag_s"] == pytest.approx(5e-4)
    assert got["software"]["ps"]["per_step_s"] == pytest.approx(7.5e-4)
    assert target["rows"][0]["model_s"] == pytest.approx(before + 2e-3)


def test_targets_report_the_issues_size_range_separately():
    rows = [{"workers": 2, "rate_mbit": 10, "delay_ms": d, "size_mb": mb, "algorithm": "ring", "ok": True,
             "time_s": 1.0, "model_rel_err": e, "frac_of_bound": 1.0}
            for d, mb, e in ((0, 0.004, -0.5), (0, 0.064, 0.05), (5, 1, -0.08), (5, 0.016, 0.2))]
    t = B.targets(rows)
    assert t["model_within_10pct"]["by_algorithm"]["ring"] == 0.5
    assert t["model_within_10pct_64kb_10mb"]["by_algorithm"]["ring"] == 0.08
    assert t["model_within_10pct_64kb_10mb"]["met"] is True and t["model_within_10pct_64kb_10mb"]["n"] == 2
    assert t["model_within_10pct_64kb_10mb_delayed"]["n"] == 1
    assert t["model_within_10pct"]["within_by_algorithm"]["ring"] == 0.5


def test_the_trees_second_stream_ends_last_where_the_last_hop_is_mostly_free():
    """N = 4, one chunk of 16 KB, 5 ms, 10 Mbit/s: the hop 1 -> 3 frees a whole bucket, so the root's
    stream to 2 (its uplink carries 2m - b paced after 1 -> 0) ends after 1 -> 3; at 50 ms the chain's extra
    one-way time makes the leaf 3 the last again."""
    b = 15_000.0 * M.TCP_PAYLOAD_PER_FRAME
    m, beta = 16_000.0, 8 / 1e7
    short = M.tree_chain(_cal(0.005, 1e7, handshake=0.005), m, 4)
    assert short.arrive["0->2"] > short.arrive["1->3"]
    t2 = short.arrive["1->0"] - 0.005  # without the handshake
    assert short.arrive["0->2"] - 0.005 == pytest.approx(t2 + 0.005 + (2 * m - b) * beta)
    long_ = M.tree_chain(_cal(0.05, 1e7, handshake=0.05), m, 4)
    assert long_.arrive["1->3"] > long_.arrive["0->2"]
    assert long_.paced == pytest.approx(5 * (m - b))  # every bucket full again: the chain of the test above


def test_merge_testbeds_replaces_only_the_remeasured_testbeds_and_tags_their_rows():
    def row(n, d, t):
        return {"workers": n, "rate_mbit": 10, "delay_ms": d, "algorithm": "ps", "nbytes": 4000, "size_mb": 0.004,
                "ok": True, "time_s": t, "chunk_bytes": None}

    old_cal, new_cal = _cal(1e-4, 1e7), _cal(2e-4, 1e7)
    target = {"rows": [row(2, 0, 0.01), row(2, 5, 0.03)], "runs": [{"note": "first"}],
              "calibration": {"N2_10mbit": old_cal, "N2_10mbit_5ms": _cal(0.005, 1e7)},
              "testbeds": [{"workers": 2, "rate_bps": 1e7, "delay_s": 0.0, "tag": "old"},
                           {"workers": 2, "rate_bps": 1e7, "delay_s": 0.005, "tag": "old"}]}
    source = {"rows": [row(2, 0, 0.02)], "calibration": {"N2_10mbit": new_cal},
              "testbeds": [{"workers": 2, "rate_bps": 1e7, "delay_s": None, "tag": "new", "loadavg_before": 0.4,
                            "loadavg_after": 0.6}],
              "provenance": {"git_commit": "def"}, "finished_at": "2026-11-24T05:00:00Z"}
    assert B.merge_testbeds(target, source, "again.json") == ["N2_10mbit"]
    by = {r["delay_ms"]: r for r in target["rows"]}
    assert by[0]["time_s"] == 0.02 and by[0]["run"] == 1 and "run" not in by[5]  # the other testbed's row stays
    assert target["calibration"]["N2_10mbit"] is new_cal
    assert target["calibration"]["N2_10mbit_5ms"]["fit"]["alpha_s"] == 0.005
    assert sorted(t["tag"] for t in target["testbeds"]) == ["new", "old"]
    assert target["runs"][1]["source"] == "again.json" and target["runs"][1]["loadavg"] == {"N2_10mbit": (0.4, 0.6)}
    assert by[0]["model_s"] == pytest.approx(M.calibrated_time(new_cal, "ps", 4000, 2))
