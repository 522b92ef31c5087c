"""The rendezvous of every lowbw process group: a TCP store whose server listens only on the address the group
was given (127.0.0.1 for a local run, a namespace's or a node's own address for the testbed and clusters),
never on every interface.

torch's ``TCPStore`` server binds the wildcard address (``*:PORT``, IPv4 and IPv6) whatever host name it is
given, so ``init_process_group(init_method="env://")`` with ``MASTER_ADDR=127.0.0.1`` still opens the rank-0
store to anyone who can reach the machine, for the whole run. Here the listening socket is created and bound
to ``MASTER_ADDR`` first and handed to the store (``TCPStore(master_listen_fd=...)``, torch's documented way);
everything else is torch's: the same store protocol, timeouts and clean-up (the server lives and dies with
rank 0's process). gloo's own pair sockets already listen on the address of ``GLOO_SOCKET_IFNAME`` / the
host name's (127.0.0.1 for a local run).

A host *name* is bound to the first address it resolves to on the node that hosts the store (IPv4 or IPv6),
the address the other nodes are expected to reach it at; a cluster whose nodes resolve their own name to a
loopback address (Debian's ``127.0.1.1`` line in /etc/hosts) must give node 0's address instead.

Steps of :func:`init_process_group` (rank R of N, ``MASTER_ADDR:MASTER_PORT`` from torchrun's environment):

1. Under a torchrun agent that shares its own store (``TORCHELASTIC_USE_AGENT_STORE=True``) every worker is a
   client: torch's ``env://`` as is (the agent's store is the one to bind: :mod:`lowbw.launch.torchrun`).
2. Rank 0 binds a socket to ``MASTER_ADDR:MASTER_PORT`` and starts the store server on it; ranks > 0 connect.
3. ``torch.distributed.init_process_group(backend, store=..., rank=R, world_size=N, timeout=...)``.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from datetime import timedelta

import torch.distributed as dist

__all__ = ["listen_socket", "tcp_store", "init_process_group"]


def listen_socket(host: str, port: int) -> socket.socket:
    """A TCP socket listening on ``host:port`` only (``port`` 0: a free one), IPv4 or IPv6 as ``host``
    resolves first. Raises OSError naming the address when it cannot be bound."""
    try:
        family, kind, proto, _, addr = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    except socket.gaierror as e:
        raise OSError(f"rendezvous address {host!r} does not resolve ({e.strerror})") from None
    s = socket.socket(family, kind, proto)
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as torch's own server: TIME_WAIT is no obstacle
        s.bind(addr)
        s.listen(socket.SOMAXCONN)
    except OSError as e:
        s.close()
        raise OSError(f"cannot listen on rendezvous address {host}:{port} ({e.strerror})") from None
    return s


def tcp_store(host: str, port: int, world_size: int | None, is_master: bool, timeout: timedelta,
              wait_for_workers: bool = True) -> dist.TCPStore:
    """A ``TCPStore`` at ``host:port``; the master's server listens on ``host`` only (see the module
    docstring). ``port`` 0 with ``is_master``: a free port, read back from ``.port``."""
    if not is_master:
        return dist.TCPStore(host, port, world_size, False, timeout)
    s = listen_socket(host, port)
    port = s.getsockname()[1]
    fd = s.detach()  # the store owns the socket from here (and closes it with the server)
    try:
        return dist.TCPStore(host, port, world_size, True, timeout, wait_for_workers=wait_for_workers,
                             master_listen_fd=fd)
    except BaseException:
        os.close(fd)
        raise


def init_process_group(backend: str, timeout: timedelta, env: Mapping[str, str] | None = None) -> None:
    """``torch.distributed.init_process_group(backend)`` from torchrun's environment (RANK, WORLD_SIZE,
    MASTER_ADDR, MASTER_PORT), its store listening on MASTER_ADDR only (steps in the module docstring)."""
    env = os.environ if env is None else env
    if env.get("TORCHELASTIC_USE_AGENT_STORE") == "True":  # 1. the agent hosts the store
        dist.init_process_group(backend, init_method="env://", timeout=timeout)
        return
    rank, world = int(env["RANK"]), int(env["WORLD_SIZE"])
    store = tcp_store(env["MASTER_ADDR"], int(env["MASTER_PORT"]), world, rank == 0, timeout)  # 2.
    dist.init_process_group(backend, store=store, rank=rank, world_size=world, timeout=timeout)  # 3.
