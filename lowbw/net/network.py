"""The kernel side of a netns-tc testbed: a bridge namespace, one namespace and link per worker, their shapers.

:class:`Network` turns the workers' :class:`~lowbw.net.link.LinkSpec` into namespaces, links and qdiscs (the
commands: :mod:`lowbw.net.tc`), changes a running link's rate, delay or state, reads the links' byte counters
and deletes it all again. A link is a veth pair, or a pair of TAP devices held by the userspace emulator
(:mod:`lowbw.net.linkemu`) when the impairment is ``"userspace"``. The processes that use the network, its
rate schedule and its faults belong to :class:`lowbw.net.testbed.Testbed`.
"""

from __future__ import annotations

import dataclasses
import shutil
import tempfile
from collections.abc import Sequence

from lowbw.net import linkemu, tc
from lowbw.net.link import LinkSpec
from lowbw.net.linkstats import port_counters
from lowbw.net.namespaces import delete_namespaces, write_hosts
from lowbw.net.options import LinkShapers, TestbedOptions, WorkerInfo
from lowbw.net.probe import run_command
from lowbw.net.tc import WORKER_IF

__all__ = ["Network", "tc_link"]


def tc_link(link: LinkSpec) -> LinkSpec:
    """What the kernel does of ``link`` when the userspace emulator adds its delay, jitter and loss."""
    return dataclasses.replace(link, delay_s=0.0, down_delay_s=0.0, jitter_s=0.0, loss=0.0)


class Network:
    """The namespaces, links and shapers of ``workers`` workers, named after ``tag``; nothing exists until
    :meth:`build`, and :meth:`close` deletes whatever was built (idempotent)."""

    def __init__(self, tag: str, workers: int, options: TestbedOptions):
        self.tag, self.workers, self.options = tag, workers, options
        self.impairment: str | None = None  # what adds delay/jitter/loss: "netem", "userspace" or None
        self.namespaces: list[str] = []  # created so far, bridge first (deleted by close())
        self.info: list[WorkerInfo] = []
        self.loss_method: str | None = None
        self.shapers: list[LinkShapers] = []
        self.emulator: linkemu.Emulator | None = None
        self.workdir: str | None = None  # the emulator's spec and statistics

    @property
    def bridge_ns(self) -> str:
        return f"{self.tag}-br"

    def worker_ns(self, rank: int) -> str:
        return f"{self.tag}-w{rank}"

    def execute(self, commands: Sequence[tc.Command]) -> None:
        for c in commands:
            run_command(c.argv, input=c.stdin, timeout=60 if c.stdin else 30)

    def build(self, links: Sequence[LinkSpec], impairment: str | None) -> None:
        """Create the bridge, then each worker's namespace and link (a veth pair, or TAP devices held by the
        userspace emulator), then the shapers of ``links`` (one per worker)."""
        opts, userspace = self.options, impairment == "userspace"
        self.impairment = impairment
        self.namespaces.append(self.bridge_ns)
        self.execute(tc.bridge_commands(self.bridge_ns))
        if userspace:
            self.namespaces += [self.worker_ns(r) for r in range(self.workers)]
            self.execute([tc.Command(("ip", "netns", "add", ns)) for ns in self.namespaces[1:]])
            self.workdir = tempfile.mkdtemp(prefix=f"{self.tag}-")
            self.emulator = linkemu.Emulator(
                [linkemu.link_ends(link, r, self.worker_ns(r), self.bridge_ns, WORKER_IF, tc.port_name(r))
                 for r, link in enumerate(links)], self.workdir)
            self.emulator.start()
        for r, link in enumerate(links):
            ns = self.worker_ns(r)
            if not userspace:
                self.namespaces.append(ns)
            self.execute(tc.worker_commands(self.bridge_ns, ns, r, lossy=link.loss > 0 and not userspace,
                                            congestion_control=opts.congestion_control, tap=userspace))
            self.info.append(WorkerInfo(r, ns, tc.worker_address(r), WORKER_IF))
        names = {w.address: w.namespace for w in self.info}  # every worker's address resolves to a name
        for w in self.info:
            write_hosts(w.namespace, names)
        for r, link in enumerate(links):
            shaping = tc_link(link) if userspace else link
            up_cmds, up, loss_method = tc.uplink_commands(self.worker_ns(r), shaping, self.workers,
                                                          opts.ack_priority, impairment == "netem")
            self.loss_method = "userspace" if userspace and link.loss else loss_method
            self.execute(up_cmds)
            down_cmds, down = tc.downlink_commands(self.bridge_ns, r, link, self.workers, opts.ack_priority)
            if opts.shape_ingress:
                self.execute(down_cmds)
            self.shapers.append(LinkShapers(up, down))

    def reshape(self, rank: int, link: LinkSpec) -> None:
        """Apply ``link``'s rates to worker ``rank``'s running shapers."""
        shapers = self.shapers[rank]
        self.execute(tc.change_shaper_commands(self.worker_ns(rank), WORKER_IF, shapers.up, link.up_bps, link,
                                               self.workers))
        if self.options.shape_ingress:
            self.execute(tc.change_shaper_commands(self.bridge_ns, tc.port_name(rank), shapers.down,
                                                   link.down_bps, link, self.workers))

    def set_delay(self, rank: int, delay_s: float) -> None:
        """Worker ``rank``'s uplink delay, now; needs the userspace emulator (``emulator`` not None)."""
        self.emulator.set_delay(rank, delay_s)

    def set_port(self, rank: int, up: bool) -> None:
        """Worker ``rank``'s link up or down (its bridge port: every packet to or from it is dropped)."""
        run_command(["ip", "-n", self.bridge_ns, "link", "set", tc.port_name(rank), "up" if up else "down"])

    def qdiscs(self) -> str:
        """``tc qdisc show`` of every link's two ends."""
        out = []
        for r in range(self.workers):
            out.append(f"# rank {r} uplink\n" + run_command(["ip", "netns", "exec", self.worker_ns(r), "tc", "qdisc",
                                                             "show", "dev", WORKER_IF]).stdout)
            out.append(f"# rank {r} downlink\n" + run_command(["ip", "netns", "exec", self.bridge_ns, "tc", "qdisc",
                                                               "show", "dev", tc.port_name(r)]).stdout)
        return "".join(out)

    def counters(self) -> list[tuple[int, int]] | None:
        """``(sent, received)`` bytes of each worker's bridge port so far, or None before :meth:`build`."""
        return port_counters(self.bridge_ns, self.workers) if self.namespaces else None

    def close(self) -> dict | None:
        """Stop the emulator and delete every namespace (their veths, the bridge and every qdisc go with them);
        returns the emulator's statistics (None without it)."""
        stats = None
        if self.emulator is not None:  # before the namespaces: its TAP devices keep them alive
            stats = self.emulator.stop()
            self.emulator = None
        delete_namespaces(reversed(self.namespaces))
        if self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)
            self.workdir = None
        self.namespaces = []
        return stats
