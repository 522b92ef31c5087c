"""The userspace link emulator: its delay line (pure, on a fake clock), when it is chosen, what it refuses,
and (root) a real round trip through it, its teardown and its refusal on the command line."""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lowbw.net import linkemu
from lowbw.net.link import LinkSpec
from lowbw.net.linkemu import DelayLine, Direction, Stats
from lowbw.net.probe import TestbedUnavailable
from tests.conftest import netns_tun as netns
from tests.netscripts import tcp_bulk, udp_echo

ROOT = Path(__file__).resolve().parents[2]


# ----------------------------------------------------------------------------------- delay line (pure)
def test_frames_are_due_delay_later_in_order():
    line = DelayLine(Direction(delay_s=0.02))
    assert line.admit(1.0, b"a" * 100) and line.admit(1.001, b"b" * 50)
    assert line.next_due() == pytest.approx(1.02) and line.queued_bytes == 150
    assert line.pop_due(1.0199) == []
    assert line.pop_due(1.0205) == [b"a" * 100]
    assert line.pop_due(1.03) == [b"b" * 50] and line.next_due() is None and line.queued_bytes == 0
    assert line.stats.frames == 2 and line.stats.bytes == 150
    # lateness: 0.5 ms for the first (bucket <= 500 us), 9 ms for the second (bucket <= 10 ms)
    assert line.stats.late[linkemu.LATE_BUCKETS_US.index(500)] == 1
    assert line.stats.late[linkemu.LATE_BUCKETS_US.index(10000)] == 1
    assert line.stats.late_max_s == pytest.approx(0.009)


def test_jitter_wanders_around_the_delay_without_reordering():
    line = DelayLine(Direction(delay_s=0.02, jitter_s=0.005, seed=3))
    times = [i * 1e-4 for i in range(200_000)]  # 10 000 frames/s for 20 s: 20 s / 40 ms = 500 knots
    for t in times:
        line.admit(t, b"x")
    dues = [d for d, _ in line.queue]
    delays = [d - t for t, d in zip(times, dues)]
    mean = sum(delays) / len(delays)
    sd = (sum((x - mean) ** 2 for x in delays) / len(delays)) ** 0.5
    assert dues == sorted(dues) and min(delays) >= 0
    assert line.period == 0.04 and abs(mean - 0.02) < 0.001 and 0.004 < sd < 0.006, (mean, sd)
    # neighbours differ by the slope's share only: no per-frame noise
    assert max(abs(a - b) for a, b in zip(delays, delays[1:])) < 0.001


def test_loss_drops_the_requested_fraction_reproducibly():
    def delivered(seed: int) -> list[int]:
        line = DelayLine(Direction(loss=0.1, seed=seed))
        return [i for i in range(20_000) if line.admit(0.0, b"x")]

    kept = delivered(7)
    assert kept == delivered(7) and kept != delivered(8)
    assert 0.88 < len(kept) / 20_000 < 0.92


def test_a_full_line_drops_and_counts_the_overflow():
    line = DelayLine(Direction(delay_s=1.0, limit_bytes=3000))
    assert [line.admit(0.0, b"x" * 1500) for _ in range(3)] == [True, True, False]
    assert line.stats.overflow == 1


def test_lateness_quantiles_come_from_the_histogram():
    s = Stats()
    for late in [0.00001] * 98 + [0.0015, 0.02]:
        s.record_late(late)
    assert s.late_quantile(0.5) == 50e-6 and s.late_quantile(0.99) == 0.002 and s.late_quantile(1.0) == float("inf")


# --------------------------------------------------------------------------- choice and refusals (pure)
DELAYED = [LinkSpec.parse("100mbit", delay="20ms")] * 2


@pytest.mark.parametrize("links, mode, netem, want", [
    (DELAYED, "auto", False, "userspace"),
    (DELAYED, "auto", True, "netem"),
    (DELAYED, "userspace", True, "userspace"),
    ([LinkSpec.parse("100mbit", loss="1%")] * 2, "auto", False, None),  # loss alone: the random-drop filter
    ([LinkSpec.parse("100mbit", loss="1%")] * 2, "userspace", False, "userspace"),
    ([LinkSpec.parse("100mbit")] * 2, "userspace", False, None),  # nothing to emulate
    ([LinkSpec.parse("100mbit", down_delay="5ms")] * 2, "auto", True, "userspace"),  # netem only on uplinks
])
def test_method_picks_what_adds_delay(links, mode, netem, want):
    assert linkemu.method(links, mode, netem) == want


def test_method_refuses_what_it_cannot_do():
    with pytest.raises(TestbedUnavailable, match="netem.*userspace"):
        linkemu.method(DELAYED, "netem", False)
    with pytest.raises(ValueError, match="downlink delay needs the userspace"):
        linkemu.method([LinkSpec.parse("1mbit", down_delay="1ms")], "netem", True)
    with pytest.raises(ValueError, match="rank 1: the userspace link emulator needs a rate"):
        linkemu.method([DELAYED[0], LinkSpec.parse(None, delay="20ms")], "auto", False)
    too_fast = [LinkSpec.parse("1gbit", delay="20ms")] * 2
    with pytest.raises(ValueError, match=r"sum to 2000 Mbit/s, more than .* keeps within 5%"):
        linkemu.method(too_fast, "auto", False)


