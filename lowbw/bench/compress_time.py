"""The advisor's compression times of a device, as a benchmark: :func:`lowbw.measure.compress_time.run` (every
compressor setting of the workflow's method presets timed at several tensor sizes, each fitted as a fixed
per-call cost plus a per-byte cost) written to ``paper/measured/compress_time/<device>.json`` by default, where
``<device>`` is ``cpu`` or the CUDA device's short name (``NVIDIA H100 80GB HBM3`` -> ``h100``);
:mod:`lowbw.advise.device` reads every file there.

    python -m lowbw.bench.compress_time [--device cpu|cuda] [--sizes 4096 65536 1048576 8388608] [--reps 5]
        [--threads N] [--out paper/measured/compress_time/cpu.json]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

from lowbw.measure.compress_time import SIZES, run
from lowbw.runs.io import atomic_write_json

__all__ = ["STORE", "main"]

STORE = Path("paper/measured/compress_time")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m lowbw.bench.compress_time", description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu", help="cpu or cuda[:i]")
    ap.add_argument("--sizes", type=int, nargs="+", default=list(SIZES), help="fp32 entries per tensor")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1, help="torch threads (default 1: CPU time is then the cost)")
    ap.add_argument("--out", help="output JSON (default paper/measured/compress_time/<device>.json)")
    a = ap.parse_args(argv)
    if a.device.startswith("cuda") and not torch.cuda.is_available():
        print(f"lowbw.bench.compress_time: --device {a.device}: no CUDA device here", file=sys.stderr)
        return 2
    try:
        out = run(a.device, tuple(a.sizes), a.reps, a.threads, log=lambda s: print(s, file=sys.stderr, flush=True))
    except ValueError as e:
        print(f"lowbw.bench.compress_time: {e}", file=sys.stderr)
        return 2
    path = Path(a.out or STORE / f"{out['device']}.json")
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_json(path, out)
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
