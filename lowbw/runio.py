"""Run-directory I/O shared by every layer: atomic JSON writes, JSONL metrics, provenance.

A run directory is the contract between layers (see README): ``config.json``, ``metrics.jsonl`` and
``summary.json`` (written last, atomically: its presence means the run is complete).
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import socket
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

__all__ = ["atomic_write", "atomic_write_json", "atomic_write_text", "append_jsonl", "read_jsonl", "provenance",
           "git_commit"]


def atomic_write(path: str | os.PathLike, write: Callable[[BinaryIO], None]) -> Path:
    """Write ``path`` through ``write(file)`` into a temp file in the same directory, fsync, ``os.replace``.

    A reader never sees a half-written file, and a crash leaves any previous version intact.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)  # mkstemp makes 0600; results are meant to be read by others
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    return path


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    """Atomically write UTF-8 ``text`` to ``path`` (see ``atomic_write``)."""
    return atomic_write(path, lambda f: f.write(text.encode("utf-8")))


def _default(o: Any) -> Any:
    if hasattr(o, "item"):  # numpy / torch scalars
        return o.item()
    if hasattr(o, "tolist"):
        return o.tolist()
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def atomic_write_json(path: str | os.PathLike, obj: Any) -> Path:
    """Atomically write ``obj`` as indented, key-sorted JSON (stable diffs)."""
    return atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True, default=_default) + "\n")


def append_jsonl(path: str | os.PathLike, record: dict[str, Any]) -> None:
    """Append one JSON line and flush it to disk (a crash loses at most the line being written)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(record, sort_keys=True, default=_default) + "\n")
        f.flush()


def read_jsonl(path: str | os.PathLike) -> list[dict[str, Any]]:
    """Read a JSONL file; a truncated last line (crash mid-write) is dropped, any other bad line raises."""
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    out: list[dict[str, Any]] = []
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError as e:
            if i == len(lines) - 1:
                break
            raise ValueError(f"{path}: line {i + 1} is not valid JSON: {e}") from e
    return out


def git_commit(repo: str | os.PathLike | None = None) -> str:
    """The lowbw checkout's commit (``<sha>`` or ``<sha>-dirty``), or ``"unknown"`` outside git."""
    repo = Path(repo) if repo else Path(__file__).resolve().parent.parent
    try:
        sha = subprocess.run(
            ["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10
        ).stdout.strip()
        if not sha:
            return "unknown"
        dirty = subprocess.run(
            ["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True, text=True, timeout=10,
        ).stdout.strip()
        return sha + ("-dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def provenance() -> dict[str, Any]:
    """Versions, host and commit to store with every result (the machine it ran on)."""
    import numpy
    import torch

    from lowbw import __version__

    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "lowbw_version": __version__,
        "git_commit": git_commit(),
        "torch_version": torch.__version__,
        "numpy_version": numpy.__version__,
        "python_version": platform.python_version(),
        "host": socket.gethostname(),
        "platform": platform.platform(),
        "cpu": cpu,
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
    }
