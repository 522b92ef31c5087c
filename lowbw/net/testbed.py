"""A real low-bandwidth network on one machine: N workers in network namespaces, each behind its own link.

Each worker has its own full-duplex link through a bridge (topology and qdiscs: :mod:`lowbw.net.tc`), shaped
in each direction by a token bucket, so the network is the star of per-worker links that
:mod:`lowbw.net.costmodel` assumes. What a link does is a :class:`~lowbw.net.link.LinkSpec`: rate per
direction; delay, jitter and loss on the uplink (one-way worker-to-worker latency = ``delay``), with
``netem`` when the kernel has it, and loss without netem by a random classic-BPF classifier. Each shaper
queues ``queue`` seconds of data at its rate (default 100 ms), at least 256 full-size frames; with
``ack_priority`` (default on) its queue schedules like fq_codel, Linux's default qdisc: pure TCP ACKs first,
then one queue per peer served round robin. The rate can change on a schedule while a job runs
(``tc qdisc change``), or follow a per-worker trace (:mod:`lowbw.net.trace`); faults (a straggler, a
killed worker, a partitioned link: :mod:`lowbw.net.faults`) are injected on the same clock. Where the
kernel has no netem, delay, jitter and loss come from a userspace emulator (:mod:`lowbw.net.linkemu`).

``realtime=p`` runs the workers under SCHED_RR priority ``p``, as if each had its CPU to itself: N emulated
machines share this host's cores, and under the fair scheduler a worker woken by its network data may wait
for a CPU, which adds milliseconds to millisecond-scale collectives. Off by default: a worker that computes
for long stretches under SCHED_RR delays everything else on its core.

Names are ``<prefix>-<pid>-<random>-...`` so parallel testbeds do not collide; teardown (kill the workers,
delete the namespaces, which deletes their veths, the bridge and every qdisc) runs on normal exit,
exceptions, SIGINT/SIGTERM and atexit, and ``cleanup()`` removes leftovers of dead testbeds
(:mod:`lowbw.net.namespaces`). The namespaces, links and shapers: :mod:`lowbw.net.network`; kernel probes:
:mod:`lowbw.net.probe`; processes: :mod:`lowbw.net.runner`.

Without root, ``ip`` or ``tc`` the same API runs the workers on loopback with
``emulation="loopback-ratelimit"``: nothing is shaped by the kernel; programs that call
:func:`lowbw.net.ratelimit.install_from_env` get in-process token-bucket rate limiting of their own sends
and receives. Results are labelled with the emulation mode.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import math
import os
import secrets
import subprocess
import sys
import threading
import time
import weakref
from collections.abc import Sequence
from typing import Any

from lowbw.net import linkemu
from lowbw.net.faults import FaultInjector, Partition
from lowbw.net.link import DEFAULT_QUEUE_S, MIN_QUEUE_BYTES, LinkSpec, parse_schedule
from lowbw.net.linkstats import LinkMeter
from lowbw.net.namespaces import (
    cleanup,
    kill_ns_pids,
    list_leftovers,
    make_tag,
)
from lowbw.net.network import Network
from lowbw.net.options import EMULATIONS, TestbedOptions, WorkerInfo, worker_env
from lowbw.net.probe import (
    RealtimeUnavailable,
    TestbedUnavailable,
    available_congestion_controls,
    default_congestion_control,
    has_netem,
    netns_available,
    netns_missing,
    realtime_available,
    run_command,
)
from lowbw.net.runner import (
    RateScheduler,
    SignalGuard,
    kill_groups,
    start_process,
    stop_all,
    torchrun_argv,
    wait_all,
    worker_dir,
)
from lowbw.net.tc import SUBNET, WORKER_IF, queue_classifier_bpf
from lowbw.net.trace import Trace, TraceStep, expand, load_trace, peak_links
from lowbw.net.units import parse_delay, parse_rate

__all__ = [
    "Testbed",
    "TestbedOptions",
    "LinkSpec",
    "WorkerInfo",
    "TestbedUnavailable",
    "RealtimeUnavailable",
    "netns_missing",
    "netns_available",
    "has_netem",
    "parse_schedule",
    "cleanup",
    "list_leftovers",
    "kill_ns_pids",
    "run_command",
    "realtime_available",
    "available_congestion_controls",
    "default_congestion_control",
    "torchrun_argv",
    "worker_dir",
    "queue_classifier_bpf",
    "EMULATIONS",
    "MIN_QUEUE_BYTES",
    "DEFAULT_QUEUE_S",
    "SUBNET",
    "WORKER_IF",
]

MAX_WORKERS = 250  # worker r's address is SUBNET.(r + 1), inside one /24


# Live testbeds, closed at interpreter exit.
_LIVE: weakref.WeakSet = weakref.WeakSet()


def _close_all() -> None:
    for tb in list(_LIVE):
        with contextlib.suppress(Exception):
            tb.close()


atexit.register(_close_all)


class Testbed:
    """N workers, each behind its own shaped link. Use as a context manager::

        with Testbed(workers=4, rate="100mbit", delay="5ms") as tb:
            rc = tb.run([sys.executable, "train.py"])          # one process per worker, torchrun-style env
            tb.set_rate("10mbit")                              # change every link now

    ``rate``, ``delay``, ``jitter``, ``loss``, ``queue``, ``burst``, ``limit`` describe every worker's link
    (:meth:`LinkSpec.parse`; ``rate=None`` leaves links unshaped); ``links`` gives one :class:`LinkSpec` per
    worker instead. ``options`` are the fields of :class:`TestbedOptions` (``emulation``, ``schedule``,
    ``prefix``, ``master_port``, ...). ``schedule`` changes the rate of every link at the given seconds
    after each :meth:`run`/:meth:`launch` starts.
    """

    __test__ = False  # not a pytest test class

    def __init__(self, workers: int, rate: str | float | None = "100mbit", delay: str | float | None = None,
                 jitter: str | float | None = None, loss: str | float | None = None, *,
                 queue: str | float | None = DEFAULT_QUEUE_S, burst: int | None = None, limit: int | None = None,
                 links: Sequence[LinkSpec] | None = None, **options: Any):
        if not 1 <= workers <= MAX_WORKERS:
            raise ValueError(f"workers must be in 1..{MAX_WORKERS}, got {workers}")
        if links is None:
            links = [LinkSpec.parse(rate, delay, jitter, loss, queue, burst, limit)] * workers
        if len(links) != workers:
            raise ValueError(f"links: {len(links)} given for {workers} workers")
        trace, faults = options.pop("trace", None), tuple(options.pop("faults", ()))
        self.workers = workers
        self.links: list[LinkSpec] = list(links)
        self.options = TestbedOptions.parse(**options)
        self.trace: Trace | None = load_trace(trace, workers) if isinstance(trace, str | os.PathLike) else trace
        if self.trace is not None and self.options.schedule:
            raise ValueError("give a rate schedule or a trace, not both")
        if any(not 0 <= f.rank < workers for f in faults):
            raise ValueError(f"faults {faults}: every rank must be below {workers}")
        self.tag = make_tag(self.options.prefix, secrets.token_hex(3))
        self.emulation: str | None = None  # chosen by start()
        self.net = Network(self.tag, workers, self.options)  # built by start() under netns-tc
        self.info: list[WorkerInfo] = []
        self.loss_method: str | None = None
        self.rate_log: list[tuple[float, float]] = []  # (seconds since launch, bits/s) as applied
        self._procs: list[subprocess.Popen] = []
        self._lock = threading.RLock()
        self._started = False
        self._closed = False
        self._scheduler = RateScheduler(f"{self.tag}-schedule")
        self.faults = FaultInjector(faults, f"{self.tag}-faults")
        self._t0: float | None = None  # launch time (time.time()) of the current job
        self._signals = SignalGuard()
        self.impairment: str | None = None  # what adds delay/jitter/loss: "netem", "userspace" or None
        self.emulator_stats: dict | None = None  # the emulator's statistics, once closed (lowbw.net.linkemu)

    # ----------------------------------------------------------------- link parameters (every worker's)
    @property
    def rate_bps(self) -> float | None:
        """The rate of every link in both directions, or None when unshaped or not one rate for all."""
        rates = {r for link in self.links for r in (link.up_bps, link.down_bps)}
        return rates.pop() if len(rates) == 1 else None

    # worker 0's link (all workers' unless links were given one by one)
    delay_s = property(lambda self: self.links[0].delay_s, doc="uplink delay (s)")
    jitter_s = property(lambda self: self.links[0].jitter_s, doc="uplink jitter (s)")
    loss = property(lambda self: self.links[0].loss, doc="uplink loss (fraction)")
    queue_s = property(lambda self: self.links[0].queue_s, doc="shaper queue (s at its rate)")

    @property
    def master_port(self) -> int:
        return self.options.master_port

    @property
    def schedule(self) -> list[tuple[float, float]]:
        return list(self.options.schedule)

    def tbf_params(self, bps: float) -> dict[str, int]:
        """tbf ``burst`` and ``limit`` (bytes) of a shaper at ``bps`` on worker 0's link."""
        return self.links[0].tbf_params(bps)

    # ------------------------------------------------------------------ set-up / teardown
    @property
    def bridge_ns(self) -> str:
        return self.net.bridge_ns

    def worker_ns(self, rank: int) -> str:
        return self.net.worker_ns(rank)

    def start(self) -> Testbed:
        with self._lock:
            if self._started:
                return self
            if self._closed:
                raise RuntimeError("this testbed was closed; make a new one")
            opts = self.options
            if opts.realtime is not None and not realtime_available():
                raise RealtimeUnavailable(
                    f"realtime={opts.realtime}: the workers cannot run under SCHED_RR here (needs root or "
                    "CAP_SYS_NICE, and a kernel/container that allows real-time scheduling); use realtime=None")
            missing = netns_missing() if opts.emulation != "loopback-ratelimit" else []
            if opts.emulation == "netns-tc" and missing:
                raise TestbedUnavailable(missing)
            if any(isinstance(f, Partition) for f in self.faults.faults) and (
                    opts.emulation == "loopback-ratelimit" or missing):
                raise ValueError("a partition needs the netns-tc emulation (root, iproute2): loopback has no links")
            if self.trace is not None and (opts.emulation == "loopback-ratelimit" or missing):
                raise ValueError("a trace needs the netns-tc emulation (root, iproute2): in-process rate limiting "
                                 "cannot follow it")
            if opts.emulation == "loopback-ratelimit" or missing:
                if missing:
                    print(f"lowbw.net.testbed: netns + tc unavailable ({'; '.join(missing)}); "
                          "falling back to emulation=loopback-ratelimit", file=sys.stderr)
                self.emulation = "loopback-ratelimit"
                self.info = [WorkerInfo(r, None, "127.0.0.1", "lo") for r in range(self.workers)]
                self._started = True
                _LIVE.add(self)
                return self
            self.impairment = linkemu.method(peak_links(self.links, self.trace), opts.link_emulator, has_netem(),
                                             delay_changes=self.trace is not None and self.trace.changes_delay)
            self.emulation = "netns-tc"
            self._started = True
            _LIVE.add(self)
            try:
                self.net.build(self.links, self.impairment)
                self.info, self.loss_method = self.net.info, self.net.loss_method
            except BaseException:
                self.close()
                raise
            return self

    def set_rate(self, rate: str | float, ranks: Sequence[int] | None = None) -> None:
        """Change the rate of every link (or of ``ranks``' links), both directions, now, while workers run."""
        bps = parse_rate(rate)
        with self._lock:
            self._require_started()
            targets = range(self.workers) if ranks is None else ranks
            if self.emulation == "netns-tc" and not all(self.links[r].up_bps and self.links[r].down_bps
                                                        for r in targets):
                raise ValueError("cannot change the rate of an unshaped testbed (created with rate=None)")
            for r in targets:
                new = self.links[r].with_rate(bps)
                if self.emulation == "netns-tc":
                    self.net.reshape(r, new)
                self.links[r] = new
            self.rate_log.append((time.time() - (self._t0 or time.time()), bps))

    def qdiscs(self) -> str:
        """``tc qdisc show`` of every link (for logs and tests)."""
        return self.net.qdiscs() if self.emulation == "netns-tc" else ""

    def close(self) -> None:
        """Kill the workers and delete every namespace (idempotent; safe from signal handlers/atexit)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._scheduler.stop()
            self.faults.stop()
            stop_all(self._procs)
            self.emulator_stats = self.net.close()
            _LIVE.discard(self)

    def __enter__(self) -> Testbed:
        self._signals.install()
        try:
            return self.start()
        except BaseException:
            self._signals.restore()
            raise

    def __exit__(self, *exc: Any) -> None:
        try:
            self.close()
        finally:
            self._signals.restore()

    def __del__(self) -> None:  # last resort; close() is idempotent
        with contextlib.suppress(Exception):
            if self._started and not self._closed:
                self.close()

    def _require_started(self) -> None:
        if not self._started or self._closed:
            raise RuntimeError("testbed is not running (use it as a context manager or call start())")

    # --------------------------------------------------------------------- processes
    def env(self, rank: int, base: dict[str, str] | None = None) -> dict[str, str]:
        """The torchrun-style environment of worker ``rank``."""
        self._require_started()
        return worker_env(dict(os.environ if base is None else base), rank, self.info, self.links[rank],
                          self.options, str(self.emulation), self.tag, self._t0)

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
                p = start_process(full, e, worker_dir(cwd, r), stdout, stderr, self.options.realtime)
                procs.append(p)
                self._procs.append(p)
            self.faults.start(procs, self._t0, self.net.set_port)
            if self.trace is not None:
                self._scheduler.start(((s.t_s, s) for s in expand(self.trace, math.inf)), self._t0, self._trace_step)
            elif self.schedule:
                self._scheduler.start(self.schedule, self._t0, self._scheduled_rate)
            return procs

    def _scheduled_rate(self, bps: float) -> None:
        if not self._closed:
            self.set_rate(bps)

    def _trace_step(self, step: TraceStep) -> None:
        if self._closed:
            return
        ranks = None if step.rank is None else [step.rank]
        self.set_rate(step.bps, ranks)
        if step.delay_s is not None:
            self.set_delay(step.delay_s, ranks)

    def set_delay(self, delay: str | float, ranks: Sequence[int] | None = None) -> None:
        """Change the uplink delay of every link (or of ``ranks``' links) now (userspace emulator only)."""
        delay_s = parse_delay(delay)
        with self._lock:
            self._require_started()
            if self.net.emulator is None:
                raise ValueError("changing delays while running needs the userspace link emulator")
            for r in range(self.workers) if ranks is None else ranks:
                self.net.set_delay(r, delay_s)
                self.links[r] = dataclasses.replace(self.links[r], delay_s=delay_s)

    def wait(self, procs: Sequence[subprocess.Popen] | None = None, timeout: float | None = None,
             grace: float = 30.0) -> list[int]:
        """Wait for the workers; once one fails, the others get ``grace`` seconds before being killed (as
        torchrun does). Returns their exit codes (negative = killed by that signal)."""
        try:
            return wait_all(list(self._procs if procs is None else procs), timeout=timeout, grace=grace)
        finally:
            self._scheduler.stop()
            self.faults.stop()

    def run(self, command: Sequence[str] | str, env: dict[str, str] | None = None, cwd: str | None = None,
            timeout: float | None = None, grace: float = 30.0, stdout: Any = None, stderr: Any = None) -> list[int]:
        """Launch ``command`` on every worker and wait; returns the exit codes."""
        return self.wait(self.launch(command, env=env, cwd=cwd, stdout=stdout, stderr=stderr),
                         timeout=timeout, grace=grace)

    def kill(self, sig: int) -> None:
        """Send ``sig`` to every worker's process group."""
        kill_groups(self._procs, sig)

    def link_counters(self) -> list[tuple[int, int]] | None:
        """``(sent, received)`` bytes each worker's shaped link has carried so far (its bridge port's
        counters, Ethernet frames), or None without netns + tc (loopback has no per-worker link)."""
        return self.net.counters() if self.emulation == "netns-tc" else None

    def link_bytes(self) -> list[int] | None:
        """Bytes each worker's shaped link has carried so far (sent + received), or None on loopback."""
        counts = self.link_counters()
        return None if counts is None else [s + r for s, r in counts]

    def link_meter(self, interval_s: float = 0.5) -> LinkMeter:
        """A :class:`~lowbw.net.linkstats.LinkMeter` of this testbed's links (call ``start()`` before the
        workers, ``stop()`` after): bytes sent and received per worker and the time each link was busy."""
        ingress = self.options.shape_ingress
        return LinkMeter(self.link_counters,
                         lambda: [(lk.up_bps, lk.down_bps if ingress else None) for lk in self.links], interval_s)

    def describe(self) -> dict[str, Any]:
        """Provenance of the network: emulation mode, link parameters, names."""
        netns, opts, rate = self.emulation == "netns-tc", self.options, self.rate_bps
        return {
            "emulation": self.emulation, "workers": self.workers, "rate_bps": rate, "delay_s": self.delay_s,
            "jitter_s": self.jitter_s, "loss": self.loss, "loss_method": self.loss_method, "queue_s": self.queue_s,
            "ack_priority": opts.ack_priority and netns,
            "tbf": self.tbf_params(rate) if rate and netns else None,
            "congestion_control": (opts.congestion_control or default_congestion_control()) if netns else None,
            "schedule": self.schedule, "rate_log": list(self.rate_log), "shape_ingress": opts.shape_ingress,
            "scheduling": "fair (SCHED_OTHER)" if opts.realtime is None else f"SCHED_RR priority {opts.realtime}",
            "topology": "star: per-worker full-duplex links (tbf each way) through a bridge"
                        if netns else "loopback (no kernel shaping)",
            "tag": self.tag, "addresses": [w.address for w in self.info],
            "impairment": self.impairment, "trace": self.trace.source if self.trace else None,
            "faults": [dataclasses.asdict(f) | {"kind": type(f).__name__.lower()} for f in self.faults.faults],
            "fault_log": list(self.faults.log),
            "links": [dataclasses.asdict(link) for link in self.links],
        }

