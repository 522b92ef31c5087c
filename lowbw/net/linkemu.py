"""A userspace link emulator: delay, jitter and loss on the testbed's links where the kernel has no netem.

Each worker's link becomes a pair of TAP devices in place of the veth pair: ``lbw0`` in the worker's namespace
and ``p<r>`` in the bridge namespace (a bridge port like the veth end it replaces). This process holds both
ends and moves every Ethernet frame from one to the other through a :class:`DelayLine` per direction:

    worker --lbw0 (tbf: rate, queue)--> [uplink DelayLine]   --> p<r> --> bridge
    bridge --p<r> (tbf: rate, queue)--> [downlink DelayLine] --> lbw0 --> worker

The kernel's tbf shapers stay where they are on the veth links (each device's egress), so the token bucket,
the queue limit and the fair queueing are the same with or without delay; the emulator is the wire after
them: it delays each frame by the direction's current delay (``delay``, wandering with standard deviation
``jitter``) and drops a fraction ``loss``. Frames of one direction leave in the order they came (a frame
never overtakes an earlier one, as on a real link).

It runs as ``python -m lowbw.net.linkemu SPEC.json`` (spec: :func:`write_spec`), prints ``ready`` once the
devices exist, takes control lines on its stdin (``DELAY <rank> <seconds>``: a new uplink delay), and exits
on SIGTERM or when its stdin closes (its testbed is gone), writing its statistics
(:class:`Stats`) to the spec's ``stats`` path. One select loop serves every link; it is single-threaded
because ``setns`` switches only the calling thread's namespace.
"""

from __future__ import annotations

import collections
import ctypes
import dataclasses
import fcntl
import json
import math
import os
import random
import select
import signal
import struct
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

from lowbw.net.link import LinkSpec
from lowbw.net.probe import TestbedUnavailable

__all__ = ["MAX_TOTAL_BPS", "method", "check_capacity", "link_ends", "Direction", "DelayLine", "Stats",
           "LinkEnds", "Emulator", "write_spec", "main", "LATE_BUCKETS_US"]

TUNSETIFF = 0x400454CA
IFF_TAP, IFF_NO_PI = 0x0002, 0x1000
CLONE_NEWNET = 0x40000000
MAX_FRAME = 65536  # bytes read per frame (a TAP delivers one frame per read)
READ_BATCH = 64  # frames read from one device before looking at the others and the clock
JITTER_PERIOD_S = 0.01  # the delay path's knots are this far apart at least (seconds) ...
JITTER_PERIODS = 8  # ... and at least this many jitters apart: slopes of about jitter / period << 1 s/s
RT_PRIORITY = 50  # SCHED_FIFO priority of the emulator (above --realtime workers' default of 10)
#: upper bounds (microseconds) of the lateness histogram: how long after its due time a frame was written
LATE_BUCKETS_US = (50, 100, 200, 500, 1000, 2000, 5000, 10000, float("inf"))


#: Sum of the workers' uplink rates (bits/s) the emulator accepts: every byte crosses it twice (the
#: sender's uplink, the receiver's downlink), and with more than this the median added delay of a round
#: trip under full load strayed more than 5% from the requested one on the 2-core machine it was measured
#: on (numbers: README and the commit that set it).
MAX_TOTAL_BPS = 200e6


@dataclass(frozen=True)
class Direction:
    """What one direction of a link adds to every frame. Seconds and a fraction."""

    delay_s: float = 0.0  # one-way delay
    jitter_s: float = 0.0  # standard deviation of the delay over time (see DelayLine)
    loss: float = 0.0  # fraction of frames dropped at random
    limit_bytes: int = 64 << 20  # frames in the delay line at most (more are dropped): far above delay x rate
    seed: int = 0  # of the loss and jitter draws


@dataclass
class Stats:
    """What the emulator did, per direction and in all."""

    frames: int = 0  # frames delivered
    bytes: int = 0  # bytes delivered
    lost: int = 0  # dropped at random (``loss``)
    overflow: int = 0  # dropped because the delay line held ``limit_bytes``
    late: list[int] = field(default_factory=lambda: [0] * len(LATE_BUCKETS_US))  # histogram, LATE_BUCKETS_US
    late_max_s: float = 0.0  # the latest a frame was written after its due time
    cpu_s: float = 0.0  # CPU time of the emulator process (user + system), all links
    cpu_sys_s: float = 0.0  # ... of which in the kernel (a write to a TAP device runs the receive path)
    wall_s: float = 0.0  # how long it ran

    def record_late(self, late_s: float) -> None:
        us = late_s * 1e6
        for i, bound in enumerate(LATE_BUCKETS_US):
            if us <= bound:
                self.late[i] += 1
                break
        self.late_max_s = max(self.late_max_s, late_s)

    def late_quantile(self, q: float) -> float:
        """Upper bound (seconds) of the ``q`` quantile of lateness, from the histogram."""
        total, seen = sum(self.late), 0
        for n, bound in zip(self.late, LATE_BUCKETS_US):
            seen += n
            if total and seen >= q * total:
                return bound / 1e6
        return 0.0


