"""The testbed's namespaces: their names, deleting them, and finding those a dead testbed left behind.

A testbed named ``<prefix>-<pid>-<random>`` owns the namespaces ``<tag>-br`` and ``<tag>-w<rank>``; the pid
is its creator's, so a namespace whose creator is gone is a leftover. Deleting a namespace deletes its veth
ends, its bridge and every qdisc on them.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
from collections.abc import Iterable

from lowbw.net.probe import run_command

__all__ = ["DEFAULT_PREFIX", "make_tag", "list_leftovers", "kill_ns_pids", "ns_processes", "interface_bytes",
           "delete_namespaces", "cleanup", "write_hosts", "NETNS_ETC"]

DEFAULT_PREFIX = "lbw"
#: ``ip netns exec NS`` bind-mounts the files of NETNS_ETC/NS over those of /etc (iproute2's convention)
NETNS_ETC = "/etc/netns"
_NAME_RE = re.compile(r"^(?P<prefix>[a-z][a-z0-9]*)-(?P<pid>\d+)-(?P<rand>[0-9a-f]+)-(?:br|w\d+)$")
_PREFIX_RE = re.compile(r"[a-z][a-z0-9]{0,11}")


def make_tag(prefix: str, rand: str) -> str:
    """``<prefix>-<this pid>-<rand>``; ValueError names a bad prefix."""
    if not _PREFIX_RE.fullmatch(prefix):
        raise ValueError(f"prefix must match [a-z][a-z0-9]{{0,11}}, got {prefix!r}")
    return f"{prefix}-{os.getpid()}-{rand}"


def list_leftovers(prefix: str = DEFAULT_PREFIX, all_: bool = False) -> list[str]:
    """Namespaces created by testbeds with ``prefix`` whose creating process is gone (or all of them)."""
    p = run_command(["ip", "netns", "list"], check=False)
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


def kill_ns_pids(ns: str, sig: int = signal.SIGKILL) -> None:
    """Kill the processes running inside namespace ``ns`` (only ever called on our own namespaces)."""
    p = run_command(["ip", "netns", "pids", ns], check=False)
    for tok in p.stdout.split():
        with contextlib.suppress(ProcessLookupError, ValueError, PermissionError):
            os.kill(int(tok), sig)


def ns_processes(ns: str) -> list[tuple[int, str]]:
    """``(pid, command line)`` of every process running inside namespace ``ns``."""
    p = run_command(["ip", "netns", "pids", ns], check=False)
    out = []
    for tok in p.stdout.split():
        with contextlib.suppress(ValueError, OSError):
            with open(f"/proc/{int(tok)}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode("utf-8", "replace").strip()
            out.append((int(tok), cmd))
    return out


def write_hosts(ns: str, names: dict[str, str]) -> bool:
    """Give the processes of namespace ``ns`` an /etc/hosts (``NETNS_ETC/ns/hosts``, bind-mounted by ``ip netns
    exec``) holding the host's entries plus ``address name`` for every entry of ``names``, so every address
    of the testbed resolves (c10d looks up its peers' names and warns when it cannot). False if /etc is not
    writable (nothing else changes)."""
    try:
        with open("/etc/hosts") as f:
            base = f.read()
    except OSError:
        base = "127.0.0.1 localhost\n"
    # the IPv4-mapped IPv6 form too: c10d's store listens on an IPv6 socket and sees its peers as ::ffff:a.b.c.d
    lines = [base.rstrip("\n"), "# lowbw testbed", *(f"{addr} {name}" for addr, name in names.items()),
             *(f"::ffff:{addr} {name}" for addr, name in names.items())]
    try:
        os.makedirs(os.path.join(NETNS_ETC, ns), exist_ok=True)
        with open(os.path.join(NETNS_ETC, ns, "hosts"), "w") as f:
            f.write("\n".join(lines) + "\n")
    except OSError:
        return False
    return True


def _remove_etc(ns: str) -> None:
    """Remove what :func:`write_hosts` made for ``ns`` (only our own file, then the directory if empty)."""
    d = os.path.join(NETNS_ETC, ns)
    with contextlib.suppress(OSError):
        os.unlink(os.path.join(d, "hosts"))
    with contextlib.suppress(OSError):
        os.rmdir(d)


def interface_bytes(ns: str, dev: str) -> int:
    """Bytes interface ``dev`` of namespace ``ns`` has sent plus received (0 if unreadable)."""
    res = run_command(["ip", "-n", ns, "-j", "-s", "link", "show", "dev", dev], check=False)
    try:
        st = json.loads(res.stdout)[0]["stats64"]
        return int(st["tx"]["bytes"]) + int(st["rx"]["bytes"])
    except (ValueError, LookupError, TypeError):
        return 0


def delete_namespaces(names: Iterable[str]) -> None:
    """Kill what runs in each namespace, then delete it (errors ignored: teardown must finish)."""
    for ns in names:
        kill_ns_pids(ns)
        run_command(["ip", "netns", "del", ns], check=False)
        _remove_etc(ns)


def cleanup(prefix: str = DEFAULT_PREFIX, all_: bool = False) -> list[str]:
    """Delete leftover testbed namespaces (those of dead testbeds; ``all_`` = also live ones) and return
    their names."""
    names = list_leftovers(prefix, all_)
    delete_namespaces(names)
    return names
