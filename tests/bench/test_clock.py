"""bench clock: the virtual clock's calibration covers the language model's runs (shakespeare / gpt-*)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

from lowbw.bench import clock
from lowbw.workflow.grid import run_config

REPO = Path(__file__).resolve().parents[2]
MIRROR = Path(os.environ.get("LOWBW_DATA_MIRROR", REPO.parent / "shared" / "data"))
needs_corpus = pytest.mark.skipif(not (MIRROR / "tinyshakespeare.txt").is_file(),
                                  reason=f"no tinyshakespeare.txt in the data mirror {MIRROR}")

LM = {"dataset": "shakespeare", "model": "gpt-small", "workers": 2, "batch_size": 24, "optimizer": "adamw",
      "lr": 1e-3, "targets": ["val_loss<=1.9"]}


def test_image_keys_are_unchanged():
    # config/clock.json's entries are looked up by these strings: a new field would orphan every one of them
    key = clock.clock_key({"dataset": "mnist", "model": "mlp", "workers": 2, "batch_size": 64})
    assert key == ('{"compressor":"none","compressor_args":{},"dataset":"mnist","error_feedback":"auto",'
                   '"granularity":"auto","local_batch":32,"model":"mlp","optimizer":"sgd"}')


def test_text_keys_hold_the_resolved_context_length():
    own = json.loads(clock.clock_key(LM))
    assert own["block_size"] == 64 and own["local_batch"] == 12 and own["dataset"] == "shakespeare"
    assert clock.clock_key({**LM, "block_size": 64}) == clock.clock_key(LM)  # 0 means the model's own: 64
    assert clock.clock_key({**LM, "block_size": 32}) != clock.clock_key(LM)


def _config(tmp_path: Path) -> Path:
    cfg = {"seeds": [0], "clock_calibration": str(tmp_path / "clock.json"),
           "train_defaults": {**LM, "model": "gpt-tiny", "clock": "model", "steps": 4, "test_limit": 2,
                              "progress": False},
           "methods": {"dense": {"compressor": "none"},
                       "topk1": {"compressor": "topk", "compressor_args": {"ratio": 0.01}, "error_feedback": "on"}},
           "experiments": {"lm": {"base": {}, "grid": {"method": ["dense", "topk1"]}}}}
    p = tmp_path / "lm.yaml"
    p.write_text(yaml.safe_dump(cfg))
    return p


@needs_corpus
def test_calibrates_the_lm_grid_and_runs_find_their_entries(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("LOWBW_DATA_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("LOWBW_DATA_MIRROR", str(MIRROR))
    conf, out = _config(tmp_path), tmp_path / "clock.json"
    assert clock.main(["--config", str(conf), "--out", str(out), "--steps", "1", "--reps", "1"]) == 0
    doc = json.loads(out.read_text())
    assert len(doc["entries"]) == 2 and "load_before" in doc["conditions"]
    for e in doc["entries"].values():
        assert e["model"] == "gpt-tiny" and e["block_size"] == 32 and e["clock_sample_s"] > 0
    topk = next(e for e in doc["entries"].values() if e["compressor"] == "topk")
    assert topk["clock_compress_mbyte_s"] > 0
    # the workflow's runs get their clock from the table
    config = yaml.safe_load(conf.read_text())
    for method in ("dense", "topk1"):
        run = run_config(config, "lm", {"method": method, "seed": 0})
        key = clock.clock_key(run)
        assert run["clock_sample_s"] == doc["entries"][key]["clock_sample_s"]
    # --add: nothing is missing, nothing is measured again
    capsys.readouterr()
    assert clock.main(["--config", str(conf), "--out", str(out), "--add"]) == 0
    assert "has every key" in capsys.readouterr().out
    assert json.loads(out.read_text())["entries"] == doc["entries"]