class DelayLine:
    """One direction of a link: frames enter with :meth:`admit` and leave when due.

    The delay is a path ``D(t)`` through knots every ``period = max(JITTER_PERIOD_S, JITTER_PERIODS x
    jitter)`` seconds, linear between them; each knot is ``delay + N(0, jitter * sqrt(3/2))`` truncated at 0
    (linear interpolation between independent knots has 2/3 of their variance, so over time ``D`` has mean
    ``delay`` and standard deviation ``jitter``). Its slope is mostly far above -1 s/s, so frames rarely
    compete for order; a frame admitted at ``t`` is due at ``max(t + D(t), due of the previous frame)``.
    With probability ``loss`` a frame is dropped instead. Pure: the clock is the caller's."""

    def __init__(self, direction: Direction):
        self.d = direction
        self.rng = random.Random(direction.seed)
        self.queue: collections.deque[tuple[float, bytes]] = collections.deque()
        self.queued_bytes = 0
        self.last_due = 0.0
        self.stats = Stats()
        self.period = max(JITTER_PERIOD_S, JITTER_PERIODS * direction.jitter_s)
        self._knots: tuple[float, float, float] | None = None  # (time of the first knot, its delay, next's)

    def _knot(self) -> float:
        return max(0.0, self.rng.gauss(self.d.delay_s, self.d.jitter_s * math.sqrt(1.5)))

    def delay_at(self, now: float) -> float:
        """``D(now)``; time only moves forward."""
        if not self.d.jitter_s:
            return self.d.delay_s
        if self._knots is None:
            self._knots = (now, self._knot(), self._knot())
        t0, a, b = self._knots
        while now >= t0 + self.period:
            t0, a, b = t0 + self.period, b, self._knot()
        self._knots = (t0, a, b)
        return a + (b - a) * (now - t0) / self.period

    def admit(self, now: float, frame: bytes) -> bool:
        """Queue ``frame`` (arrived at ``now``); False if it was dropped."""
        d = self.d
        if d.loss and self.rng.random() < d.loss:
            self.stats.lost += 1
            return False
        if self.queued_bytes + len(frame) > d.limit_bytes:
            self.stats.overflow += 1
            return False
        self.last_due = max(now + self.delay_at(now), self.last_due)
        self.queue.append((self.last_due, frame))
        self.queued_bytes += len(frame)
        return True

    def next_due(self) -> float | None:
        return self.queue[0][0] if self.queue else None

    def pop_due(self, now: float) -> list[bytes]:
        """The frames due at ``now``, in order (each one's lateness recorded)."""
        out = []
        while self.queue and self.queue[0][0] <= now:
            due, frame = self.queue.popleft()
            self.queued_bytes -= len(frame)
            self.stats.frames += 1
            self.stats.bytes += len(frame)
            self.stats.record_late(now - due)
            out.append(frame)
        return out


@dataclass(frozen=True)
class LinkEnds:
    """One worker's link for the emulator: its two TAP devices and what each direction adds."""

    worker_ns: str  # namespace of the worker's end
    worker_if: str  # its name there (lbw0)
    bridge_ns: str  # namespace of the bridge
    port_if: str  # the bridge port's name (p<rank>)
    up: Direction  # worker -> bridge
    down: Direction  # bridge -> worker


def method(links: Sequence[LinkSpec], mode: str, netem: bool, delay_changes: bool = False) -> str | None:
    """What adds the links' delay, jitter and loss: ``"netem"``, ``"userspace"`` (this emulator), or None
    (nothing to add, or only loss without netem: the random-drop classifier of :mod:`lowbw.net.tc`).
    ``mode``: ``"auto"`` (netem when the kernel has it and no link delays its downlink, else userspace),
    ``"netem"``, ``"userspace"``; ``delay_changes``: a trace changes delays while running (which only the
    userspace emulator does). Raises TestbedUnavailable / ValueError naming what is wrong."""
    delayed = any(link.delayed for link in links) or delay_changes
    if delay_changes and mode == "netem":
        raise ValueError("a trace that changes delays needs the userspace link emulator (link_emulator='userspace')")
    if mode == "userspace":
        method_ = "userspace" if any(link.impaired for link in links) else None
    elif mode == "netem" or (mode == "auto" and netem and not delay_changes
                             and not any(link.down_delay_s for link in links)):
        if delayed and not netem:
            raise TestbedUnavailable([
                "tc netem (kernel sch_netem, CONFIG_NET_SCH_NETEM) for delay/jitter -- this kernel lacks it; "
                "rate shaping (tbf) and loss work without it, and link_emulator='userspace' "
                "(--link-emulator userspace) adds delay in userspace"])
        if any(link.down_delay_s for link in links):
            raise ValueError("a downlink delay needs the userspace link emulator (link_emulator='userspace')")
        method_ = "netem" if netem and any(link.impaired for link in links) else None
    else:
        method_ = "userspace" if delayed else None
    if method_ == "userspace":
        check_capacity(links)
    return method_


