"""The worker entry point of the ``procs`` and ``torchrun`` backends (one process = one worker).

    python -m lowbw.train.worker --config run.json --out DIR        # RANK, WORLD_SIZE, MASTER_* in the env
    torchrun --nproc_per_node 4 -m lowbw.train.worker --config run.json --out DIR

Initialises torch.distributed (torchrun's environment, the store listening on MASTER_ADDR only:
:mod:`lowbw.launch.rendezvous`; gloo on CPU, NCCL on CUDA), installs the loopback rate limiter when
the testbed asks for it, and runs the same :class:`~lowbw.train.loop.Trainer` as ``sim`` over a
:class:`~lowbw.train.world.DistWorld`.

A worker dies with its launcher (parent-death signal; ``LOWBW_PARENT_PID`` names the launcher), holds the
run directory's lock (shared with the launcher and the other workers) while it writes, and gives every wait
on a peer the run's peer timeout. On failure it prints one line ``lowbw worker rank R: Error: message`` last
on stderr (after the traceback), which the launcher reports.
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from lowbw.launch.rendezvous import init_process_group
from lowbw.net.ratelimit import install_from_env
from lowbw.runs.io import set_parent_death_signal
from lowbw.train.allocator import steady_allocator
from lowbw.train.config import RunConfig, load_file, parse_override
from lowbw.train.ddp import DDPTrainer
from lowbw.train.loop import Trainer, resolve_device
from lowbw.train.rundir import RunLock, finish
from lowbw.train.schemes.registry import spec_of
from lowbw.train.timeouts import peer_timeout_s
from lowbw.train.world import DistWorld, default_threads


def _init_timeout_s(t: float) -> float:
    """Rendezvous and metadata-group timeout: at least 2 minutes (workers start and import torch on shared
    cores; rank 0 evaluates while the others wait on the metadata group)."""
    return max(120.0, t)


def worker_main(cfg, out, keep_checkpoint: bool = False) -> dict[str, Any]:
    parent = os.environ.get("LOWBW_PARENT_PID")
    set_parent_death_signal(9, int(parent) if parent else None)
    out = Path(out).resolve()
    out.mkdir(parents=True, exist_ok=True)  # started by torchrun or lowbw.launch.cluster without our launcher
    lock = RunLock(out).acquire(shared=True)
    steady_allocator()
    torch.set_num_threads(int(os.environ.get("LOWBW_THREADS") or default_threads(cfg)))
    device = resolve_device(cfg)
    if os.environ.get("LOWBW_EMULATION") == "loopback-ratelimit":
        install_from_env()
    backend = "nccl" if device.type == "cuda" else "gloo"
    t0 = peer_timeout_s(cfg)
    if not dist.is_initialized():
        init_process_group(backend, timedelta(seconds=_init_timeout_s(t0)))  # the store on MASTER_ADDR only
    world = DistWorld(cfg, timeout_s=t0, meta_timeout_s=_init_timeout_s(t0))
    ok = False
    try:
        world.ensure_groups(spec_of(cfg.sync).groups(cfg))  # the scheme's groups: the world, households, ...
        if cfg.ddp_hook:
            tr = DDPTrainer(cfg, world, out)
        else:
            tr = Trainer(cfg, world, out)
        world.set_timeout(peer_timeout_s(cfg, tr.rep.P * 4))  # the gradient is known now
        summ = tr.run()
        ok = True
    finally:
        world.close(clean=ok)
        lock.release()
    if world.is_main and not os.environ.get("LOWBW_LAUNCHED"):
        summ = finish(out, keep_checkpoint)  # torchrun without our launcher: rank 0 completes the run
    return summ


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m lowbw.train.worker", description=__doc__.splitlines()[0])
    ap.add_argument("--config", required=True, help="run config (JSON or YAML)")
    ap.add_argument("--out", required=True, help="run directory")
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                    help="override one key of the config (repeatable; as `lowbw train --set`)")
    a = ap.parse_args(argv)
    rank = os.environ.get("RANK", "?")
    try:
        d = load_file(a.config)
        for o in a.overrides:
            k, v = parse_override(o)
            d[k] = v
        cfg = RunConfig.from_dict(d)
        worker_main(cfg, a.out)
    except BaseException as e:  # noqa: BLE001 (one line for the launcher, after the traceback)
        if isinstance(e, SystemExit) and e.code in (0, None):
            raise
        traceback.print_exc()
        msg = " ".join(str(e).split())[:500]
        print(f"lowbw worker rank {rank}: {type(e).__name__}: {msg}", file=sys.stderr, flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
