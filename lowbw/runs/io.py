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
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, BinaryIO

from lowbw import __version__

__all__ = ["atomic_write", "atomic_write_json", "atomic_write_text", "append_jsonl", "read_jsonl", "provenance",
           "git_commit", "metrics_digest", "seal_summary", "check_steps", "lock_holders", "set_parent_death_signal"]


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
    """The lowbw checkout's commit (``<sha>`` or ``<sha>-dirty``), or ``"unknown"`` outside git.

    ``$LOWBW_GIT_COMMIT`` names it for a copy of the tree without its ``.git`` (e.g. sent to a GPU machine)."""
    if os.environ.get("LOWBW_GIT_COMMIT") and repo is None:
        return os.environ["LOWBW_GIT_COMMIT"]
    repo = Path(repo) if repo else Path(__file__).resolve().parents[2]
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
    import torch  # lazy: keeps `lowbw --help` free of torch

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
        "cuda_version": torch.version.cuda,  # the CUDA the torch build targets (None: a CPU build)
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
    }


# ------------------------------------------------------------------------------------ completeness, locks
def metrics_digest(path: str | os.PathLike) -> dict[str, Any]:
    """``{"metrics_lines": n, "metrics_sha256": hex}`` of a metrics.jsonl (n = non-empty lines).

    summary.json records it when the run completes, so a loader can tell a truncated or emptied file from
    a complete one (see :func:`check_metrics`)."""
    import hashlib

    data = Path(path).read_bytes() if Path(path).exists() else b""
    n = sum(1 for line in data.split(b"\n") if line.strip())
    return {"metrics_lines": n, "metrics_sha256": hashlib.sha256(data).hexdigest()}


def seal_summary(out: str | os.PathLike) -> dict[str, Any]:
    """Add :func:`metrics_digest` of ``out/metrics.jsonl`` to ``out/summary.json`` (atomically); returns it."""
    out = Path(out)
    summ = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    summ.update(metrics_digest(out / "metrics.jsonl"))
    atomic_write_json(out / "summary.json", summ)
    return summ


def check_steps(lines: list[dict[str, Any]], path: str | os.PathLike) -> None:
    """Raise ValueError naming ``path`` and the line if ``step`` goes backwards or repeats.

    A step may appear twice only as a training line followed by the evaluation-only line of the run's end
    (``loss`` is None on it); anything else is two runs interleaved or a line written twice."""
    prev: dict[str, Any] | None = None
    for i, rec in enumerate(lines):
        step = rec.get("step")
        if prev is not None and isinstance(step, int | float):
            ps = prev.get("step")
            if step < ps:
                raise ValueError(f"{path}: line {i + 1} has step {step} after step {ps} (two runs interleaved? "
                                 f"delete the run directory and rerun it)")
            if step == ps and (rec.get("loss") is not None or prev.get("loss") is None):
                raise ValueError(f"{path}: line {i + 1} repeats step {step} (duplicated lines; delete the run "
                                 f"directory and rerun it)")
        prev = rec


def lock_holders(path: str | os.PathLike) -> list[int]:
    """PIDs holding a flock on ``path`` (from /proc/locks; [] if none or unknown)."""
    try:
        st = os.stat(path)
        text = Path("/proc/locks").read_text()
    except OSError:
        return []
    want = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    pids = []
    for line in text.splitlines():
        parts = line.split()
        # "1: FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF" (blocked waiters have "->" after the number)
        if len(parts) >= 6 and "FLOCK" in parts:
            k = parts.index("FLOCK")
            if len(parts) > k + 4 and parts[k + 4] == want:
                with contextlib.suppress(ValueError):
                    pids.append(int(parts[k + 3]))
    return sorted(set(pids))


def set_parent_death_signal(sig: int = 9, parent_pid: int | None = None) -> None:
    """Ask Linux to send ``sig`` to this process when its parent dies (prctl PR_SET_PDEATHSIG).

    If ``parent_pid`` is given and the parent is already gone (we were re-parented before the call), exit
    at once: a worker must never train without the launcher that holds its run directory."""
    import ctypes
    import sys

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, sig, 0, 0, 0)  # PR_SET_PDEATHSIG = 1
    if parent_pid is not None and os.getppid() != parent_pid:
        sys.exit(f"lowbw: parent {parent_pid} is gone; exiting")
