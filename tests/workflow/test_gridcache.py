"""lowbw.workflow.gridcache: the workflow's grid check runs once per (config, named files, code) and is otherwise
reused."""

import json

import pytest

from lowbw.workflow.gridcache import checked_grid, grid_key


def _config(tmp_path, lr=0.1):
    calib = tmp_path / "calib.json"
    if not calib.exists():
        calib.write_text("{}")
    return {"seeds": [0, 1], "named": str(calib),
            "experiments": {"e4_x": {"base": {"model": "mlp"}, "grid": {"lr": [lr, 0.2]}}}}


class Check:
    """A stand-in for the schema + validate_grid check: counts its calls and fills a default as the schema does."""

    def __init__(self, fail=False):
        self.calls = 0
        self.fail = fail

    def __call__(self, cfg):
        self.calls += 1
        if self.fail:
            raise ValueError("experiment e4_x run lr~0.1/seed~0: lr must be > 0")
        cfg.setdefault("threads_per_job", 1)


def test_second_call_reuses_the_check_and_gives_the_same_answer(tmp_path):
    cache = tmp_path / "cache"
    check = Check()
    cfg1 = _config(tmp_path)
    runs1 = checked_grid(cfg1, check, cache_dir=cache)
    assert check.calls == 1
    assert list(runs1) == ["runs/e4_x/lr~0.1/seed~0", "runs/e4_x/lr~0.1/seed~1",
                           "runs/e4_x/lr~0.2/seed~0", "runs/e4_x/lr~0.2/seed~1"]
    assert runs1["runs/e4_x/lr~0.2/seed~1"] == {"model": "mlp", "lr": 0.2, "seed": 1}
    cfg2 = _config(tmp_path)
    runs2 = checked_grid(cfg2, check, cache_dir=cache)
    assert check.calls == 1  # not checked again
    assert runs2 == runs1 and list(runs2) == list(runs1)  # same runs, same order
    assert cfg2 == cfg1 and cfg2["threads_per_job"] == 1  # the checked config, defaults included
    assert list(cfg2["experiments"]) == list(cfg1["experiments"])


def test_a_changed_config_or_named_file_is_checked_again(tmp_path):
    cache = tmp_path / "cache"
    check = Check()
    checked_grid(_config(tmp_path), check, cache_dir=cache)
    runs = checked_grid(_config(tmp_path, lr=0.3), check, cache_dir=cache)
    assert check.calls == 2 and "runs/e4_x/lr~0.3/seed~0" in runs
    (tmp_path / "calib.json").write_text('{"entries": {}}')  # a recalibrated clock: same config, new contents
    checked_grid(_config(tmp_path, lr=0.3), check, cache_dir=cache)
    assert check.calls == 3
    extra = tmp_path / "schema.yaml"
    extra.write_text("type: object\n")
    checked_grid(_config(tmp_path, lr=0.3), check, files=[extra], cache_dir=cache)
    assert check.calls == 4
    extra.write_text("type: object\nrequired: [seeds]\n")
    checked_grid(_config(tmp_path, lr=0.3), check, files=[extra], cache_dir=cache)
    assert check.calls == 5


def test_a_failing_check_raises_every_time_and_caches_nothing(tmp_path):
    cache = tmp_path / "cache"
    for _ in range(2):
        with pytest.raises(ValueError, match="lr~0.1/seed~0"):
            checked_grid(_config(tmp_path), Check(fail=True), cache_dir=cache)
    assert not cache.exists() or not list(cache.glob("*.json"))


def test_the_key_covers_lowbw_sources(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "rules.py").write_text("MAX = 1\n")
    cfg = {"seeds": [0]}
    k1 = grid_key(cfg, package=pkg)
    (pkg / "__pycache__").mkdir()
    (pkg / "__pycache__" / "rules.cpython-311.pyc").write_bytes(b"\0")
    assert grid_key(cfg, package=pkg) == k1  # byte code is not source
    (pkg / "rules.py").write_text("MAX = 2\n")
    assert grid_key(cfg, package=pkg) != k1


def test_a_corrupt_cache_entry_is_checked_again(tmp_path):
    cache = tmp_path / "cache"
    check = Check()
    checked_grid(_config(tmp_path), check, cache_dir=cache)
    (entry,) = cache.glob("*.json")
    entry.write_text("{not json")
    runs = checked_grid(_config(tmp_path), check, cache_dir=cache)
    assert check.calls == 2 and len(runs) == 4
    assert json.loads(entry.read_text())["runs"] == runs