def check_capacity(links: Sequence[LinkSpec]) -> None:
    """ValueError (one line) unless every link is shaped and their uplinks sum to at most MAX_TOTAL_BPS."""
    for r, link in enumerate(links):
        if link.up_bps is None or link.down_bps is None:
            raise ValueError(f"rank {r}: the userspace link emulator needs a rate on every link (rate=None "
                             "would measure the emulator, not a link)")
    total = sum(link.up_bps for link in links)
    if total > MAX_TOTAL_BPS:
        raise ValueError(f"the links' rates sum to {total / 1e6:g} Mbit/s, more than the userspace link emulator "
                         f"keeps within 5% of its delay here ({MAX_TOTAL_BPS / 1e6:g} Mbit/s in all)")


def link_ends(link: LinkSpec, rank: int, worker_ns: str, bridge_ns: str, worker_if: str, port_if: str
              ) -> LinkEnds:
    """Worker ``rank``'s link for the emulator (loss and jitter draws seeded by rank and direction)."""
    return LinkEnds(worker_ns, worker_if, bridge_ns, port_if,
                    up=Direction(link.delay_s, link.jitter_s, link.loss, seed=2 * rank),
                    down=Direction(link.down_delay_s, seed=2 * rank + 1))


def write_spec(path: str, links: list[LinkEnds], stats_path: str) -> None:
    """The emulator's input file: every link, and where to write the statistics."""
    with open(path, "w") as f:
        json.dump({"links": [asdict(link) for link in links], "stats": stats_path}, f)


def _read_spec(path: str) -> tuple[list[LinkEnds], str]:
    with open(path) as f:
        spec = json.load(f)
    links = [LinkEnds(**{**x, "up": Direction(**x["up"]), "down": Direction(**x["down"])}) for x in spec["links"]]
    return links, spec["stats"]


_libc = ctypes.CDLL(None, use_errno=True)


def _setns(fd: int) -> None:
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns: {os.strerror(err)}")


def _open_tap(ns: str, name: str) -> int:
    """Create TAP device ``name`` in namespace ``ns`` (this thread enters it for the creation; the device
    lives as long as the returned descriptor)."""
    ns_fd = os.open(f"/run/netns/{ns}", os.O_RDONLY)
    try:
        _setns(ns_fd)
        fd = os.open("/dev/net/tun", os.O_RDWR | os.O_NONBLOCK)
        fcntl.ioctl(fd, TUNSETIFF, struct.pack("16sH", name.encode(), IFF_TAP | IFF_NO_PI))
        return fd
    finally:
        os.close(ns_fd)


def _open_links(links: list[LinkEnds]) -> dict[int, tuple[DelayLine, int]]:
    """TAP pairs of every link: {read fd: (its direction's DelayLine, fd the frames are written to)}."""
    home = os.open("/proc/self/ns/net", os.O_RDONLY)
    routes: dict[int, tuple[DelayLine, int]] = {}
    try:
        for link in links:
            w = _open_tap(link.worker_ns, link.worker_if)
            b = _open_tap(link.bridge_ns, link.port_if)
            routes[w] = (DelayLine(link.up), b)
            routes[b] = (DelayLine(link.down), w)
    finally:
        _setns(home)
        os.close(home)
    return routes


def _control(data: bytes, uplinks: list[DelayLine]) -> None:
    """Apply control lines ``DELAY <rank> <seconds>`` (a new uplink delay; frames keep their order, so
    after a drop the queued ones leave together)."""
    for line in data.decode(errors="replace").splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[0] == "DELAY":
            up = uplinks[int(parts[1])]
            up.d = dataclasses.replace(up.d, delay_s=float(parts[2]))


class _Stop(Exception):
    """SIGTERM: stop serving."""


