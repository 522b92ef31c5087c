"""Shared pytest fixtures. Tests never touch the user's data cache: each gets its own LOWBW_DATA_DIR."""

from __future__ import annotations

import os
import shutil
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


def _netns_missing() -> list[str]:
    """What the root testbed tests need and this machine lacks."""
    missing = [] if os.name == "posix" and os.geteuid() == 0 else ["root"]
    return missing + [f"{tool} (iproute2)" for tool in ("ip", "tc") if not shutil.which(tool)]


NETNS_MISSING = _netns_missing()
# root tests on network namespaces (the testbed), and those that also need TUN/TAP devices (the link emulator)
netns = pytest.mark.skipif(bool(NETNS_MISSING), reason="needs " + ", ".join(NETNS_MISSING or ["nothing"]))
netns_tun = pytest.mark.skipif(bool(NETNS_MISSING) or not os.path.exists("/dev/net/tun"),
                               reason="needs " + ", ".join(NETNS_MISSING + ["/dev/net/tun"]))
