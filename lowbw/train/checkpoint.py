"""Checkpoints: every K steps, atomically, per process; a rerun resumes with identical later metrics.

Layout inside the run directory::

    checkpoint/step-00000400-rank0.pt      one file per process (sim: one file, rank 0, all replicas)
    checkpoint/latest.json                 written last and atomically by the main process: step, files,
                                           number of metrics.jsonl lines at that step, config fingerprint

A checkpoint counts only once ``latest.json`` names it, so a crash while saving leaves the previous one in
force. Older step files are deleted after the marker moves on.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from pathlib import Path
from typing import Any

import torch

from lowbw.runio import atomic_write, atomic_write_json

__all__ = ["fingerprint", "save_part", "write_marker", "read_marker", "load_part", "prune", "RUN_ONLY_KEYS"]

# keys that may change between a run and its resumption without changing its numbers
RUN_ONLY_KEYS = ("progress", "max_wall_s", "checkpoint_every", "master_port", "threads", "name", "peer_timeout_s")


def fingerprint(cfg_dict: dict[str, Any]) -> str:
    d = {k: v for k, v in cfg_dict.items() if k not in RUN_ONLY_KEYS}
    return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:16]


def _dir(out: str | Path) -> Path:
    return Path(out) / "checkpoint"


def part_name(step: int, rank: int) -> str:
    return f"step-{step:08d}-rank{rank}.pt"


def save_part(out: str | Path, step: int, rank: int, state: dict[str, Any]) -> Path:
    """Atomically write one process's state (temp file + fsync + rename)."""
    return atomic_write(_dir(out) / part_name(step, rank), lambda f: torch.save(state, f))


def write_marker(out: str | Path, step: int, ranks: int, metrics_lines: int, fp: str) -> None:
    atomic_write_json(_dir(out) / "latest.json", {
        "step": step, "files": [part_name(step, r) for r in range(ranks)], "metrics_lines": metrics_lines,
        "fingerprint": fp,
    })


def read_marker(out: str | Path) -> dict[str, Any] | None:
    p = _dir(out) / "latest.json"
    if not p.exists():
        return None
    m = json.loads(p.read_text())
    for f in m["files"]:
        if not (_dir(out) / f).exists():
            raise FileNotFoundError(f"{p} names {f}, which is missing: delete {_dir(out)} to start over")
    return m


def load_part(out: str | Path, step: int, rank: int, map_location="cpu") -> dict[str, Any]:
    return torch.load(_dir(out) / part_name(step, rank), map_location=map_location, weights_only=False)


def prune(out: str | Path, keep_step: int) -> None:
    """Delete step files other than ``keep_step``'s."""
    d = _dir(out)
    if not d.exists():
        return
    tag = f"step-{keep_step:08d}-"
    for p in d.glob("step-*.pt"):
        if not p.name.startswith(tag):
            with contextlib.suppress(FileNotFoundError):
                p.unlink()
