"""In-process link emulation (the loopback-ratelimit fallback): pacing arithmetic on a fake clock."""

from __future__ import annotations

import pytest

from lowbw.net.ratelimit import LinkLimiter, emulation_from_env


class FakeClock:
    def __init__(self):
        self.t = 100.0

    def now(self) -> float:
        return self.t

    def sleep(self, d: float) -> None:
        assert d >= 0
        self.t += d


def make(rate=8e6, delay=0.0, schedule=()):
    c = FakeClock()
    import time

    lim = LinkLimiter(rate, delay, schedule, t0=time.time(), sleep=c.sleep, clock=c.now)
    return lim, c


def test_uplink_paces_sends():
    lim, c = make()  # 8 Mbit/s = 1 MB/s
    lim.before_send(1_000_000)
    assert c.t == pytest.approx(101.0)
    lim.before_send(500_000)
    assert c.t == pytest.approx(101.5)
    assert lim.sent_bytes == 1_500_000


def test_downlink_fan_in_serialises_but_a_streamed_message_is_free():
    lim, c = make()
    c.t += 1.0  # a 1 MB message streamed in over the last second (sender-paced): no extra wait
    lim.after_recv(1_000_000)
    assert c.t == pytest.approx(101.0)
    # three messages that completed at the same moment (fan-in, a parameter server's root)
    lim2, c2 = make()
    c2.t += 1.0
    for k in range(3):
        lim2.after_recv(1_000_000)
        assert c2.t == pytest.approx(101.0 + k)


def test_delay_is_added_per_message():
    lim, c = make(delay=0.01)
    lim.after_recv(0)
    assert c.t == pytest.approx(100.01)


def test_schedule_changes_the_rate():
    lim, c = make(rate=8e6, schedule=[(0, 8e6), (5, 0.8e6)])
    assert lim.rate_at() == 8e6
    c.t += 10
    assert lim.rate_at() == 0.8e6
    t = c.t
    lim.before_send(100_000)  # 0.1 MB at 0.1 MB/s
    assert c.t - t == pytest.approx(1.0)


def test_rejects_zero_rate():
    with pytest.raises(ValueError):
        LinkLimiter(0)


def test_emulation_from_env(monkeypatch):
    monkeypatch.delenv("LOWBW_EMULATION", raising=False)
    assert emulation_from_env() == {}
    monkeypatch.setenv("LOWBW_EMULATION", "loopback-ratelimit")
    monkeypatch.setenv("LOWBW_LINK_RATE_BPS", "1e7")
    monkeypatch.setenv("LOWBW_RATE_SCHEDULE", "[[0, 1e7], [3, 1e6]]")
    e = emulation_from_env()
    assert e["rate_bps"] == 1e7 and e["schedule"] == [(0, 1e7), (3, 1e6)] and e["delay_s"] == 0.0
