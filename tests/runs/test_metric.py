"""The workload's own metric where users look: train's console line, `store list`, `data` and `data verify`."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from lowbw.runs.metric import headline, run_metric

ROOT = Path(__file__).resolve().parents[2]
MIRROR = Path(os.environ.get("LOWBW_DATA_MIRROR", ROOT.parent / "shared" / "data"))


def _lowbw(*args: str, cwd: Path = ROOT, env: dict | None = None) -> subprocess.CompletedProcess:
    e = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""), **(env or {})}
    return subprocess.run([sys.executable, "-m", "lowbw", *args], cwd=cwd, env=e, capture_output=True, text=True,
                          timeout=600)


def test_metric_by_workload():
    assert run_metric({"data": {"kind": "text"}}) == ("val_loss", "down")
    assert run_metric({"data": {"kind": "image"}}) == ("test_acc", "up")
    assert run_metric({"data": {"kind": "file", "metric": "val_loss", "direction": "down"}}) == ("val_loss", "down")
    assert run_metric({"config": {"dataset": "shakespeare"}}) == ("val_loss", "down")  # an older config.json
    h = headline({"final_val_loss": 1.5, "best_val_loss": 1.4}, "val_loss")
    assert h["final_val_ppl"] == pytest.approx(math.exp(1.5)) and h["best_val_ppl"] == pytest.approx(math.exp(1.4))
    assert headline({"final_test_acc": 0.9, "best_test_acc": 0.91}, "test_acc") == {"final_test_acc": 0.9,
                                                                                      "best_test_acc": 0.91}


@pytest.mark.skipif(not (MIRROR / "tinyshakespeare.txt").is_file(), reason=f"no tinyshakespeare.txt in {MIRROR}")
def test_language_model_console_line_shows_loss_and_perplexity(tmp_path):
    r = _lowbw("train", "--set", "dataset=shakespeare", "--set", "model=gpt-tiny", "--set", "workers=2",
               "--set", "steps=2", "--set", "batch_size=4", "--set", "test_limit=8", "--set", "optimizer=adamw",
               "--set", "lr=0.001", "--set", "progress=false", "--out", str(tmp_path / "lm"),
               env={"LOWBW_DATA_DIR": str(tmp_path / "cache"), "LOWBW_DATA_MIRROR": str(MIRROR)})
    assert r.returncode == 0, r.stderr
    line = json.loads(r.stdout.strip().splitlines()[-1])
    assert line["metric"] == "val_loss" and "final_test_acc" not in line
    assert line["final_val_loss"] > 0 and line["final_val_ppl"] == pytest.approx(math.exp(line["final_val_loss"]))


def test_store_list_shows_the_anchor_by_its_validation_loss():
    r = _lowbw("store", "list")
    assert r.returncode == 0, r.stderr
    assert "paper/measured/anchor:" in r.stdout
    anchor = r.stdout.split("paper/measured/anchor:")[1]
    assert "val_loss" in anchor and "final_ppl" in anchor and "1.908" in anchor, r.stdout


@pytest.mark.skipif(not (MIRROR / "tinyshakespeare.txt").is_file(), reason=f"no tinyshakespeare.txt in {MIRROR}")
def test_data_lists_loads_and_verifies_tiny_shakespeare(tmp_path):
    env = {"LOWBW_DATA_DIR": str(tmp_path / "cache"), "LOWBW_DATA_MIRROR": str(MIRROR)}
    assert "shakespeare (text: 1,115,394 characters, 65 distinct" in _lowbw("data", env=env).stdout
    assert "shakespeare: not cached" in _lowbw("data", "verify", "shakespeare", env=env).stdout
    assert "1,115,394 characters" in _lowbw("data", "shakespeare", env=env).stdout
    r = _lowbw("data", "verify", env=env)
    assert r.returncode == 0
    assert "shakespeare: ok (tinyshakespeare.txt, md5 6fb458f1232090904fb40fe944165e91" in r.stdout
    cached = tmp_path / "cache" / "shakespeare" / "tinyshakespeare.txt"
    cached.write_text("not shakespeare")
    r = _lowbw("data", "verify", "shakespeare", env=env)
    assert r.returncode == 1 and "differs from the published 6fb458f1232090904fb40fe944165e91" in r.stderr
