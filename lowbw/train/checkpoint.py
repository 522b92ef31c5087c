"""Checkpoints: every K steps, atomically, per process; a rerun resumes with identical later metrics.

Layout inside the run directory::

    checkpoint/step-00000400-rank0.pt      one file per process (sim: one file, rank 0, all replicas)
    checkpoint/step-00000400-rank0.pt.sha256   its SHA-256, written beside it (``sha256sum -c`` reads it)
    checkpoint/latest.json                 written last and atomically by the main process: step, files,
                                           number of metrics.jsonl lines at that step, config fingerprint

A checkpoint counts only once ``latest.json`` names it, so a crash while saving leaves the previous one in
force. Older step files are deleted after the marker moves on.

A checkpoint is loaded as data, never as code: its SHA-256 must match the one recorded beside it, and it is
unpickled with ``torch.load(weights_only=True)`` (torch's restricted unpickler: no class is constructed and
no function is called but its tensor rebuilders), then every value in it must be one of
:data:`CHECKPOINT_TYPES`. Anything else is a one-line :class:`CheckpointError` naming the file. So a run
directory copied from elsewhere cannot execute code when resumed; the collaborators' ``state_dict`` methods
give plain data for this (``lowbw.compress.base.State.state_dict``).
"""

from __future__ import annotations

import collections
import contextlib
import hashlib
import io
import json
import pickle
import re
from pathlib import Path
from typing import Any

import torch

from lowbw.runs.io import atomic_write, atomic_write_json

__all__ = ["fingerprint", "save_part", "write_marker", "read_marker", "load_part", "verify", "prune",
           "RUN_ONLY_KEYS", "CHECKPOINT_TYPES", "CheckpointError"]

# keys that may change between a run and its resumption without changing its numbers
RUN_ONLY_KEYS = ("progress", "max_wall_s", "checkpoint_every", "master_port", "threads", "name", "peer_timeout_s")


#: the only types a checkpoint may hold (containers and leaves; exact types, but tensors may be subclasses);
#: torch.load(weights_only=True) admits a few more (torch.Size, dtypes, devices...), which lowbw never saves
#: and so refuses
CHECKPOINT_TYPES = (dict, collections.OrderedDict, list, tuple, str, bytes, int, float, bool, type(None),
                    torch.Tensor)


class CheckpointError(RuntimeError):
    """A checkpoint file that is not what lowbw wrote (changed since, or holding something other than data)."""


def fingerprint(cfg_dict: dict[str, Any]) -> str:
    d = {k: v for k, v in cfg_dict.items() if k not in RUN_ONLY_KEYS}
    return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:16]


def _dir(out: str | Path) -> Path:
    return Path(out) / "checkpoint"


def part_name(step: int, rank: int) -> str:
    return f"step-{step:08d}-rank{rank}.pt"


def _sha_path(p: Path) -> Path:
    return p.with_name(p.name + ".sha256")


def save_part(out: str | Path, step: int, rank: int, state: dict[str, Any]) -> Path:
    """Atomically write one process's state (temp file + fsync + rename), then its SHA-256 beside it.
    Raises CheckpointError (before writing) if ``state`` holds a value not in CHECKPOINT_TYPES."""
    p = _dir(out) / part_name(step, rank)
    odd = _odd_type(state)
    if odd:  # a collaborator's state_dict must give plain data, or resuming would refuse the file
        raise CheckpointError(f"{p} would hold a {odd}, not checkpoint data (tensors, numbers, strings, lists, "
                              "dicts): not written")
    buf = io.BytesIO()
    torch.save(state, buf)
    data = buf.getvalue()
    atomic_write(p, lambda f: f.write(data))
    atomic_write(_sha_path(p), lambda f: f.write(f"{hashlib.sha256(data).hexdigest()}  {p.name}\n".encode()))
    return p


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


def _refuse(p: Path, why: str) -> CheckpointError:
    return CheckpointError(f"{p} {why}: refused (a checkpoint is loaded as data only); delete {p.parent} "
                           f"(or use --force) to start over")


def _check_hash(p: Path, data: bytes) -> None:
    """1. The SHA-256 recorded beside ``p`` must be there and match ``data`` (the file's bytes)."""
    sp = _sha_path(p)
    try:
        want = sp.read_text().split()[0]
    except (OSError, IndexError):
        raise _refuse(p, f"has no SHA-256 recorded beside it ({sp.name} missing or empty)") from None
    got = hashlib.sha256(data).hexdigest()
    if got != want:
        raise _refuse(p, f"does not match the SHA-256 in {sp.name} ({got[:12]}... vs {want[:12]}...): changed "
                         "since it was written")


def _odd_type(obj: Any) -> str | None:
    """The first type in ``obj`` (recursively) that is not in CHECKPOINT_TYPES, as ``module.name``, or None."""
    stack = [obj]
    while stack:
        x = stack.pop()
        if type(x) not in CHECKPOINT_TYPES and not isinstance(x, torch.Tensor):
            return f"{type(x).__module__}.{type(x).__qualname__}"
        if isinstance(x, dict):
            stack.extend(x.keys())
            stack.extend(x.values())
        elif isinstance(x, (list, tuple)):
            stack.extend(x)
    return None


def _load(p: Path, map_location, mmap: bool = False) -> Any:
    """Steps 1-3 on one file: its hash, torch's weights-only unpickler, the types of what it holds."""
    try:
        data = p.read_bytes()
    except OSError as e:
        raise _refuse(p, f"cannot be read ({e.strerror})") from None
    _check_hash(p, data)
    try:  # 2. weights_only: no global but torch's tensor rebuilders and plain containers is ever looked up
        obj = torch.load(p if mmap else io.BytesIO(data), map_location=map_location, weights_only=True,
                         mmap=mmap)
    except pickle.UnpicklingError as e:
        m = re.search(r"GLOBAL ([\w.]+)", str(e))
        what = f"would call {m.group(1)}" if m else "is a pickle with other operations"
        raise _refuse(p, f"{what}, not checkpoint data (tensors, numbers, strings, lists, dicts)") from None
    except (RuntimeError, EOFError, ValueError) as e:
        raise _refuse(p, f"is not a torch checkpoint ({' '.join(str(e).split())[:120]})") from None
    odd = _odd_type(obj)  # 3. only what lowbw saves
    if odd:
        raise _refuse(p, f"holds a {odd}, not checkpoint data (tensors, numbers, strings, lists, dicts)")
    return obj


def load_part(out: str | Path, step: int, rank: int, map_location="cpu") -> dict[str, Any]:
    """One process's state, loaded as data (see the module docstring); CheckpointError if it is not."""
    return _load(_dir(out) / part_name(step, rank), map_location)


def verify(out: str | Path) -> dict[str, Any] | None:
    """Check every file the marker names as :func:`load_part` would (tensors memory-mapped, not copied), before
    any work; returns the marker (None: no checkpoint). Raises CheckpointError naming the first bad file."""
    m = read_marker(out)
    for f in (m or {}).get("files", []):
        _load(_dir(out) / f, "cpu", mmap=True)
    return m


def prune(out: str | Path, keep_step: int) -> None:
    """Delete step files other than ``keep_step``'s."""
    d = _dir(out)
    if not d.exists():
        return
    tag = f"step-{keep_step:08d}-"
    for p in [*d.glob("step-*.pt"), *d.glob("step-*.pt.sha256")]:
        if not p.name.startswith(tag):
            with contextlib.suppress(FileNotFoundError):
                p.unlink()