def _serve(routes: dict[int, tuple[DelayLine, int]]) -> None:
    """The loop: write what is due, then wait for an arrival or the next due time, read what arrived.

    ``select`` rather than epoll: its timeout has microsecond resolution (epoll's is whole milliseconds,
    which would hold every frame up to a millisecond in each direction), and a testbed has few devices."""
    stdin = sys.stdin.fileno()  # control lines (_control); EOF: the testbed is gone
    uplinks = [line for line, _ in routes.values()][0::2]  # _open_links adds rank r's uplink as entry 2r
    fds = [*routes, stdin]
    lines = [(line, out) for line, out in routes.values()]
    clock = time.monotonic
    while True:
        now = clock()
        wait = None
        for line, out in lines:
            for frame in line.pop_due(now):
                try:
                    os.write(out, frame)
                except OSError:  # device gone or its queue full: the frame is lost, as on a wire
                    line.stats.overflow += 1
            due = line.next_due()
            if due is not None:
                wait = due - now if wait is None else min(wait, due - now)
        ready = select.select(fds, [], [], None if wait is None else max(0.0, wait))[0]
        now = clock()
        for fd in ready:
            if fd == stdin:
                data = os.read(fd, 4096)
                if not data:
                    return
                _control(data, uplinks)
                continue
            line, _ = routes[fd]
            for _ in range(READ_BATCH):
                try:
                    frame = os.read(fd, MAX_FRAME)
                except BlockingIOError:
                    break
                line.admit(now, frame)


def _total(routes: dict[int, tuple[DelayLine, int]], t0: float) -> dict:
    lines = [line for line, _ in routes.values()]
    t = os.times()
    total = Stats(cpu_s=t.user + t.system, cpu_sys_s=t.system, wall_s=time.monotonic() - t0)
    for line in lines:
        s = line.stats
        total.frames += s.frames
        total.bytes += s.bytes
        total.lost += s.lost
        total.overflow += s.overflow
        total.late = [a + b for a, b in zip(total.late, s.late)]
        total.late_max_s = max(total.late_max_s, s.late_max_s)
    return {**asdict(total), "late_p50_s": total.late_quantile(0.5), "late_p99_s": total.late_quantile(0.99),
            "directions": [asdict(line.stats) for line in lines]}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m lowbw.net.linkemu SPEC.json", file=sys.stderr)
        return 2
    links, stats_path = _read_spec(argv[0])
    def on_term(signum: int, frame: object) -> None:
        raise _Stop  # epoll_wait is restarted after a handler returns: unwind instead

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the testbed's Ctrl-C is its to handle
    try:  # a wire does not wait for a CPU: run ahead of the workers and whatever else shares the cores
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(RT_PRIORITY))
        scheduling = f"SCHED_FIFO priority {RT_PRIORITY}"
    except (OSError, AttributeError):
        scheduling = "fair (SCHED_OTHER): SCHED_FIFO not allowed here"
    t0 = time.monotonic()
    routes = _open_links(links)
    print("ready", flush=True)
    try:
        _serve(routes)
    except _Stop:
        pass
    finally:
        with open(stats_path + ".tmp", "w") as f:
            json.dump({**_total(routes, t0), "scheduling": scheduling}, f)
        os.replace(stats_path + ".tmp", stats_path)
        for fd in routes:
            os.close(fd)
    return 0


class Emulator:
    """The parent's handle on an emulator process: :meth:`start` returns once every TAP device exists,
    :meth:`stop` ends it and returns its statistics. Its stdin is a pipe from this process, so it also
    ends when this process dies, however it dies."""

    def __init__(self, links: list[LinkEnds], workdir: str):
        self.links = links
        self.spec_path = os.path.join(workdir, "linkemu.json")
        self.stats_path = os.path.join(workdir, "linkemu-stats.json")
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float = 30.0) -> None:
        write_spec(self.spec_path, self.links, self.stats_path)
        self.proc = subprocess.Popen([sys.executable, "-m", "lowbw.net.linkemu", self.spec_path],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     start_new_session=True)
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        line = self.proc.stdout.readline() if ready else b""
        if line.strip() != b"ready":
            self.proc.kill()
            err = self.proc.communicate(timeout=10)[1].decode(errors="replace").strip().splitlines()
            raise RuntimeError("the userspace link emulator did not start"
                               + (f": {err[-1]}" if err else f" within {timeout:g} s"))

    def set_delay(self, rank: int, delay_s: float) -> None:
        """Worker ``rank``'s uplink delay becomes ``delay_s`` from now on."""
        assert self.proc is not None and self.proc.stdin is not None
        self.proc.stdin.write(f"DELAY {rank} {delay_s!r}\n".encode())
        self.proc.stdin.flush()

    def stop(self) -> dict | None:
        """End the process (SIGTERM, then SIGKILL after 5 s); its statistics, or None if it wrote none."""
        p = self.proc
        if p is None:
            return None
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        for f in (p.stdin, p.stdout, p.stderr):
            if f is not None:
                f.close()
        try:
            with open(self.stats_path) as f:
                return json.load(f)
        except (OSError, ValueError):
            return None


if __name__ == "__main__":
    sys.exit(main())
