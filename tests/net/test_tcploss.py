"""The virtual clock's model of TCP's loss recovery (lowbw.net.tcploss): its terms by hand (every round of
repairs ends with a transmission that only a timer finds lost, a wait doubling at each further loss), the
rounds against a simulation of the unluckiest segment, no charge without loss, the window of Mathis et al. only
under a loss-based congestion control, a step's stall that of the unluckiest of its concurrent messages'
segments, and the clock's links under ``link_loss``."""

from __future__ import annotations

import math
import random

import pytest

from lowbw.net import tcploss


def test_no_loss_is_the_alpha_beta_message():
    assert tcploss.message_time(1e6, 0.01, 10e6, 0.0, 0.02) == pytest.approx(0.01 + 0.8)
    assert tcploss.extra_time(1e6, 0.01, 10e6, 0.0, 0.02) == 0.0
    assert tcploss.lossy_alpha_beta(0.01, 10e6, 0.0, 0.02, "cubic", 4) == (0.01, 10e6)


def test_the_terms_by_hand():
    p, rtt, bps, m = 0.1, 0.001, 10e6, 65536
    rto = rtt + 0.2  # Linux: SRTT + an RTTVAR floored at tcp_rto_min; the lost tail waits for it
    n = 46  # ceil(65536 / 1448) segments
    rounds = 1 + sum(1 - (1 - p ** k) ** n for k in range(1, 30))  # the unluckiest segment's transmissions
    stall = p * rounds * rto / (1 - 2 * p)  # each round's last transmission lost: a wait, doubling if lost again
    assert tcploss.message_time(m, 0.0, bps, p, rtt) == pytest.approx(stall + m * 8 / bps / (1 - p))
    assert tcploss.extra_time(m, 0.0, bps, p, rtt) == pytest.approx(stall + m * 8 / bps * p / (1 - p))
    assert tcploss.recovery(p, rtt, bps).rto_s == pytest.approx(rto)


@pytest.mark.parametrize("p, n", [(0.1, 1), (0.1, 3), (0.1, 45), (0.01, 725), (0.3, 20)])
def test_the_rounds_are_the_unluckiest_segments_transmissions(p, n):
    """G(n) against a simulation: n segments each sent until it arrives; the mean of the most sends any needs."""
    rng, trials = random.Random(7), 20000

    def sends() -> int:
        k = 1
        while rng.random() < p:
            k += 1
        return k

    mean = sum(max(sends() for _ in range(n)) for _ in range(trials)) / trials
    assert tcploss.repair_rounds(p, n) == pytest.approx(mean, rel=0.02)
    assert tcploss.repair_rounds(0.0, n) == 1.0


def test_a_larger_message_waits_more_rounds():
    waits = [tcploss.extra_time(m, 0.0, 10e6, 0.1, 0.001) - m * 8 / 10e6 * 0.1 / 0.9 for m in (1448, 65536, 1 << 20)]
    assert waits == sorted(waits) and waits[-1] > 2.5 * waits[0]  # about 1 + log(n) / log(1 / p) rounds


def test_more_loss_more_time_and_the_slowest_of_a_step():
    times = [tcploss.message_time(1e5, 0.0, 10e6, p, 0.002) for p in (0.0, 0.001, 0.01, 0.1, 0.3)]
    assert times == sorted(times) and len(set(times)) == len(times)
    one, four = (tcploss.recovery(0.1, 0.002, 10e6, concurrent=k).stall_s for k in (1, 4))
    assert four > one and four < 4 * one  # the unluckiest of four messages' segments, not four stalls


def test_the_window_only_under_a_loss_based_congestion_control():
    # 50 ms one way, 100 Mbit/s: Mathis et al.'s sqrt(3/(2p)) segments per round trip bind at 1% loss
    rtt, bps, p = 0.1, 100e6, 0.01
    cubic = tcploss.recovery(p, rtt, bps, "cubic")
    bbr = tcploss.recovery(p, rtt, bps, "bbr")
    window_bps = math.sqrt(3 / (2 * p)) * tcploss.MSS * 8 / rtt
    assert cubic.beta_factor == pytest.approx(bps / window_bps)
    assert bbr.beta_factor == pytest.approx(1 / (1 - p))


