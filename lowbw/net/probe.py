"""What this machine lets the testbed do: root, iproute2, namespaces, veth, bridge, tbf, netem, SCHED_RR,
TCP congestion controls. Each probe runs once per process; nothing it creates outlives it."""

from __future__ import annotations

import functools
import os
import secrets
import shutil
import subprocess
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = [
    "TestbedUnavailable",
    "RealtimeUnavailable",
    "Capabilities",
    "run_command",
    "capabilities",
    "netns_missing",
    "netns_available",
    "has_netem",
    "realtime_available",
    "available_congestion_controls",
    "default_congestion_control",
]

PROBE_PREFIX = "lbw"  # probe namespaces are named lbw-probe-<pid>-<random>


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


def run_command(cmd: Sequence[str], check: bool = True, timeout: float = 30, input: str | None = None
                ) -> subprocess.CompletedProcess:
    """Run ``cmd`` (captured, text); with ``check`` a non-zero exit raises RuntimeError with its stderr."""
    p = subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout, input=input)
    if check and p.returncode != 0:
        raise RuntimeError(f"command failed ({p.returncode}): {' '.join(cmd)}\n{p.stderr.strip()}")
    return p


@dataclass(frozen=True)
class Capabilities:
    """The result of the kernel probe: what is missing for the netns + tc testbed ([] = nothing), and
    whether the kernel has sch_netem."""

    missing: tuple[str, ...]
    netem: bool


_PROBE: dict[str, Capabilities] = {}
_PROBE_LOCK = threading.Lock()


def _missing_basics() -> list[str]:
    missing = []
    if os.name != "posix" or not sys.platform.startswith("linux"):
        missing.append("Linux")
    elif os.geteuid() != 0:
        missing.append("root (CAP_NET_ADMIN + CAP_SYS_ADMIN to create network namespaces); running as uid "
                       f"{os.geteuid()}")
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            missing.append(f"the '{tool}' command (package iproute2)")
    return missing


def _probe_kernel(missing: list[str]) -> bool:
    """Try namespaces, veth, bridge and tbf in a throw-away namespace (appending what fails to ``missing``);
    returns whether netem works there too."""
    ns = f"{PROBE_PREFIX}-probe-{os.getpid()}-{secrets.token_hex(3)}"
    try:
        p = run_command(["ip", "netns", "add", ns], check=False)
        if p.returncode != 0:
            missing.append(f"working network namespaces ('ip netns add' failed: {p.stderr.strip()})")
            return False
        steps = [
            (["ip", "-n", ns, "link", "add", "pa", "type", "veth", "peer", "name", "pb"], "veth devices"),
            (["ip", "-n", ns, "link", "add", "br0", "type", "bridge"], "bridge devices"),
            (["ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", "pa", "root", "handle", "1:",
              "tbf", "rate", "1mbit", "burst", "16kb", "limit", "100kb"], "tc tbf (sch_tbf)"),
        ]
        for cmd, what in steps:
            p = run_command(cmd, check=False)
            if p.returncode != 0:
                missing.append(f"{what}: {p.stderr.strip()}")
                return False
        p = run_command(["ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", "pb", "root", "netem",
                         "delay", "1ms"], check=False)
        return p.returncode == 0
    finally:
        run_command(["ip", "netns", "del", ns], check=False)


def capabilities() -> Capabilities:
    """Probe once per process: root, ip, tc, and whether namespaces/veth/bridge/tbf/netem really work."""
    with _PROBE_LOCK:
        if "caps" not in _PROBE:
            missing = _missing_basics()
            netem = _probe_kernel(missing) if not missing else False
            _PROBE["caps"] = Capabilities(tuple(missing), netem)
        return _PROBE["caps"]


def netns_missing() -> list[str]:
    """What the netns + tc testbed lacks here ([] = it works)."""
    return list(capabilities().missing)


def netns_available() -> bool:
    return not netns_missing()


def has_netem() -> bool:
    """Whether the kernel has sch_netem (delay/jitter/loss in the kernel)."""
    return capabilities().netem


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
