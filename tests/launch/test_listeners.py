"""Nothing listens beyond the run: the listening TCP sockets of a running ``procs`` (or ``torchrun``) run
(its launcher and workers, read from /proc/net/tcp and tcp6 by the sockets' inodes, so that other processes on
the machine do not count) are all on loopback; the rendezvous store of :mod:`lowbw.launch.rendezvous` listens on the
address it was given, where torch's own TCPStore listens on every interface."""

from __future__ import annotations

import ipaddress
import os
import socket
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest
import torch.distributed as dist

from lowbw.launch.rendezvous import listen_socket, tcp_store
from tests.train.test_faults import TINY, yaml_file

ROOT = Path(__file__).resolve().parents[2]


def _descendants(pid: int) -> set[int]:
    """``pid`` and every process below it (by /proc/*/stat's parent pid)."""
    children: dict[int, list[int]] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(d.name))
    out, todo = set(), [pid]
    while todo:
        p = todo.pop()
        out.add(p)
        todo.extend(children.get(p, []))
    return out


def _socket_inodes(pids: set[int]) -> dict[int, int]:
    """inode -> pid of every socket the processes hold open."""
    found = {}
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if link.startswith("socket:["):
                found[int(link[8:-1])] = pid
    return found


def _addr(hex_addr: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    """An address as /proc/net/tcp{,6} writes it (32-bit words in host byte order)."""
    raw = bytes.fromhex(hex_addr)
    words = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4)) if sys.byteorder == "little" else raw
    return ipaddress.ip_address(words)


def listening(pids: set[int]) -> list[tuple[str, int, int]]:
    """(address, port, pid) of every TCP socket in LISTEN state (0A) that one of ``pids`` holds."""
    inodes = _socket_inodes(pids)
    out = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            f = line.split()
            if f[3] == "0A" and int(f[9]) in inodes:
                host, port = f[1].split(":")
                out.append((str(_addr(host)), int(port, 16), inodes[int(f[9])]))
    return out


def is_loopback(addr: str) -> bool:
    a = ipaddress.ip_address(addr)
    return a.is_loopback or (isinstance(a, ipaddress.IPv6Address) and a.ipv4_mapped is not None
                             and a.ipv4_mapped.is_loopback)


def test_the_socket_reader_sees_torchs_own_store_listen_everywhere_and_ours_on_loopback():
    """The check below can fail: torch's TCPStore given 127.0.0.1 listens on the wildcard address."""
    me = {os.getpid()}
    theirs = dist.TCPStore("127.0.0.1", 0, 1, True, timedelta(seconds=10))
    try:
        mine = [x for x in listening(me) if x[1] == theirs.port]
        assert mine and not all(is_loopback(a) for a, _, _ in mine), mine
    finally:
        del theirs
    ours = tcp_store("127.0.0.1", 0, 1, True, timedelta(seconds=10))
    ours.set("k", "v")
    assert ours.get("k") == b"v"
    assert [(a, p) for a, p, _ in listening(me) if p == ours.port] == [("127.0.0.1", ours.port)]
    del ours


def test_a_bad_rendezvous_address_is_one_line():
    with pytest.raises(OSError, match=r"rendezvous address 'no-such-host\.invalid' does not resolve"):
        listen_socket("no-such-host.invalid", 0)
    with pytest.raises(OSError, match=r"cannot listen on rendezvous address 192\.0\.2\.1:0"):
        listen_socket("192.0.2.1", 0)  # TEST-NET-1: not an address of this machine


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["procs", "torchrun"])
def test_a_running_local_run_listens_on_loopback_only(tmp_path, backend):
    """Snapshots of the run's listening sockets every 0.2 s from its start to its end: every one is on
    loopback, and the snapshots did see the rendezvous store and gloo's listeners (so the test looked).
    torchrun: its agent's rendezvous store too (``python -m lowbw.launch.torchrun --standalone``)."""
    c = yaml_file(tmp_path / "c.yaml", {**TINY, "backend": backend, "steps": 60, "log_every": 10})
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    p = subprocess.Popen([sys.executable, "-m", "lowbw", "train", "-c", str(c), "--out", str(tmp_path / "r")],
                         cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    seen: set[tuple[str, int]] = set()
    worker_pids: set[int] = set()
    try:
        deadline = time.monotonic() + 600
        while p.poll() is None and time.monotonic() < deadline:
            pids = _descendants(p.pid)
            for addr, port, pid in listening(pids):
                seen.add((addr, port))
                worker_pids.add(pid)
            time.sleep(0.2)
    finally:
        if p.poll() is None:
            p.kill()
        err = p.communicate(timeout=60)[1]
    assert p.returncode == 0, err
    # the workers' store and each worker's gloo (torchrun: and the agent's store)
    assert len(worker_pids) >= 2 and len(seen) >= 3 + (backend == "torchrun"), (seen, worker_pids)
    wide = sorted(x for x in seen if not is_loopback(x[0]))
    assert not wide, f"listening beyond loopback: {wide}"


def test_socket_helpers_read_this_process():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        assert ("127.0.0.1", s.getsockname()[1], os.getpid()) in listening({os.getpid()})
