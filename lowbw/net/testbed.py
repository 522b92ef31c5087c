"""A real low-bandwidth network on one machine: network namespaces, veth pairs, a bridge and ``tc``.

Topology (nothing is created or changed in the root namespace)::

    <tag>-br  (namespace)           <tag>-w0 .. <tag>-w{N-1}  (namespaces)
      br0 (bridge)
       +-- p0 <=== veth ===> lbw0   10.231.0.1/24   rank 0 (MASTER_ADDR)
       +-- p1 <=== veth ===> lbw0   10.231.0.2/24   rank 1
       ...

Each worker has its own full-duplex link, shaped in both directions with ``tbf``: its uplink on ``lbw0``
(worker egress) and its downlink on the bridge port ``p<i>`` (bridge egress towards the worker), so the
network is the star of per-worker links that :mod:`lowbw.net.costmodel` assumes. Delay, jitter and loss are
added on the uplink only (one-way worker-to-worker latency = ``delay``), with ``netem`` when the kernel has
it; loss without netem falls back to a classic-BPF random classifier that sends a fraction of packets to a
zero-length fifo. Each tbf holds at most ``queue`` seconds of data at its rate (default 100 ms, the
usual emulation choice): a deep buffer (seconds at 10 Mbit/s) makes a lost packet cost seconds of TCP
recovery and made duplex transfers at 10 Mbit/s vary by 25% between repetitions. It holds at least 256
full-size frames (``MIN_QUEUE_BYTES``, 310 ms at 10 Mbit/s): with 125 KB at 10 Mbit/s, each new flow of the
pairwise-round algorithms (butterfly, roundrobin, alltoall; 4 workers) overflowed the sender's queue (TCP
BBR's start-up, 600-1000 drops per link) and a 1 MB all-reduce took 1.7-2.3 s instead of 1.27 s; with 375 KB
nothing dropped and all three matched the cost model within 3%. With ``ack_priority`` (default on) each
shaper's queue schedules like fq_codel, Linux's default qdisc (which this kernel may lack): pure TCP ACKs
(no payload; and non-TCP frames under 128 bytes) leave first, and data waits in one queue per peer, the
queues served round robin, so a connection's packets stay in order and a short message to one peer does not
wait behind data to another (:func:`queue_classifier_bpf`). Without ACK priority each direction's ACKs wait
behind the other direction's data and duplex transfers at 10 Mbit/s came out 2-12% slower and erratic
(8.5 s vs 8.7-9.6 s for 10 MB).
The rate can be changed on a schedule while a job runs (``tc qdisc change``).

``realtime=p`` runs the workers under SCHED_RR priority ``p``, as if each had its CPU to itself: N emulated
machines share this host's cores, and under the fair scheduler a worker woken by its network data waits for
a CPU. On 2 cores this added 2-6 ms to 20-50% of 1 MB all-reduces at 1 Gbit/s (2 workers; 7.5-7.9 ms when
undisturbed, gloo's and ours alike) and to none under SCHED_RR. Off by default: a worker that computes
for long stretches under SCHED_RR delays everything else on its core, the rest of this machine included.

Names are ``<prefix>-<pid>-<random>-...`` so parallel testbeds do not collide; teardown (kill the workers,
delete the namespaces, which deletes their veths, the bridge and every qdisc) runs on normal exit,
exceptions, SIGINT/SIGTERM and atexit, and ``cleanup()`` removes leftovers of dead testbeds.

Without root, ``ip`` or ``tc`` the same API runs the workers on loopback with
``emulation="loopback-ratelimit"``: nothing is shaped by the kernel; programs that call
:func:`lowbw.net.ratelimit.install_from_env` get in-process token-bucket rate limiting of their own sends
and receives. Results are labelled with the emulation mode.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import threading
import time
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from lowbw.net.costmodel import parse_rate, parse_time

__all__ = [
    "Testbed",
    "TestbedUnavailable",
    "RealtimeUnavailable",
    "netns_missing",
    "netns_available",
    "has_netem",
    "parse_schedule",
    "cleanup",
    "list_leftovers",
    "realtime_available",
    "EMULATIONS",
]

EMULATIONS = ("netns-tc", "loopback-ratelimit")
DEFAULT_PREFIX = "lbw"
SUBNET = "10.231.0"  # only ever configured inside our own namespaces
WORKER_IF = "lbw0"
MAX_WORKERS = 250
DEFAULT_QUEUE_S = 0.1  # seconds of data each tbf queues at its rate
QUANTUM = 1514  # bytes a bulk queue may send per round-robin turn (one full frame, as fq_codel)
MIN_QUEUE_BYTES = 256 * 1514  # ... but at least 256 full-size frames (387 KB: 310 ms at 10 Mbit/s)
# Uplink octet (destination address) and downlink octet (source address) of a frame: byte offsets from the
# Ethernet header of the last octet of the IPv4 destination / source address.
DST_OCTET, SRC_OCTET = 33, 29


def queue_classifier_bpf(h: int, octet_offset: int) -> str:
    """Classic BPF for cls_bpf (the packet from its Ethernet header) on the HTB with handle ``h``:

    * pure TCP ACKs (IPv4 TCP with no payload: total length = IP header + TCP header) and short (< 128 bytes)
      frames that are not TCP: ``-1``, the filter's classid (the priority class ``h:1``);
    * every other IPv4 frame: class ``h:(0x100 + the peer's last address octet, at octet_offset)``, one
      queue per peer, served round robin;
    * anything else: no match (the HTB's default class).

    Classifying by length alone (an earlier version) also put short *data* segments (gloo's control
    messages) ahead of their own connection's queued data: the receiver saw them out of order and the sender
    retransmitted spuriously (2 workers, 1 Gbit/s, 40 x 1 MB ring all-reduces: 80 fast retransmits, all
    undone by D-SACK). One FIFO for all bulk data instead made a control message to one peer wait behind up
    to ``queue`` seconds of data to another (3 workers, 1 Gbit/s, 1 MB ring all-reduce: 12.2 ms against
    10.7 ms). Per-peer queues keep each connection in order and let a sparse flow pass after one round.
    """
    base = (h << 16) | 0x100
    prog = [
        "40 0 0 12",      # 0  ldh [12]             ethertype
        "21 0 17 2048",   # 1  jeq #0x800 ? 2 : 19   IPv4
        "48 0 0 23",      # 2  ldb [23]             IP protocol
        "21 0 10 6",      # 3  jeq #6 ? 4 : 14       TCP
        "40 0 0 16",      # 4  ldh [16]             IP total length
        "2 0 0 0",        # 5  st M[0]
        "177 0 0 14",     # 6  ldxb 4*([14]&0xf)    X = IP header length
        "80 0 0 26",      # 7  ldb [x+26]           TCP data offset (high nibble)
        "116 0 0 4",      # 8  rsh #4
        "100 0 0 2",      # 9  lsh #2               A = TCP header length
        "12 0 0 0",       # 10 add x                A = IP + TCP header length
        "7 0 0 0",        # 11 tax
        "96 0 0 0",       # 12 ld M[0]
        "29 7 2 0",       # 13 jeq x ? 21 : 16      no payload: priority; else per peer
        "128 0 0 0",      # 14 ld len               IPv4, not TCP
        "53 0 5 128",     # 15 jge #128 ? 16 : 21
        f"48 0 0 {octet_offset}",  # 16 ldb [peer octet]
        f"68 0 0 {base}",  # 17 or #(h << 16 | 0x100)
        "22 0 0 0",       # 18 ret a                 classid h:(100 + octet)
        "128 0 0 0",      # 19 ld len               not IPv4
        "53 1 0 128",     # 20 jge #128 ? 22 : 21
        "6 0 0 4294967295",  # 21 ret -1 (the filter's classid: priority)
        "6 0 0 0",        # 22 ret 0 (no match: default class)
    ]
    return ",".join([str(len(prog)), *prog])


class RealtimeUnavailable(RuntimeError):
    """``realtime`` was asked for, but this process may not put its children under SCHED_RR."""


class TestbedUnavailable(RuntimeError):
    """The netns + tc testbed cannot run here; ``missing`` lists what is missing."""

    __test__ = False  # not a pytest test class

    def __init__(self, missing: Sequence[str]):
        self.missing = list(missing)
        super().__init__(
            "the netns + tc testbed needs: " + "; ".join(self.missing)
            + ". Run as root with iproute2 installed (apt-get install iproute2), or use "
              "emulation='loopback-ratelimit' (--emulation loopback-ratelimit), which rate-limits in-process "
              "on loopback."
        )


# -------------------------------------------------------------------------------------- probes
def _run(cmd: Sequence[str], check: bool = True, timeout: float = 30, input: str | None = None
         ) -> subprocess.CompletedProcess:
    p = subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout, input=input)
    if check and p.returncode != 0:
        raise RuntimeError(f"command failed ({p.returncode}): {' '.join(cmd)}\n{p.stderr.strip()}")
    return p


_PROBE: dict[str, Any] = {}
_PROBE_LOCK = threading.Lock()


def _probe() -> dict[str, Any]:
    """Probe once per process: root, ip, tc, and whether namespaces/veth/bridge/tbf/netem really work."""
    with _PROBE_LOCK:
        if _PROBE:
            return _PROBE
        missing: list[str] = []
        if os.name != "posix" or not sys.platform.startswith("linux"):
            missing.append("Linux")
        elif os.geteuid() != 0:
            missing.append("root (CAP_NET_ADMIN + CAP_SYS_ADMIN to create network namespaces); running as uid "
                           f"{os.geteuid()}")
        for tool in ("ip", "tc"):
            if shutil.which(tool) is None:
                missing.append(f"the '{tool}' command (package iproute2)")
        netem = False
        if not missing:
            ns = f"{DEFAULT_PREFIX}-probe-{os.getpid()}-{secrets.token_hex(3)}"
            try:
                p = _run(["ip", "netns", "add", ns], check=False)
                if p.returncode != 0:
                    missing.append(f"working network namespaces ('ip netns add' failed: {p.stderr.strip()})")
                else:
                    steps = [
                        (["ip", "-n", ns, "link", "add", "pa", "type", "veth", "peer", "name", "pb"], "veth devices"),
                        (["ip", "-n", ns, "link", "add", "br0", "type", "bridge"], "bridge devices"),
                        (["ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", "pa", "root", "handle", "1:",
                          "tbf", "rate", "1mbit", "burst", "16kb", "limit", "100kb"], "tc tbf (sch_tbf)"),
                    ]
                    for cmd, what in steps:
                        p = _run(cmd, check=False)
                        if p.returncode != 0:
                            missing.append(f"{what}: {p.stderr.strip()}")
                            break
                    if not missing:
                        p = _run(["ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", "pb", "root", "netem",
                                  "delay", "1ms"], check=False)
                        netem = p.returncode == 0
            finally:
                _run(["ip", "netns", "del", ns], check=False)
        _PROBE.update(missing=missing, netem=netem)
        return _PROBE


def netns_missing() -> list[str]:
    """What the netns + tc testbed lacks here ([] = it works)."""
    return list(_probe()["missing"])


def netns_available() -> bool:
    return not netns_missing()


def has_netem() -> bool:
    """Whether the kernel has sch_netem (delay/jitter/loss in the kernel)."""
    return bool(_probe()["netem"])


# ----------------------------------------------------------------------------------- schedules
def parse_schedule(schedule: str | Sequence | None) -> list[tuple[float, float]]:
    """``"0:100mbit,10:10mbit"`` (or ``[(0, "100mbit"), (10, 1e7)]``) -> [(seconds, bits/s), ...] sorted."""
    if schedule is None or schedule == "" or schedule == []:
        return []
    items: list[tuple[float, float]] = []
    if isinstance(schedule, str):
        for part in schedule.split(","):
            part = part.strip()
            if not part:
                continue
            if ":" not in part:
                raise ValueError(f"bad schedule entry {part!r}: use TIME:RATE, e.g. 0:100mbit,10:10mbit")
            t, r = part.split(":", 1)
            items.append((parse_time(t), parse_rate(r)))
    else:
        for t, r in schedule:
            items.append((parse_time(t), parse_rate(r)))
    if any(t < 0 for t, _ in items):
        raise ValueError("schedule times must be >= 0")
    return sorted(items)


def _tc_num(bps: float) -> str:
    return f"{int(round(bps))}bit"


# ---------------------------------------------------------------------------------- live registry
_LIVE: weakref.WeakSet = weakref.WeakSet()


def _close_all() -> None:
    for tb in list(_LIVE):
        with contextlib.suppress(Exception):
            tb.close()


atexit.register(_close_all)

_NAME_RE = re.compile(r"^(?P<prefix>[a-z][a-z0-9]*)-(?P<pid>\d+)-(?P<rand>[0-9a-f]+)-(?:br|w\d+)$")


def list_leftovers(prefix: str = DEFAULT_PREFIX, all_: bool = False) -> list[str]:
    """Namespaces created by testbeds with ``prefix`` whose creating process is gone (or all of them)."""
    p = _run(["ip", "netns", "list"], check=False)
    out = []
    for line in p.stdout.splitlines():
        name = line.split()[0] if line.split() else ""
        m = _NAME_RE.match(name)
        if not m or m.group("prefix") != prefix:
            continue
        pid = int(m.group("pid"))
        alive = pid == os.getpid() or os.path.exists(f"/proc/{pid}")
        if all_ or not alive:
            out.append(name)
    return sorted(out)


def _kill_ns_pids(ns: str, sig: int = signal.SIGKILL) -> None:
    """Kill processes running inside one of *our* namespaces (workers a testbed started)."""
    p = _run(["ip", "netns", "pids", ns], check=False)
    for tok in p.stdout.split():
        with contextlib.suppress(ProcessLookupError, ValueError, PermissionError):
            os.kill(int(tok), sig)


def cleanup(prefix: str = DEFAULT_PREFIX, all_: bool = False) -> list[str]:
    """Delete leftover testbed namespaces (those of dead testbeds; ``all_`` = also live ones) and return
    their names. Deleting a namespace deletes its veth ends, the bridge and every qdisc on them."""
    names = list_leftovers(prefix, all_)
    for ns in names:
        _kill_ns_pids(ns)
        _run(["ip", "netns", "del", ns], check=False)
    return names


# ------------------------------------------------------------------------------------- testbed
@dataclass
class WorkerInfo:
    rank: int
    namespace: str | None
    address: str
    ifname: str


class Testbed:
    """N workers, each behind its own shaped link. Use as a context manager::

        with Testbed(workers=4, rate="100mbit", delay="5ms") as tb:
            rc = tb.run([sys.executable, "train.py"])          # one process per worker, torchrun-style env
            tb.set_rate("10mbit")                              # change every link now

    ``emulation``: ``"auto"`` (netns + tc when possible, else loopback), ``"netns-tc"`` (error if not
    possible), ``"loopback-ratelimit"``. ``rate=None`` leaves links unshaped. ``schedule`` changes the rate
    of every link at the given seconds after each :meth:`run`/:meth:`launch` starts.
    """

    __test__ = False  # not a pytest test class

    def __init__(self, workers: int, rate: str | float | None = "100mbit", delay: str | float | None = None,
                 jitter: str | float | None = None, loss: str | float | None = None,
                 schedule: str | Sequence | None = None, emulation: str = "auto", prefix: str = DEFAULT_PREFIX,
                 master_port: int = 29500, shape_ingress: bool = True, burst: int | None = None,
                 limit: int | None = None, queue: str | float | None = DEFAULT_QUEUE_S, ack_priority: bool = True,
                 congestion_control: str | None = None, realtime: int | None = None):
        if not 1 <= workers <= MAX_WORKERS:
            raise ValueError(f"workers must be in 1..{MAX_WORKERS}, got {workers}")
        if not re.fullmatch(r"[a-z][a-z0-9]{0,11}", prefix):
            raise ValueError(f"prefix must match [a-z][a-z0-9]{{0,11}}, got {prefix!r}")
        if emulation not in ("auto", *EMULATIONS):
            raise ValueError(f"emulation must be auto, netns-tc or loopback-ratelimit, got {emulation!r}")
        self.workers = workers
        self.rate_bps = None if rate is None else parse_rate(rate)
        self.delay_s = parse_time(delay)
        self.jitter_s = parse_time(jitter)
        self.loss = _parse_loss(loss)
        self.schedule = parse_schedule(schedule)
        self.prefix = prefix
        self.master_port = int(master_port)
        self.shape_ingress = shape_ingress
        self._burst, self._limit = burst, limit
        self.queue_s = parse_time(queue) if queue is not None else DEFAULT_QUEUE_S
        self.ack_priority = bool(ack_priority)
        self.congestion_control = congestion_control or None
        if self.congestion_control is not None:
            avail = available_congestion_controls()
            if avail and self.congestion_control not in avail:
                raise ValueError(f"congestion_control {congestion_control!r} is not available in this kernel "
                                 f"(available: {' '.join(avail)})")
        if self.queue_s <= 0:
            raise ValueError(f"queue must be > 0 seconds, got {queue!r}")
        if realtime is not None and not (isinstance(realtime, int) and 1 <= realtime <= 99):
            raise ValueError(f"realtime must be a SCHED_RR priority in 1..99 or None, got {realtime!r}")
        self.realtime = realtime
        self.requested_emulation = emulation
        self.tag = f"{prefix}-{os.getpid()}-{secrets.token_hex(3)}"
        self.emulation: str | None = None
        self.namespaces: list[str] = []
        self.info: list[WorkerInfo] = []
        self.loss_method: str | None = None
        self._procs: list[subprocess.Popen] = []
        self._lock = threading.RLock()
        self._started = False
        self._closed = False
        self._sched_thread: threading.Thread | None = None
        self._sched_stop = threading.Event()
        self._t0: float | None = None
        self.rate_log: list[tuple[float, float]] = []  # (seconds since launch, bits/s) as applied
        self._old_handlers: dict[int, Any] = {}

    # ------------------------------------------------------------------ set-up / teardown
    @property
    def bridge_ns(self) -> str:
        return f"{self.tag}-br"

    def worker_ns(self, rank: int) -> str:
        return f"{self.tag}-w{rank}"

    def start(self) -> Testbed:
        with self._lock:
            if self._started:
                return self
            if self._closed:
                raise RuntimeError("this testbed was closed; make a new one")
            if self.realtime is not None and not realtime_available():
                raise RealtimeUnavailable(
                    f"realtime={self.realtime}: the workers cannot run under SCHED_RR here (needs root or "
                    "CAP_SYS_NICE, and a kernel/container that allows real-time scheduling); use realtime=None")
            missing = netns_missing() if self.requested_emulation != "loopback-ratelimit" else []
            if self.requested_emulation == "netns-tc" and missing:
                raise TestbedUnavailable(missing)
            if self.requested_emulation == "loopback-ratelimit" or missing:
                if missing:
                    print(f"lowbw.net.testbed: netns + tc unavailable ({'; '.join(missing)}); "
                          "falling back to emulation=loopback-ratelimit", file=sys.stderr)
                self.emulation = "loopback-ratelimit"
                self.info = [WorkerInfo(r, None, "127.0.0.1", "lo") for r in range(self.workers)]
                self._started = True
                _LIVE.add(self)
                return self
            if (self.delay_s or self.jitter_s) and not has_netem():
                raise TestbedUnavailable([
                    "tc netem (kernel sch_netem, CONFIG_NET_SCH_NETEM) for delay/jitter -- this kernel lacks it; "
                    "rate shaping (tbf) and loss work without it"])
            self.emulation = "netns-tc"
            self._started = True
            _LIVE.add(self)
            try:
                self._build()
            except BaseException:
                self.close()
                raise
            return self

    def _build(self) -> None:
        br = self.bridge_ns
        self.namespaces.append(br)
        _run(["ip", "netns", "add", br])
        _run(["ip", "-n", br, "link", "set", "lo", "up"])
        _run(["ip", "-n", br, "link", "add", "br0", "type", "bridge"])
        _run(["ip", "-n", br, "link", "set", "br0", "up"])
        for r in range(self.workers):
            ns = self.worker_ns(r)
            self.namespaces.append(ns)
            addr = f"{SUBNET}.{r + 1}"
            _run(["ip", "netns", "add", ns])
            _run(["ip", "-n", br, "link", "add", f"p{r}", "type", "veth", "peer", "name", WORKER_IF, "netns", ns])
            _run(["ip", "-n", br, "link", "set", f"p{r}", "master", "br0"])
            _run(["ip", "-n", br, "link", "set", f"p{r}", "up"])
            _run(["ip", "-n", ns, "addr", "add", f"{addr}/24", "dev", WORKER_IF])
            if self.loss > 0:  # per-packet loss: no GSO super-packets on the lossy link
                _run(["ip", "-n", ns, "link", "set", WORKER_IF, "gso_max_segs", "1"])
            _run(["ip", "-n", ns, "link", "set", WORKER_IF, "up"])
            if self.congestion_control:  # per-route (RTAX_CC_ALGO): works where the netns sysctl is read-only
                _run(["ip", "-n", ns, "route", "replace", f"{SUBNET}.0/24", "dev", WORKER_IF, "proto", "kernel",
                      "scope", "link", "src", addr, "congctl", self.congestion_control])
            _run(["ip", "-n", ns, "link", "set", "lo", "up"])
            self.info.append(WorkerInfo(r, ns, addr, WORKER_IF))
        self._shape_all(self.rate_bps, initial=True)

    # -- tc
    def tbf_params(self, bps: float) -> dict[str, int]:
        """tbf's ``burst`` (bytes let through at line rate: 1 ms of the rate, at least 10 packets) and
        ``limit`` (queue bytes: ``queue`` seconds of the rate, at least ``MIN_QUEUE_BYTES`` and two bursts)."""
        Bps = bps / 8.0
        burst = self._burst or max(15_140, int(Bps * 0.001))
        limit = self._limit or max(int(Bps * self.queue_s), MIN_QUEUE_BYTES, 2 * burst)
        return {"burst": burst, "limit": limit}

    def _tbf_args(self, bps: float) -> list[str]:
        p = self.tbf_params(bps)
        return ["tbf", "rate", _tc_num(bps), "burst", str(p["burst"]), "limit", str(p["limit"])]

    def _tc(self, ns: str, args: list[str]) -> None:
        _run(["ip", "netns", "exec", ns, "tc", *args])

    def _bulk_queues(self, h: int) -> list[tuple[str, str]]:
        """(classid, qdisc handle) of the bulk queues under HTB ``h``: the default class, then one per peer."""
        out = [(f"{h:x}:2", f"{h + 0x20:x}:")]
        for octet in range(1, self.workers + 1):  # worker r's address is SUBNET.(r + 1) (see _build)
            out.append((f"{h:x}:{0x100 + octet:x}", f"{(h << 8) | octet:x}:"))
        return out

    def _add_shaper(self, ns: str, dev: str, where: list[str], major: int, bps: float, prio: bool = True,
                    peer_octet: int = DST_OCTET) -> None:
        """tbf (handle ``major:``) at ``where``; with ``ack_priority`` its queue is an HTB used as a scheduler
        (classes far above the rate, so tbf alone shapes): pure TCP ACKs and short non-TCP frames first
        (strict priority), then one ``queue``-second bfifo per peer (the address octet at ``peer_octet``),
        served round robin one packet's worth at a time -- per-flow fair queueing as fq_codel gives a Linux
        host, which this kernel may lack (see :func:`queue_classifier_bpf`)."""
        self._tc(ns, ["qdisc", "add", "dev", dev, *where, "handle", f"{major}:", *self._tbf_args(bps)])
        if not (self.ack_priority and prio):
            return
        h = 0xA0 + major
        limit = str(self.tbf_params(bps)["limit"])
        lines = [f"qdisc add dev {dev} parent {major}:1 handle {h:x}: htb default 2 r2q 100000",
                 f"class add dev {dev} parent {h:x}: classid {h:x}:1 htb rate 40gbit quantum 200000 prio 0",
                 f"qdisc add dev {dev} parent {h:x}:1 handle {h + 0x10:x}: pfifo limit 10000"]
        for cid, qh in self._bulk_queues(h):
            lines += [f"class add dev {dev} parent {h:x}: classid {cid} htb rate 40gbit quantum {QUANTUM} prio 1",
                      f"qdisc add dev {dev} parent {cid} handle {qh} bfifo limit {limit}"]
        lines.append(f"filter add dev {dev} parent {h:x}: protocol all prio 1 bpf bytecode "
                     f'"{queue_classifier_bpf(h, peer_octet)}" classid {h:x}:1')
        self._tc_batch(ns, lines)

    def _change_shaper(self, ns: str, dev: str, where: list[str], major: int, bps: float) -> None:
        self._tc(ns, ["qdisc", "change", "dev", dev, *where, "handle", f"{major}:", *self._tbf_args(bps)])
        if self.ack_priority:  # tbf leaves a non-fifo child alone: resize the bulk queues to the rate
            limit = self.tbf_params(bps)["limit"]
            self._tc_batch(ns, [f"qdisc change dev {dev} parent {cid} handle {qh} bfifo limit {limit}"
                                for cid, qh in self._bulk_queues(0xA0 + major)])

    def _tc_batch(self, ns: str, lines: list[str]) -> None:
        """Several tc commands in one ``tc -batch`` process (a shaper has 2 + 2 (N + 1) of them)."""
        _run(["ip", "netns", "exec", ns, "tc", "-batch", "-"], timeout=60, input="\n".join(lines) + "\n")

    def _shape_link(self, rank: int, bps: float | None, initial: bool) -> None:
        ns, br = self.worker_ns(rank), self.bridge_ns
        impair = bool(self.delay_s or self.jitter_s or self.loss)
        # uplink: worker egress
        if initial:
            if impair and has_netem():
                netem = ["netem", "limit", "1000000"]
                if self.delay_s or self.jitter_s:
                    netem += ["delay", f"{self.delay_s * 1e6:.0f}us"]
                    if self.jitter_s:
                        netem += [f"{self.jitter_s * 1e6:.0f}us", "distribution", "normal"]
                if self.loss:
                    netem += ["loss", f"{self.loss * 100:.6f}%"]
                self.loss_method = "netem" if self.loss else None
                if bps is not None:
                    self._tc(ns, ["qdisc", "add", "dev", WORKER_IF, "root", "handle", "1:", *self._tbf_args(bps)])
                    self._tc(ns, ["qdisc", "add", "dev", WORKER_IF, "parent", "1:1", "handle", "10:", *netem])
                else:
                    self._tc(ns, ["qdisc", "add", "dev", WORKER_IF, "root", "handle", "10:", *netem])
                self._up = (["root"], 1, False)  # netem is the tbf's child here: no priority band
            elif self.loss:  # no netem: HTB with a drop class fed by a classic-BPF random classifier
                self.loss_method = "cbpf-random-drop"
                self._tc(ns, ["qdisc", "add", "dev", WORKER_IF, "root", "handle", "1:", "htb", "default", "1",
                              "r2q", "100000"])
                for cid in ("1:1", "1:2"):
                    self._tc(ns, ["class", "add", "dev", WORKER_IF, "parent", "1:", "classid", cid, "htb",
                                  "rate", "40gbit", "quantum", "200000"])
                self._tc(ns, ["qdisc", "add", "dev", WORKER_IF, "parent", "1:2", "handle", "20:", "pfifo",
                              "limit", "0"])
                thr = min(2**32 - 1, int(self.loss * 2**32))
                # A = random u32; if A >= thr: no match, else: match -> classid 1:2 (dropped)
                prog = f"4,32 0 0 {2**32 - 4096 + 56},53 1 0 {thr},6 0 0 {2**32 - 1},6 0 0 0"
                self._tc(ns, ["filter", "add", "dev", WORKER_IF, "parent", "1:", "protocol", "all", "prio", "1",
                              "bpf", "bytecode", prog, "classid", "1:2"])
                self._up = (["parent", "1:1"], 2, True)
                if bps is not None:
                    self._add_shaper(ns, WORKER_IF, *self._up[:2], bps)
            else:
                self._up = (["root"], 1, True)
                if bps is not None:
                    self._add_shaper(ns, WORKER_IF, *self._up[:2], bps)
            if bps is not None and self.shape_ingress:  # downlink: bridge port egress towards the worker
                self._add_shaper(br, f"p{rank}", ["root"], 1, bps, peer_octet=SRC_OCTET)
            return
        if bps is None:
            raise ValueError("cannot change the rate of an unshaped testbed (created with rate=None)")
        where, major, prio = self._up
        if prio:
            self._change_shaper(ns, WORKER_IF, where, major, bps)
        else:
            self._tc(ns, ["qdisc", "change", "dev", WORKER_IF, *where, "handle", f"{major}:", *self._tbf_args(bps)])
        if self.shape_ingress:
            self._change_shaper(br, f"p{rank}", ["root"], 1, bps)

    def _shape_all(self, bps: float | None, initial: bool = False, ranks: Sequence[int] | None = None) -> None:
        for r in range(self.workers) if ranks is None else ranks:
            self._shape_link(r, bps, initial)

    def set_rate(self, rate: str | float, ranks: Sequence[int] | None = None) -> None:
        """Change the rate of every link (or of ``ranks``' links) now, while workers run."""
        bps = parse_rate(rate)
        with self._lock:
            self._require_started()
            if self.emulation == "netns-tc":
                if self.rate_bps is None:
                    raise ValueError("cannot change the rate of an unshaped testbed (created with rate=None)")
                self._shape_all(bps, ranks=ranks)
            if ranks is None:
                self.rate_bps = bps
            self.rate_log.append((time.time() - (self._t0 or time.time()), bps))

    def qdiscs(self) -> str:
        """``tc qdisc show`` of every link (for logs and tests)."""
        out = []
        for r in range(self.workers):
            if self.emulation != "netns-tc":
                break
            out.append(f"# rank {r} uplink\n" + _run(["ip", "netns", "exec", self.worker_ns(r), "tc", "qdisc",
                                                      "show", "dev", WORKER_IF]).stdout)
            out.append(f"# rank {r} downlink\n" + _run(["ip", "netns", "exec", self.bridge_ns, "tc", "qdisc",
                                                        "show", "dev", f"p{r}"]).stdout)
        return "".join(out)

    def close(self) -> None:
        """Kill the workers and delete every namespace (idempotent; safe from signal handlers/atexit)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._sched_stop.set()
            self._kill_procs()
            for ns in reversed(self.namespaces):
                _kill_ns_pids(ns)
                _run(["ip", "netns", "del", ns], check=False)
            self.namespaces = []
            _LIVE.discard(self)

    def _kill_procs(self) -> None:
        for p in self._procs:
            if p.poll() is None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(p.pid, signal.SIGTERM)
        deadline = time.time() + 3
        for p in self._procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(timeout=max(0.01, deadline - time.time()))
            if p.poll() is None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(p.pid, signal.SIGKILL)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    p.wait(timeout=5)

    def __enter__(self) -> Testbed:
        self._install_signal_handlers()
        try:
            return self.start()
        except BaseException:
            self._restore_signal_handlers()
            raise

    def __exit__(self, *exc: Any) -> None:
        try:
            self.close()
        finally:
            self._restore_signal_handlers()

    def __del__(self) -> None:  # last resort; close() is idempotent
        with contextlib.suppress(Exception):
            if self._started and not self._closed:
                self.close()

    def _install_signal_handlers(self) -> None:
        """SIGTERM/SIGHUP raise SystemExit in the main thread so ``with`` blocks unwind and tear down
        (SIGINT already raises KeyboardInterrupt)."""
        if threading.current_thread() is not threading.main_thread():
            return

        def handler(signum: int, frame: Any) -> None:
            raise SystemExit(128 + signum)

        for sig in (signal.SIGTERM, signal.SIGHUP):
            with contextlib.suppress(ValueError, OSError):
                if signal.getsignal(sig) in (signal.SIG_DFL, None):
                    self._old_handlers[sig] = signal.signal(sig, handler)

    def _restore_signal_handlers(self) -> None:
        for sig, h in self._old_handlers.items():
            with contextlib.suppress(ValueError, OSError):
                signal.signal(sig, h)
        self._old_handlers = {}

    def _require_started(self) -> None:
        if not self._started or self._closed:
            raise RuntimeError("testbed is not running (use it as a context manager or call start())")

    # --------------------------------------------------------------------- processes
    def env(self, rank: int, base: dict[str, str] | None = None) -> dict[str, str]:
        """The torchrun-style environment of worker ``rank``."""
        self._require_started()
        env = dict(os.environ if base is None else base)
        w = self.info[rank]
        env.update({
            "RANK": str(rank), "WORLD_SIZE": str(self.workers), "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1",
            "GROUP_RANK": str(rank), "ROLE_RANK": str(rank), "ROLE_WORLD_SIZE": str(self.workers),
            "MASTER_ADDR": self.info[0].address, "MASTER_PORT": str(self.master_port),
            "GLOO_SOCKET_IFNAME": w.ifname, "LOWBW_EMULATION": str(self.emulation),
            "LOWBW_TESTBED": self.tag, "LOWBW_LINK_DELAY_S": repr(self.delay_s), "LOWBW_LINK_LOSS": repr(self.loss),
        })
        env.setdefault("OMP_NUM_THREADS", "1")
        if self.rate_bps is not None:
            env["LOWBW_LINK_RATE_BPS"] = repr(self.rate_bps)
        else:
            env.pop("LOWBW_LINK_RATE_BPS", None)
        if self.schedule:
            env["LOWBW_RATE_SCHEDULE"] = json.dumps(self.schedule)
        if self._t0 is not None:
            env["LOWBW_T0"] = repr(self._t0)
        return env

    def launch(self, command: Sequence[str] | str, env: dict[str, str] | None = None, cwd: str | None = None,
               stdout: Any = None, stderr: Any = None, per_rank_env: dict[int, dict[str, str]] | None = None
               ) -> list[subprocess.Popen]:
        """Start one process per worker (``command``: argv list, or a string run by ``sh -c``) in its
        namespace, each in its own process group; the rate schedule starts now. ``cwd`` with ``{rank}``
        (e.g. ``"work/w{rank}"``) gives each worker its own working directory, created if missing."""
        with self._lock:
            self._require_started()
            argv = ["sh", "-c", command] if isinstance(command, str) else list(command)
            if not argv:
                raise ValueError("empty command")
            self._t0 = time.time()
            self.rate_log = [(0.0, self.rate_bps)] if self.rate_bps is not None else []
            procs = []
            for r in range(self.workers):
                e = self.env(r, env)
                if per_rank_env and r in per_rank_env:
                    e.update(per_rank_env[r])
                full = argv if self.emulation != "netns-tc" else ["ip", "netns", "exec", self.worker_ns(r), *argv]
                wd = worker_dir(cwd, r)
                p = subprocess.Popen(full, env=e, cwd=wd, stdout=stdout, stderr=stderr, start_new_session=True,
                                     preexec_fn=None if self.realtime is None else _set_rr(self.realtime))
                procs.append(p)
                self._procs.append(p)
            self._start_schedule()
            return procs

    def _start_schedule(self) -> None:
        if not self.schedule:
            return
        self._sched_stop.clear()
        t0 = self._t0

        def loop() -> None:
            for t, bps in self.schedule:
                if self._sched_stop.wait(max(0.0, t0 + t - time.time())):
                    return
                with contextlib.suppress(Exception):
                    if not self._closed:
                        self.set_rate(bps)

        self._sched_thread = threading.Thread(target=loop, name=f"{self.tag}-schedule", daemon=True)
        self._sched_thread.start()

    def wait(self, procs: Sequence[subprocess.Popen] | None = None, timeout: float | None = None,
             grace: float = 30.0) -> list[int]:
        """Wait for the workers; once one fails, the others get ``grace`` seconds before being killed (as
        torchrun does). Returns their exit codes (negative = killed by that signal)."""
        procs = list(self._procs if procs is None else procs)
        deadline = None if timeout is None else time.time() + timeout
        fail_at: float | None = None
        try:
            while True:
                codes = [p.poll() for p in procs]
                if all(c is not None for c in codes):
                    break
                now = time.time()
                if fail_at is None and any(c not in (None, 0) for c in codes):
                    fail_at = now
                if (fail_at is not None and now - fail_at > grace) or (deadline is not None and now > deadline):
                    for p in procs:
                        if p.poll() is None:
                            with contextlib.suppress(ProcessLookupError, PermissionError):
                                os.killpg(p.pid, signal.SIGKILL)
                    for p in procs:
                        p.wait()
                    break
                time.sleep(0.05)
        finally:
            self._sched_stop.set()
        return [p.returncode for p in procs]

    def run(self, command: Sequence[str] | str, env: dict[str, str] | None = None, cwd: str | None = None,
            timeout: float | None = None, grace: float = 30.0, stdout: Any = None, stderr: Any = None) -> list[int]:
        """Launch ``command`` on every worker and wait; returns the exit codes."""
        return self.wait(self.launch(command, env=env, cwd=cwd, stdout=stdout, stderr=stderr),
                         timeout=timeout, grace=grace)

    def link_bytes(self) -> list[int] | None:
        """Bytes each worker's shaped link has carried so far (sent + received on its interface), or None
        without netns + tc (loopback has no per-worker link to count on)."""
        if self.emulation != "netns-tc":
            return None
        out = []
        for r in range(self.workers):
            res = _run(["ip", "-n", self.worker_ns(r), "-j", "-s", "link", "show", "dev", WORKER_IF], check=False)
            try:
                st = json.loads(res.stdout)[0]["stats64"]
                out.append(int(st["tx"]["bytes"]) + int(st["rx"]["bytes"]))
            except (ValueError, LookupError, TypeError):
                out.append(0)
        return out

    def describe(self) -> dict[str, Any]:
        """Provenance of the network: emulation mode, link parameters, names."""
        return {
            "emulation": self.emulation, "workers": self.workers, "rate_bps": self.rate_bps, "delay_s": self.delay_s,
            "jitter_s": self.jitter_s, "loss": self.loss, "loss_method": self.loss_method, "queue_s": self.queue_s,
            "ack_priority": self.ack_priority and self.emulation == "netns-tc",
            "tbf": self.tbf_params(self.rate_bps) if self.rate_bps and self.emulation == "netns-tc" else None,
            "congestion_control": (self.congestion_control or default_congestion_control())
                                  if self.emulation == "netns-tc" else None,
            "schedule": self.schedule, "rate_log": list(self.rate_log), "shape_ingress": self.shape_ingress,
            "scheduling": "fair (SCHED_OTHER)" if self.realtime is None else f"SCHED_RR priority {self.realtime}",
            "topology": "star: per-worker full-duplex links (tbf each way) through a bridge"
                        if self.emulation == "netns-tc" else "loopback (no kernel shaping)",
            "tag": self.tag, "addresses": [w.address for w in self.info],
        }


def worker_dir(cwd: str | None, rank: int) -> str | None:
    """``cwd`` with ``{rank}`` filled in (the directory is created), else ``cwd`` unchanged."""
    if cwd is None or "{rank}" not in str(cwd):
        return cwd
    wd = str(cwd).replace("{rank}", str(rank))
    os.makedirs(wd, exist_ok=True)
    return wd


def torchrun_argv(command: Sequence[str], workers: int, master_addr: str, master_port: int) -> list[str]:
    """``torchrun --nnodes N --nproc-per-node 1 ... SCRIPT ARGS`` for ``--launcher torchrun``: every
    namespace runs one single-process torchrun node; the node rank comes from ``PET_NODE_RANK`` (torchrun
    reads its flags from ``PET_<FLAG>``). ``command``: ``[python] script.py args`` or ``[python] -m mod args``."""
    cmd = list(command)
    if cmd and os.path.basename(cmd[0]).startswith("python"):
        cmd = cmd[1:]
    if not cmd:
        raise ValueError("--launcher torchrun needs a script (or -m module) after --")
    if cmd[0] == "-m":
        if len(cmd) < 2:
            raise ValueError("--launcher torchrun: -m needs a module name")
        cmd = ["-m", *cmd[1:]]
    return [sys.executable, "-m", "torch.distributed.run", "--nnodes", str(workers), "--nproc-per-node", "1",
            "--master-addr", master_addr, "--master-port", str(master_port), *cmd]


def _set_rr(priority: int):
    def apply() -> None:  # runs in the child between fork and exec; inherited by what it execs
        os.sched_setscheduler(0, os.SCHED_RR, os.sched_param(priority))
    return apply


@functools.cache
def realtime_available() -> bool:
    """Whether a child process may switch itself to SCHED_RR (root/CAP_SYS_NICE, and allowed here); probed
    once per process, like :func:`netns_missing`."""
    if not hasattr(os, "sched_setscheduler"):
        return False
    probe = "import os; os.sched_setscheduler(0, os.SCHED_RR, os.sched_param(1))"
    try:
        return subprocess.run([sys.executable, "-c", probe], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def available_congestion_controls() -> list[str]:
    """TCP congestion controls this kernel has loaded ([] if unknown)."""
    try:
        with open("/proc/sys/net/ipv4/tcp_available_congestion_control") as f:
            return f.read().split()
    except OSError:
        return []


def default_congestion_control() -> str | None:
    """The kernel's default TCP congestion control (what new namespaces use unless told otherwise)."""
    try:
        with open("/proc/sys/net/ipv4/tcp_congestion_control") as f:
            return f.read().strip() or None
    except OSError:
        return None


def _parse_loss(loss: str | float | None) -> float:
    """``"0.1%"`` -> 0.001; a bare number is a fraction."""
    if loss is None or loss == "":
        return 0.0
    if isinstance(loss, str):
        s = loss.strip()
        v = float(s[:-1]) / 100 if s.endswith("%") else float(s)
    else:
        v = float(loss)
    if not 0 <= v < 1:
        raise ValueError(f"loss must be in [0, 1) (or a percentage like 0.1%), got {loss!r}")
    return v
