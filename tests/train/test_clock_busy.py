"""The clock table's busy entries (lowbw.train.clock_table.busy_keys) and the report's refusal of them where
the config asks (report: clock_idle_only; lowbw.report.build.check_clock)."""

from __future__ import annotations

import importlib
import json

import pytest

from lowbw.train.clock_table import busy_keys

build = importlib.import_module("lowbw.report.build")  # the module (lowbw.report exports its function build)


def _table(path):
    path.write_text(json.dumps({
        "conditions": {"busy": True, "date": "2026-11-24T00:00:00+00:00"},
        "entries": {"a": {}, "b": {}, "c": {}},
        "added": [{"keys": ["b", "c"], "conditions": {"busy": True, "date": "2026-11-25T00:00:00+00:00"}},
                  {"keys": ["c", "gone"], "conditions": {"busy": False, "date": "2026-11-27T00:00:00+00:00"}}]}))
    return path


def test_the_latest_measurement_of_each_key_decides(tmp_path):
    assert busy_keys(_table(tmp_path / "clock.json")) == {"a": "2026-11-24", "b": "2026-11-25"}


def test_the_report_refuses_busy_entries_the_grid_uses_only_when_asked(tmp_path, monkeypatch):
    import lowbw.bench.clock as bc

    path = str(_table(tmp_path / "clock.json"))
    monkeypatch.setattr(bc, "grid_configs", lambda config: {"b": {}, "c": {}})
    cfg = {"clock_calibration": path, "report": {}}
    build.check_clock(cfg)  # not asked: no refusal
    with pytest.raises(ValueError, match="1 clock entries") as e:
        build.check_clock({**cfg, "report": {"clock_idle_only": True}})
    assert "\n" not in str(e.value)
    monkeypatch.setattr(bc, "grid_configs", lambda config: {"c": {}})
    build.check_clock({**cfg, "report": {"clock_idle_only": True}})  # c was remeasured idle
