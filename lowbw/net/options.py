"""The testbed's settings apart from its links (:class:`TestbedOptions`) and what it tells each worker
(:class:`WorkerInfo`)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from lowbw.net import tc
from lowbw.net.link import LinkSpec, parse_schedule
from lowbw.net.namespaces import DEFAULT_PREFIX, make_tag
from lowbw.net.probe import available_congestion_controls

__all__ = ["TestbedOptions", "WorkerInfo", "LinkShapers", "EMULATIONS", "LINK_EMULATORS", "worker_env"]

EMULATIONS = ("netns-tc", "loopback-ratelimit")
#: what adds delay, jitter and loss: "auto" (netem when the kernel has it, else the userspace emulator of
#: lowbw.net.linkemu), "netem" (error without it), "userspace" (always the emulator)
LINK_EMULATORS = ("auto", "netem", "userspace")


@dataclass(frozen=True)
class TestbedOptions:
    """How the testbed runs, apart from what its links do."""

    __test__ = False  # not a pytest test class

    schedule: tuple[tuple[float, float], ...] = ()  # (seconds after launch, bits/s): every link's new rate
    emulation: str = "auto"  # "auto" (netns-tc if possible, else loopback), "netns-tc", "loopback-ratelimit"
    prefix: str = DEFAULT_PREFIX  # namespace name prefix, [a-z][a-z0-9]{0,11}
    master_port: int = 29500  # MASTER_PORT of the workers' environment
    shape_ingress: bool = True  # shape each downlink too (bridge port egress towards the worker)
    ack_priority: bool = True  # fair-queueing shapers: ACKs first, one queue per peer (see lowbw.net.tc)
    congestion_control: str | None = None  # TCP congestion control of the links; None = the kernel's default
    realtime: int | None = None  # SCHED_RR priority 1..99 of the workers; None = the fair scheduler
    link_emulator: str = "auto"  # what adds delay, jitter and loss (LINK_EMULATORS)

    @classmethod
    def parse(cls, schedule: str | Sequence | None = None, emulation: str = "auto", prefix: str = DEFAULT_PREFIX,
              master_port: int = 29500, shape_ingress: bool = True, ack_priority: bool = True,
              congestion_control: str | None = None, realtime: int | None = None,
              link_emulator: str = "auto") -> TestbedOptions:
        """Options from user-facing values; ValueError names the bad one."""
        if emulation not in ("auto", *EMULATIONS):
            raise ValueError(f"emulation must be auto, netns-tc or loopback-ratelimit, got {emulation!r}")
        make_tag(prefix, "0")  # validates the prefix
        cc = congestion_control or None
        if cc is not None:
            avail = available_congestion_controls()
            if avail and cc not in avail:
                raise ValueError(f"congestion_control {congestion_control!r} is not available in this kernel "
                                 f"(available: {' '.join(avail)})")
        if realtime is not None and not (isinstance(realtime, int) and 1 <= realtime <= 99):
            raise ValueError(f"realtime must be a SCHED_RR priority in 1..99 or None, got {realtime!r}")
        if link_emulator not in LINK_EMULATORS:
            raise ValueError(f"link_emulator must be one of {', '.join(LINK_EMULATORS)}, got {link_emulator!r}")
        return cls(tuple(parse_schedule(schedule)), emulation, prefix, int(master_port), bool(shape_ingress),
                   bool(ack_priority), cc, realtime, link_emulator)


@dataclass(frozen=True)
class WorkerInfo:
    rank: int
    namespace: str | None  # None on loopback
    address: str  # the worker's IPv4 address (rank 0's is MASTER_ADDR)
    ifname: str  # the interface its traffic leaves by (GLOO_SOCKET_IFNAME)


@dataclass(frozen=True)
class LinkShapers:
    """Where worker ``rank``'s two shapers sit (for rate changes)."""

    up: tc.Shaper
    down: tc.Shaper




def worker_env(env: dict[str, str], rank: int, info: list[WorkerInfo], link: LinkSpec, options: TestbedOptions,
               emulation: str, tag: str, t0: float | None) -> dict[str, str]:
    """``env`` plus worker ``rank``'s torchrun-style variables (a one-process node) and the LOWBW_* ones
    describing its link (read by :func:`lowbw.net.ratelimit.emulation_from_env`)."""
    n = str(len(info))
    env.update({
        "RANK": str(rank), "WORLD_SIZE": n, "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1",
        "GROUP_RANK": str(rank), "ROLE_RANK": str(rank), "ROLE_WORLD_SIZE": n,
        "MASTER_ADDR": info[0].address, "MASTER_PORT": str(options.master_port),
        "GLOO_SOCKET_IFNAME": info[rank].ifname, "LOWBW_EMULATION": emulation,
        "LOWBW_TESTBED": tag, "LOWBW_LINK_DELAY_S": repr(link.delay_s), "LOWBW_LINK_LOSS": repr(link.loss),
    })
    env.setdefault("OMP_NUM_THREADS", "1")
    if link.up_bps is not None:
        env["LOWBW_LINK_RATE_BPS"] = repr(link.up_bps)
    else:
        env.pop("LOWBW_LINK_RATE_BPS", None)
    if options.schedule:
        env["LOWBW_RATE_SCHEDULE"] = json.dumps(list(options.schedule))
    if t0 is not None:
        env["LOWBW_T0"] = repr(t0)
    return env
