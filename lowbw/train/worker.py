"""The worker entry point of the ``procs`` and ``torchrun`` backends (one process = one worker).

    python -m lowbw.train.worker --config run.json --out DIR        # RANK, WORLD_SIZE, MASTER_* in the env
    torchrun --nproc_per_node 4 -m lowbw.train.worker --config run.json --out DIR

Initialises torch.distributed (env://; gloo on CPU, NCCL on CUDA), installs the loopback rate limiter when
the testbed asks for it, and runs the same :class:`~lowbw.train.loop.Trainer` as ``sim`` over a
:class:`~lowbw.train.world.DistWorld`.
"""

from __future__ import annotations

import argparse
import os
import sys
from datetime import timedelta
from typing import Any


def worker_main(cfg, out) -> dict[str, Any]:
    import torch
    import torch.distributed as dist

    from lowbw.train.loop import Trainer, resolve_device
    from lowbw.train.world import DistWorld, default_threads

    torch.set_num_threads(int(os.environ.get("LOWBW_THREADS") or default_threads(cfg)))
    device = resolve_device(cfg)
    if os.environ.get("LOWBW_EMULATION") == "loopback-ratelimit":
        from lowbw.net.ratelimit import install_from_env

        install_from_env()
    backend = "nccl" if device.type == "cuda" else "gloo"
    if not dist.is_initialized():
        dist.init_process_group(backend, init_method="env://", timeout=timedelta(seconds=600))
    world = DistWorld(cfg)
    try:
        levels = []
        if cfg.sync == "hierarchical":
            levels.append("household")
            if cfg.neighbourhoods:
                levels.append("neighbourhood")
        world.ensure_groups(["world", *levels])
        if cfg.ddp_hook:
            from lowbw.train.ddp import DDPTrainer

            tr = DDPTrainer(cfg, world, out)
        else:
            tr = Trainer(cfg, world, out)
        return tr.run()
    finally:
        world.close()


def main(argv: list[str] | None = None) -> int:
    from lowbw.train.config import RunConfig

    ap = argparse.ArgumentParser(prog="python -m lowbw.train.worker", description=__doc__.splitlines()[0])
    ap.add_argument("--config", required=True, help="run config (JSON or YAML)")
    ap.add_argument("--out", required=True, help="run directory")
    a = ap.parse_args(argv)
    from lowbw.train.config import load_file

    cfg = RunConfig.from_dict(load_file(a.config))
    worker_main(cfg, a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
