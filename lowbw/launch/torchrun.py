"""torchrun (``torch.distributed.run``) whose rendezvous stores listen only on the address they were given.

    python -m lowbw.launch.torchrun --standalone --nproc-per-node 4 -m lowbw.train.worker ...       # one machine
    python -m lowbw.launch.torchrun --nnodes 2 --node-rank R --rdzv-backend lowbw --rdzv-endpoint HOST:PORT ...

torchrun's arguments, unchanged. torch's ``TCPStore`` server listens on every interface; torchrun's agents
open one for the rendezvous (c10d: on node 0, at ``--rdzv-endpoint``) and, by default, a second that the
workers share. Here:

1. A rendezvous backend ``lowbw`` is registered: torch's dynamic c10d rendezvous over a store from
   :func:`lowbw.launch.rendezvous.tcp_store`, whose server (node 0, or ``--rdzv-conf is_host=1``) listens on the
   endpoint's host only. ``--rdzv-backend c10d`` is run as ``lowbw`` (same protocol, same keys).
2. ``--standalone`` becomes ``lowbw`` at ``127.0.0.1`` on a free port, the node's address ``127.0.0.1``:
   nothing of a one-machine job listens beyond loopback.
3. The agents do not share their store with the workers (``TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1``): torchrun
   hands the workers ``MASTER_ADDR`` (node 0's ``--local-addr``) and a free port, and lowbw's workers make their
   store there with :func:`lowbw.launch.rendezvous.init_process_group` (listening on ``MASTER_ADDR`` only).

``is_host`` is given, not guessed, when absent: node rank 0 hosts (inside a network namespace the host name
resolves to no address of the node, so torch's guess fails).
"""

from __future__ import annotations

import os
import sys
import uuid
from datetime import timedelta

from torch.distributed.elastic.rendezvous import (
    RendezvousHandler,
    RendezvousParameters,
    rendezvous_handler_registry,
)
from torch.distributed.elastic.rendezvous.c10d_rendezvous_backend import C10dRendezvousBackend
from torch.distributed.elastic.rendezvous.dynamic_rendezvous import create_handler
from torch.distributed.elastic.rendezvous.utils import parse_rendezvous_endpoint
from torch.distributed.run import parse_args, parse_min_max_nnodes, run

from lowbw.launch.rendezvous import tcp_store

__all__ = ["BACKEND", "register", "main"]

BACKEND = "lowbw"  # the name of the rendezvous backend registered here
DEFAULT_PORT = 29400  # torch's default c10d rendezvous port


class _Backend(C10dRendezvousBackend):
    """torch's c10d rendezvous backend under the name ``lowbw`` (torch checks the name against the flag)."""

    @property
    def name(self) -> str:
        return BACKEND


def _create_handler(params: RendezvousParameters) -> RendezvousHandler:
    """A DynamicRendezvousHandler over a store whose server listens on the endpoint's host only (step 1)."""
    host, port = parse_rendezvous_endpoint(params.endpoint, default_port=DEFAULT_PORT)
    is_host = bool(params.get_as_bool("is_host", False))
    read_timeout = params.get_as_int("read_timeout", 60)
    if read_timeout <= 0:
        raise ValueError(f"read_timeout={read_timeout} is not a positive number of seconds")
    store = tcp_store(host, port, None, is_host, timedelta(seconds=read_timeout), wait_for_workers=False)
    return create_handler(store, _Backend(store, params.run_id), params)


def register() -> None:
    """Register the ``lowbw`` rendezvous backend with torch's handler registry."""
    rendezvous_handler_registry.register(BACKEND, _create_handler)  # the same creator again is a no-op


def _has_is_host(conf: str) -> bool:
    return any(kv.split("=", 1)[0].strip() == "is_host" for kv in conf.split(",") if kv.strip())


def main(argv: list[str] | None = None) -> None:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    one_node = parse_min_max_nnodes(args.nnodes)[1] == 1
    if args.standalone or (one_node and args.rdzv_backend == "static" and not args.rdzv_endpoint
                           and args.master_port is None):  # 2. (torchrun runs the latter as standalone too)
        args.standalone = False
        args.rdzv_backend, args.rdzv_endpoint, args.rdzv_id = BACKEND, "127.0.0.1:0", str(uuid.uuid4())
        args.rdzv_conf = ",".join(x for x in (args.rdzv_conf, "is_host=1") if x)
        args.local_addr = args.local_addr or "127.0.0.1"
    if args.rdzv_backend == "c10d":  # 1.
        args.rdzv_backend = BACKEND
    if args.rdzv_backend == BACKEND and not _has_is_host(args.rdzv_conf):
        args.rdzv_conf = ",".join(x for x in (args.rdzv_conf, f"is_host={int(args.node_rank == 0)}") if x)
    os.environ["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] = "1"  # 3.
    register()
    run(args)


if __name__ == "__main__":
    main()