@pytest.mark.parametrize("loss", [-0.1, 0.5, 1.0])
def test_bad_loss_is_named(loss):
    with pytest.raises(ValueError, match=f"loss {loss!r}"):
        tcploss.recovery(loss, 0.001, 10e6)


def test_the_clocks_links_under_link_loss(tmp_path):
    """link_for charges every call the timer waits of its critical path's bytes on one connection per worker and
    every byte its resends; the parameter server's port each message alone for its own bytes; the testbed gets
    the loss and the congestion control; a synchronous run trains identically (TCP resends every packet) and
    takes longer."""
    from lowbw.compress.protocol import CallRecord
    from lowbw.net.costmodel import LinkParams
    from lowbw.runs.io import read_jsonl
    from lowbw.train import launch
    from lowbw.train.config import RunConfig
    from lowbw.train.links import message_stall
    from lowbw.train.schemes.parameter_server import server_link
    from lowbw.train.world import comm_cost, link_for
    from tests.helpers import sim_run, strip

    base = sim_run(workers=4, steps=6, bandwidth_mbit=10.0, latency_ms=1.0)
    plain, lossy = RunConfig.from_dict(base), RunConfig.from_dict({**base, "link_loss": 0.1})
    a, b = link_for(plain, "world"), link_for(lossy, "world")
    rtt = 2e-3 + tcploss.MSS * 8 / a.bandwidth_bps
    r = tcploss.recovery(0.1, rtt, a.bandwidth_bps, "bbr", 4)
    assert (b.alpha_s, b.bandwidth_bps, b.loss, b.rto_s, b.concurrent) == pytest.approx(
        (a.alpha_s, a.bandwidth_bps / r.beta_factor, 0.1, rtt + 0.2, 4))
    # three ring all-reduces of 40 KB in sequence: each worker sends 2 x 3/4 x 40,000 = 60,000 bytes a call, 42
    # segments; the call waits for the unluckiest of 4 x 42
    calls = {0: [[CallRecord("all_reduce", 40000, "ring", 4)] * 3] * 4}
    one = tcploss.stall(0.1, rtt + 0.2, 4 * 42)
    assert comm_cost(calls, b)["v_comm"] == pytest.approx(comm_cost(calls, LinkParams(b.alpha_s, b.bandwidth_bps))
                                                          ["v_comm"] + 3 * one)
    assert one > r.stall_s  # more than a one-segment message per worker
    s = server_link(lossy)
    assert (s.alpha_s, s.bandwidth_bps) == pytest.approx((a.alpha_s, a.bandwidth_bps / r.beta_factor))
    assert message_stall(s, 1e6) == pytest.approx(tcploss.stall(0.1, rtt + 0.2, 691))  # its own 691 segments
    assert message_stall(server_link(plain), 1e6) == 0.0
    args = launch.testbed_links(RunConfig.from_dict({**base, "link_loss": 0.01, "tcp_congestion": "cubic"}))
    assert (args["loss"], args["congestion_control"], args["link_emulator"]) == (0.01, "cubic", "userspace")
    launch.run(plain, tmp_path / "clean", quiet=True)
    launch.run(lossy, tmp_path / "lost", quiet=True)
    clean, lost = (read_jsonl(tmp_path / d / "metrics.jsonl") for d in ("clean", "lost"))
    same = [{k: v for k, v in ln.items() if not k.startswith("t_")} for ln in strip(lost)]
    assert same == [{k: v for k, v in ln.items() if not k.startswith("t_")} for ln in strip(clean)]
    assert lost[-1]["t_virtual"] > clean[-1]["t_virtual"]


@pytest.mark.parametrize("bad, match", [({"link_loss": 0.5}, "link_loss: 0.5"),
                                        ({"tcp_congestion": "cubic"}, "tcp_congestion: cubic")])
def test_bad_loss_keys_are_one_line_errors(bad, match):
    from lowbw.train.config import RunConfig

    with pytest.raises(ValueError, match=match):
        RunConfig.from_dict({"workers": 4, **bad})
