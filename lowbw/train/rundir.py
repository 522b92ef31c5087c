"""A run directory as the launcher and its workers share it: the lock (``DIR/.lock``), what a run into it
would do (new, resume, complete, or refused: another config's run), and sealing it when the run is done.

Invariants: while a run lives, its launcher and every worker hold ``DIR/.lock`` (the launcher exclusively
while it checks and prepares the directory, then all shared); a complete run's ``summary.json`` is written
last (:func:`lowbw.runs.io.seal_summary`); keys in ``RUN_ONLY_KEYS`` never make two configs differ.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Any

from lowbw.runs.io import lock_holders, seal_summary
from lowbw.train.config import RunConfig
from lowbw.train.userfiles import changed_files

__all__ = ["RunDirError", "RunLock", "config_diff", "check_out", "prepare_out", "finish"]


class RunDirError(RuntimeError):
    """The run directory cannot be used as asked (locked, holds another config); the message says why."""


class RunLock:
    """``DIR/.lock`` (flock): exclusive while the launcher checks and prepares the directory, then shared
    with the workers (each takes a shared lock too), so no second run starts while any of them lives."""

    def __init__(self, out: Path):
        self.path = out / ".lock"
        self._f = None

    def acquire(self, shared: bool = False) -> RunLock:
        import fcntl

        self._f = open(self.path, "a")  # noqa: SIM115 (held for the duration of the run)
        try:
            fcntl.flock(self._f, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
        except BlockingIOError:
            self.release()
            pids = [p for p in lock_holders(self.path) if p != os.getpid()]
            who = f"process(es) {', '.join(map(str, pids))}" if pids else "another process"
            raise RunDirError(f"{self.path.parent} is being written by {who} (they hold {self.path}; "
                              f"if none is a live run, `python -m lowbw doctor` removes them)") from None
        return self

    def share(self) -> None:
        """Downgrade to a shared lock so the workers can take theirs."""
        import fcntl

        fcntl.flock(self._f, fcntl.LOCK_SH | fcntl.LOCK_NB)

    def release(self) -> None:
        if self._f is not None:
            self._f.close()
            self._f = None


def config_diff(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """Keys whose values differ between two run configs, ignoring keys that do not change the numbers."""
    from lowbw.train.checkpoint import RUN_ONLY_KEYS  # lazy: keeps `lowbw --help` free of torch

    skip = set(RUN_ONLY_KEYS)
    # fill defaults on both sides (a key added to RunConfig since the old run is not a difference); an old
    # config that no longer validates is compared as written
    with contextlib.suppress(Exception):
        old = RunConfig.from_dict({k: v for k, v in old.items() if k in new}, check_registries=False).to_dict()
    return sorted(k for k in set(old) | set(new) if k not in skip and old.get(k) != new.get(k))


def _old_config(out: Path) -> dict[str, Any] | None:
    try:
        c = json.loads((out / "config.json").read_text())
    except (OSError, ValueError):
        return None
    return c.get("config", c) if isinstance(c, dict) else None


def _changed_files(out: Path, cfg: RunConfig) -> list[str]:
    """The user files (``model``/``dataset: my.py:build``) changed since the run in ``out`` recorded them."""
    try:
        c = json.loads((out / "config.json").read_text())
        recorded = c["provenance"].get("user_files")
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return []
    return changed_files(recorded, cfg)


def _describe_diff(out: Path, keys: list[str], old: dict[str, Any], new: dict[str, Any]) -> str:
    shown = ", ".join(f"{k}: {old.get(k)!r} -> {new.get(k)!r}" for k in keys[:6])
    return shown + (f" (+{len(keys) - 6} more)" if len(keys) > 6 else "")


def check_out(cfg: RunConfig, out: Path, overwrite: bool) -> str:
    """What a run into ``out`` would do: ``"new"``, ``"resume"`` (a matching checkpoint), ``"complete"``
    (same config, summary.json exists) or ``"redo"`` (overwrite). Raises RunDirError when the directory
    holds a run of another config (naming the differing keys), or a checkpoint that does not load as data
    (changed since written, or holding more than data), and ``overwrite`` is false."""
    complete = (out / "summary.json").exists()
    if overwrite:
        return "redo"
    old = _old_config(out)
    new = cfg.to_dict()
    changed = _changed_files(out, cfg)
    if changed and (complete or (out / "checkpoint").exists()):
        raise RunDirError(f"{out} holds a run made with other user code: {'; '.join(changed)}; use another "
                          f"--out, or --force to start over")
    if complete:
        keys = config_diff(old, new) if old is not None else []
        if keys:
            raise RunDirError(f"{out} holds a complete run of another config ({_describe_diff(out, keys, old, new)}); "
                              f"use another --out, or --force to replace it")
        return "complete"
    marker = out / "checkpoint" / "latest.json"
    if marker.exists():
        from lowbw.train.checkpoint import fingerprint  # lazy: keeps `lowbw --help` free of torch

        try:
            fp = json.loads(marker.read_text())["fingerprint"]
        except (OSError, ValueError, KeyError):
            raise RunDirError(f"{marker} is corrupt; delete {marker.parent} (or use --force) to start over") from None
        if fp != fingerprint(new):
            keys = config_diff(old, new) if old is not None else []
            if keys:
                what = _describe_diff(out, keys, old, new)
            else:
                what = "config.json is missing" if old is None else "no key differs: another version of lowbw"
            raise RunDirError(f"{out}/checkpoint was written by another config ({what}); use the same config to "
                              f"resume, or --force to start over")
        from lowbw.train.checkpoint import CheckpointError, verify  # lazy: keeps `lowbw --help` free of torch

        try:  # its hashes and contents, before any work: a checkpoint is loaded as data only
            verify(out)
        except (CheckpointError, FileNotFoundError) as e:
            raise RunDirError(str(e)) from None
        return "resume"
    return "new"


def prepare_out(out: Path, overwrite: bool) -> None:
    """Clear what a redo (``overwrite``) must not find: summary.json and the checkpoint."""
    if overwrite:
        import shutil

        for name in ("summary.json",):
            with contextlib.suppress(FileNotFoundError):
                (out / name).unlink()
        shutil.rmtree(out / "checkpoint", ignore_errors=True)


def finish(out: Path, keep_checkpoint: bool = False) -> dict[str, Any]:
    """Seal summary.json with the metrics digest and drop the checkpoint (unless kept): the run is done."""
    import shutil

    summ = seal_summary(out)
    if not keep_checkpoint:
        shutil.rmtree(out / "checkpoint", ignore_errors=True)
    return summ
