"""What crossed each worker's link during a testbed run: bytes sent and received, and the time the link was
busy carrying them.

The counters are those of the bridge ports (one ``ip -j -s link`` call for every link): port ``p<r>``
receives what worker ``r`` sends and transmits what it receives (Ethernet frames, headers included). A
:class:`LinkMeter` samples them every ``interval_s`` and adds up, per direction, the time the link was busy:
per sample interval ``min(interval, bytes x 8 / the link's rate then)``, the time its shaper needed to pass
those bytes (rate changes of a schedule or trace included). Unshaped links have no busy time (None).
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

from lowbw.net.probe import run_command
from lowbw.net.units import format_rate

__all__ = ["LinkUsage", "LinkMeter", "port_counters", "format_bytes", "report_lines", "idle",
           "MIN_EXCHANGE_BYTES_PER_WORKER", "IDLE_FRACTION"]

#: what a gloo rendezvous plus one small collective puts on each worker's link at the least (sent +
#: received): measured 5.2-6.1 KB per link with 2 workers, 9-20 KB with 4 (rank 0 hosts the store)
MIN_EXCHANGE_BYTES_PER_WORKER = 5 * 1024
#: links that carried less than this fraction of it count as idle: the workers did not talk through them
#: (idle links carry only neighbour discovery: 50-180 bytes each measured)
IDLE_FRACTION = 0.2


@dataclass
class LinkUsage:
    """One worker's link over a run."""

    rank: int
    sent_bytes: int = 0  # what the worker sent (its uplink)
    received_bytes: int = 0  # what it received (its downlink)
    busy_up_s: float | None = None  # seconds its uplink was busy sending them at its rate (None: unshaped)
    busy_down_s: float | None = None
    up_bps: float | None = None  # the link's rates at the end of the run
    down_bps: float | None = None


def port_counters(bridge_ns: str, workers: int) -> list[tuple[int, int]] | None:
    """``(sent, received)`` bytes of every worker's link so far, from its bridge port's counters (rx = what
    the worker sent); None if they cannot be read."""
    res = run_command(["ip", "-n", bridge_ns, "-j", "-s", "link", "show"], check=False)
    try:
        ports = {d["ifname"]: d["stats64"] for d in json.loads(res.stdout)}
        return [(int(ports[f"p{r}"]["rx"]["bytes"]), int(ports[f"p{r}"]["tx"]["bytes"])) for r in range(workers)]
    except (ValueError, LookupError, TypeError):
        return None


class LinkMeter:
    """Samples ``read()`` (per worker ``(sent, received)`` byte counters) every ``interval_s`` on a daemon
    thread from :meth:`start` to :meth:`stop`; ``rates()`` gives each worker's ``(up, down)`` bits/s now."""

    def __init__(self, read: Callable[[], list[tuple[int, int]] | None],
                 rates: Callable[[], Sequence[tuple[float | None, float | None]]], interval_s: float = 0.5,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._read, self._rates, self.interval_s, self._clock = read, rates, interval_s, clock
        self._first: list[tuple[int, int]] | None = None
        self._last: list[tuple[int, int]] | None = None
        self._t_last = 0.0
        self._busy: list[list[float | None]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self.t0: float | None = None
        self.seconds = 0.0

    def start(self) -> LinkMeter:
        first = self._read()
        with self._lock:
            self.t0 = self._t_last = self._clock()
            self._first = self._last = first
            rates = list(self._rates())
            self._busy = [[0.0 if up else None, 0.0 if down else None] for up, down in rates]
        if first is not None:
            self._thread = threading.Thread(target=self._loop, name="lowbw-linkmeter", daemon=True)
            self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            with contextlib.suppress(Exception):  # the testbed may be closing
                self.sample()

    def sample(self) -> None:
        """Read the counters now and add this interval's busy time."""
        now_counts = self._read()
        with self._lock:
            now = self._clock()
            if now_counts is None or self._last is None:
                return
            dt = now - self._t_last
            for r, ((s0, r0), (s1, r1), (up, down)) in enumerate(zip(self._last, now_counts, self._rates())):
                for d, (nbytes, bps) in enumerate(((s1 - s0, up), (r1 - r0, down))):
                    if bps and self._busy[r][d] is not None:
                        self._busy[r][d] += min(dt, max(0, nbytes) * 8.0 / bps)
            self._last, self._t_last = now_counts, now
            self.seconds = now - (self.t0 or now)

    def stop(self) -> list[LinkUsage] | None:
        """Stop sampling (after one last sample) and return every worker's usage (None without counters)."""
        self._stop.set()
        t = self._thread
        if t is not None and t is not threading.current_thread():
            t.join(timeout=5)
        if self._first is None:
            self.seconds = self._clock() - (self.t0 if self.t0 is not None else self._clock())
            return None
        self.sample()
        return self.usage()

    def usage(self) -> list[LinkUsage] | None:
        with self._lock:
            if self._first is None or self._last is None:
                return None
            rates = list(self._rates())
            return [LinkUsage(r, s1 - s0, r1 - r0, *self._busy[r], *rates[r])
                    for r, ((s0, r0), (s1, r1)) in enumerate(zip(self._first, self._last))]


def format_bytes(n: float) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{int(n)} B"


def _busy(s: float | None) -> str:
    return "unshaped" if s is None else f"busy {s:.3g} s"


def report_lines(usage: Sequence[LinkUsage], seconds: float) -> list[str]:
    """What crossed each worker's link, one line per worker (the testbed prints them at the end of a run)."""
    out = [f"what crossed each worker's link in {seconds:.3g} s (bytes on the wire; busy: the time the link's "
           "rate needed for them):"]
    for u in usage:
        rate = "" if u.up_bps is None else f" at {format_rate(u.up_bps)}" + (
            "" if u.down_bps == u.up_bps else f" up, {format_rate(u.down_bps)} down" if u.down_bps else "")
        out.append(f"  rank {u.rank}: sent {format_bytes(u.sent_bytes)} ({_busy(u.busy_up_s)}), received "
                   f"{format_bytes(u.received_bytes)} ({_busy(u.busy_down_s)}){rate}")
    return out


def idle(usage: Sequence[LinkUsage] | None, codes: Sequence[int]) -> bool:
    """Whether the idle-links warning applies: every worker succeeded, there are at least two, and their
    links carried less than ``IDLE_FRACTION`` of what a rendezvous plus one collective puts on them."""
    if usage is None or len(usage) < 2 or any(c != 0 for c in codes):
        return False
    moved = sum(u.sent_bytes + u.received_bytes for u in usage)
    return moved < IDLE_FRACTION * MIN_EXCHANGE_BYTES_PER_WORKER * len(usage)


def as_json(usage: Sequence[LinkUsage] | None) -> list[dict] | None:
    return None if usage is None else [asdict(u) for u in usage]
