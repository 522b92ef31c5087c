"""Shared pytest fixtures. Tests never touch the user's data cache: each gets its own LOWBW_DATA_DIR."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


@pytest.fixture
def data_cache(tmp_path, monkeypatch):
    """An empty, private dataset cache directory."""
    d = tmp_path / "cache"
    monkeypatch.setenv("LOWBW_DATA_DIR", str(d))
    return d


def real_mirror() -> str | None:
    """The real dataset mirror (CI sets LOWBW_DATA_MIRROR; locally ../shared/data next to the checkout)."""
    m = os.environ.get("LOWBW_DATA_MIRROR")
    if m and Path(m).is_dir():
        return m
    return str(SHARED_DATA) if SHARED_DATA.is_dir() else None
