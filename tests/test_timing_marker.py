"""The ``timing`` marker (tests/conftest.py): wall-clock bounds are skipped in the default run, naming how to run
them, and run with ``--timing`` or LOWBW_TIMING_TESTS=1."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from tests import conftest

ROOT = Path(__file__).resolve().parents[1]


class _Config:
    def __init__(self, timing: bool):
        self.timing = timing

    def getoption(self, name):
        assert name == "--timing"
        return self.timing


class _Item:
    def __init__(self, *markers: str):
        self.markers = [getattr(pytest.mark, m) for m in markers]

    def get_closest_marker(self, name):
        return next((m for m in self.markers if m.name == name), None)

    def add_marker(self, mark):
        self.markers.append(mark)


def _skipped(item: _Item) -> str | None:
    skip = item.get_closest_marker("skip")
    return None if skip is None else skip.kwargs["reason"]


def test_timing_tests_are_skipped_by_default_naming_how_to_run_them(monkeypatch):
    monkeypatch.delenv("LOWBW_TIMING_TESTS", raising=False)
    timed, plain = _Item("timing", "netns"), _Item("netns")
    conftest.pytest_collection_modifyitems(_Config(False), [timed, plain])
    assert _skipped(plain) is None
    reason = _skipped(timed)
    assert reason is not None and "--timing" in reason and "LOWBW_TIMING_TESTS=1" in reason


@pytest.mark.parametrize("flag, env", [(True, None), (False, "1")])
def test_timing_tests_run_with_the_flag_or_the_variable(monkeypatch, flag, env):
    monkeypatch.delenv("LOWBW_TIMING_TESTS", raising=False)
    if env is not None:
        monkeypatch.setenv("LOWBW_TIMING_TESTS", env)
    timed = _Item("timing")
    conftest.pytest_collection_modifyitems(_Config(flag), [timed])
    assert _skipped(timed) is None


def test_timing_marker_is_registered():
    markers = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]["markers"]
    assert any(m.startswith("timing:") for m in markers)