def test_link_ends_carry_each_direction_and_distinct_seeds():
    ends = linkemu.link_ends(LinkSpec.parse("1mbit", delay="5ms", jitter="1ms", loss="1%", down_delay="2ms"),
                             3, "w3", "br", "lbw0", "p3")
    assert ends.up == Direction(0.005, 0.001, 0.01, seed=6) and ends.down == Direction(0.002, seed=7)
    assert (ends.worker_ns, ends.worker_if, ends.bridge_ns, ends.port_if) == ("w3", "lbw0", "br", "p3")


# --------------------------------------------------------------------------------------------- root
RTT_PROBE = udp_echo(29711, """
    s.settimeout(2); rtts = []
    for i in range(40):
        t = time.perf_counter(); s.sendto(b"p", addr); s.recvfrom(64)
        rtts.append(time.perf_counter() - t); time.sleep(0.01)
    s.sendto(b"end", addr)
    print("RTT_MS", statistics.median(rtts[3:]) * 1e3, flush=True)
""")


TCP_SCRIPT = tcp_bulk(200_000, 29712)


def _ours(prefix: str) -> list[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return [ln.split()[0] for ln in out.splitlines() if ln.split() and ln.split()[0].startswith(prefix + "-")]


def _cli(*args: str, **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "lowbw", "testbed", *args],
                            env=dict(os.environ, PYTHONPATH=str(ROOT)), cwd=ROOT, **kw)


@pytest.mark.netns
@netns
def test_cli_round_trip_is_twice_the_delay(tmp_path):
    """The acceptance check of issue 22: 2 workers, 100 Mbit/s, 20 ms: a round trip of 40 ms +- 10%."""
    prefix = "lbwe" + secrets.token_hex(3)
    (tmp_path / "rtt_probe.py").write_text(RTT_PROBE)
    p = _cli("--workers", "2", "--rate", "100mbit", "--delay", "20ms", "--link-emulator", "userspace", "--prefix",
             prefix, "--", sys.executable, str(tmp_path / "rtt_probe.py"), stdout=subprocess.PIPE,
             stderr=subprocess.PIPE, text=True)
    out, err = p.communicate(timeout=120)
    assert p.returncode == 0, err
    rtt = float(out.split("RTT_MS")[1].split()[0])
    assert 36 <= rtt <= 44, rtt
    assert _ours(prefix) == []


@pytest.mark.netns
@netns
def test_testbed_records_the_emulator_and_leaves_nothing_behind():
    from lowbw.net.testbed import Testbed

    prefix = "lbwe" + secrets.token_hex(3)
    # loss 3%: the draws are seeded per link (rank 1's uplink: seed 2, whose first draw under 0.03 is its 22nd),
    # so the ~140 data frames of 200 KB always lose some; at 1% the first loss came at draw 171 and a run
    # whose frames all fitted before it lost none
    with Testbed(2, rate="10mbit", delay="5ms", jitter="1ms", loss="3%", prefix=prefix,
                 link_emulator="userspace") as tb:
        emu = tb.net.emulator.proc
        d = tb.describe()
        assert d["impairment"] == "userspace" and tb.loss_method == "userspace"
        assert d["links"][0]["delay_s"] == 0.005 and "netem" not in tb.qdiscs() and "tbf" in tb.qdiscs()
        # 200 KB over TCP from rank 1 to rank 0 through the lossy, jittery emulated links
        assert tb.run([sys.executable, "-c", TCP_SCRIPT], timeout=60) == [0, 0]
    assert emu.poll() is not None and _ours(prefix) == []
    st = tb.emulator_stats
    assert st["frames"] > 150 and st["bytes"] > 200_000 and st["lost"] > 0 and st["cpu_s"] > 0 and st["scheduling"]


@pytest.mark.netns
@netns
def test_a_killed_testbed_takes_its_emulator_along():
    prefix = "lbwe" + secrets.token_hex(3)
    p = _cli("--workers", "2", "--rate", "10mbit", "--delay", "5ms", "--link-emulator", "userspace", "--prefix",
             prefix, "--", "sleep", "60")
    try:
        end = time.time() + 30
        while len(_ours(prefix)) < 3 and time.time() < end:
            time.sleep(0.1)
        time.sleep(1.0)
        emus = subprocess.run(["pgrep", "-f", f"linkemu /tmp/{prefix}-"], capture_output=True, text=True).stdout.split()
        assert len(emus) == 1
        p.send_signal(signal.SIGKILL)
        p.wait(timeout=10)
        end = time.time() + 10  # its stdin closed: it exits by itself
        while os.path.exists(f"/proc/{emus[0]}") and time.time() < end:
            time.sleep(0.1)
        assert not os.path.exists(f"/proc/{emus[0]}")
        from lowbw.net.namespaces import cleanup

        assert len(cleanup(prefix)) == 3
    finally:
        if p.poll() is None:
            p.kill()
        subprocess.run([sys.executable, "-m", "lowbw", "testbed", "--cleanup", "--prefix", prefix], cwd=ROOT,
                       capture_output=True)
    assert _ours(prefix) == []


@pytest.mark.netns
@netns
def test_cli_refuses_links_beyond_the_emulator_in_one_line():
    prefix = "lbwe" + secrets.token_hex(3)
    p = _cli("--workers", "2", "--rate", "1gbit", "--delay", "20ms", "--link-emulator", "userspace", "--prefix",
             prefix, "--", "true", stderr=subprocess.PIPE, text=True)
    err = p.communicate(timeout=60)[1].strip().splitlines()
    assert p.returncode == 2 and len(err) == 1 and "2000 Mbit/s" in err[0] and "5%" in err[0]
    assert _ours(prefix) == []
