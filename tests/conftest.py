"""Shared pytest fixtures. Tests never touch the user's data cache: each gets its own LOWBW_DATA_DIR."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"

# Tests marked ``timing`` assert a wall-clock bound (a speed claim) that a busy machine can break: they are out
# of the default run (``make test``, CI) and run with ``pytest --timing`` or LOWBW_TIMING_TESTS=1.
TIMING_SKIP = "a wall-clock bound a busy machine can break; run it with pytest --timing or LOWBW_TIMING_TESTS=1"


def pytest_addoption(parser):
    parser.addoption("--timing", action="store_true", default=False,
                     help="also run the tests marked timing (wall-clock bounds; flaky on a busy machine)")


def timing_enabled(config) -> bool:
    """Whether this run includes the ``timing`` tests (``--timing`` or LOWBW_TIMING_TESTS=1)."""
    return bool(config.getoption("--timing")) or os.environ.get("LOWBW_TIMING_TESTS") == "1"


def pytest_collection_modifyitems(config, items):
    if timing_enabled(config):
        return
    skip = pytest.mark.skip(reason=TIMING_SKIP)
    for item in items:
        if item.get_closest_marker("timing") is not None:
            item.add_marker(skip)


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
