"""A small on-disk cache of what the advisor derives from code alone (payload sizes per compressor and shape,
a model's multiply-adds), so that advice after the first is quick. An entry holds while the sources it was
derived from are byte for byte unchanged: each cache file records a digest of them, and a mismatch empties
it. ``$LOWBW_CACHE_DIR`` (default ``~/.cache/lowbw``) holds ``advise_<name>.json``.
"""

from __future__ import annotations

import hashlib
import json
import os
from functools import cache
from pathlib import Path
from typing import Any

from lowbw.runs.io import atomic_write_text

__all__ = ["load_cache", "save_cache"]


def _file(name: str) -> Path:
    return Path(os.environ.get("LOWBW_CACHE_DIR", Path.home() / ".cache" / "lowbw")) / f"advise_{name}.json"


@cache
def _digest(source: Path) -> str:
    """sha256 (16 hex digits) of the Python files at ``source`` (a file or a directory's ``*.py``)."""
    h = hashlib.sha256()
    for f in sorted(source.glob("*.py")) if source.is_dir() else [source]:
        h.update(f.read_bytes())
    return h.hexdigest()[:16]


_LOADED: dict[tuple[str, str], dict[str, Any]] = {}  # read once per process: ranking looks entries up per method


def load_cache(name: str, source: Path) -> dict[str, Any]:
    """The entries of cache ``name`` if derived from ``source`` as it is now, else an empty dict. The same dict
    is returned on every call in a process (the file is read once); :func:`save_cache` writes it back."""
    key = (name, _digest(source))
    if key not in _LOADED:
        try:
            d = json.loads(_file(name).read_text())
        except (OSError, ValueError):
            d = {}
        _LOADED[key] = d.get("entries", {}) if d.get("digest") == key[1] else {}
    return _LOADED[key]


def save_cache(name: str, source: Path, entries: dict[str, Any]) -> None:
    """Write cache ``name`` (a read-only home is not an error: the next advice is only slower)."""
    try:
        _file(name).parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(_file(name), json.dumps({"digest": _digest(source), "entries": entries}))
    except OSError:
        pass
