"""The workflow's grid, checked once per (config, code): every run directory with its resolved run config.

Checking a grid (the config schema, then every run's RunConfig with its cross-key rules, traces and clock
calibration: :func:`lowbw.workflow.grid.validate_grid`) imports torch and parses every run's trace, seconds of
work that the Snakefile would repeat on every invocation, a no-op rerun and a dry run included. The result
only depends on the config, the files it names and lowbw's own sources, so it is kept under
``runs/.cache/grid/<sha256 of all three>.json``: the same check with the same inputs is not run twice, and any
change to one of them (an edited config, a recalibrated clock, an edited rule in lowbw) runs it again.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from lowbw.workflow.grid import encode, expand, run_config

__all__ = ["checked_grid", "grid_key", "KEEP"]

PACKAGE = Path(__file__).resolve().parents[1]  # lowbw/: its sources are part of the key
#: how many checked grids are kept (switching between --configfile grids keeps each one's entry)
KEEP = 8


def _named_files(value: Any) -> Iterable[str]:
    """Every string in the config that names an existing file (the clock calibration, a trace path ...)."""
    if isinstance(value, dict):
        for v in value.values():
            yield from _named_files(v)
    elif isinstance(value, list):
        for v in value:
            yield from _named_files(v)
    elif isinstance(value, str) and len(value) < 4096 and os.path.isfile(value):
        yield value


def grid_key(config: dict[str, Any], files: Iterable[str | Path] = (), package: Path = PACKAGE) -> str:
    """sha256 of the config, the contents of ``files`` and of every file the config names, and lowbw's
    sources (every file under ``package`` but byte code)."""
    h = hashlib.sha256()
    h.update(json.dumps(config, sort_keys=True, default=repr).encode())
    for f in [*files, *sorted(set(_named_files(config)))]:
        h.update(f"\0file {f}\0".encode())
        h.update(Path(f).read_bytes())
    for p in sorted(package.rglob("*")):
        if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc":
            h.update(f"\0src {p.relative_to(package)}\0".encode())
            h.update(p.read_bytes())
    return h.hexdigest()


def _resolve(config: dict[str, Any], root: str) -> dict[str, dict[str, Any]]:
    out = {}
    for name, exp in (config.get("experiments") or {}).items():
        for params in expand(exp, config["seeds"]):
            out[f"{root}/{name}/{encode(params)}"] = run_config(config, name, params)
    return out


def checked_grid(config: dict[str, Any], check: Callable[[dict[str, Any]], Any], files: Iterable[str | Path] = (),
                 cache_dir: str | Path = "runs/.cache/grid", root: str = "runs") -> dict[str, dict[str, Any]]:
    """``{run directory: resolved run config}`` of every training run of ``config``, in the grid's order.

    ``check(config)`` validates the config in place (and may fill in the schema's defaults); it runs only when
    no earlier call with the same :func:`grid_key` (``files``: what else the check reads, e.g. the schema)
    passed. On a cached answer ``config`` is replaced in place by the checked config that call left behind, so
    the caller sees the same config either way. A failing check raises and caches nothing.
    """
    files = [str(f) for f in files]
    key = grid_key(config, files)
    path = Path(cache_dir) / f"{key}.json"
    try:
        cached = json.loads(path.read_text())
        config.clear()
        config.update(cached["config"])
        return cached["runs"]
    except (OSError, ValueError, KeyError):
        pass
    check(config)
    text = json.dumps({"config": config, "runs": _resolve(config, root)})
    checked = json.loads(text)  # what a cached answer gives (lists for tuples ...), so both answers are alike
    config.clear()
    config.update(checked["config"])
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(text)
    os.replace(tmp, path)
    for old in sorted(path.parent.glob("*.json"), key=lambda p: p.stat().st_mtime, reverse=True)[KEEP:]:
        old.unlink(missing_ok=True)
    return checked["runs"]
