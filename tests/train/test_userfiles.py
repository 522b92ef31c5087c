"""A user's own model and dataset files (``model``/``dataset: path.py:build``) on every backend, their checks,
their hash in the provenance, and ``lowbw compare`` over the runs they make."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from lowbw.train import run
from lowbw.train.config import ConfigError, RunConfig
from lowbw.train.rundir import RunDirError
from lowbw.train.userfiles import UserDataset

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
BASE = {"model": f"{EXAMPLES}/my_model.py:build", "dataset": f"{EXAMPLES}/my_data.py:build", "workers": 2,
        "batch_size": 64, "steps": 40, "lr": 0.1, "eval_every": 0.25, "targets": ["val_acc>=0.85"],
        "progress": False, "clock": "model", "clock_sample_s": 1e-5}


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}


def _metrics(out: Path) -> list[tuple]:
    return [(m["step"], m.get("val_loss"), m.get("val_acc"), m["bytes_sent"])
            for m in map(json.loads, (out / "metrics.jsonl").read_text().splitlines())]


def test_user_files_train_and_record_their_hash(tmp_path):
    summ = run(RunConfig.from_dict(BASE), tmp_path / "a")
    assert summ["complete"] and summ["final_val_acc"] > 0.85 and summ["time_to_target"]["val_acc>=0.85"]
    c = json.loads((tmp_path / "a" / "config.json").read_text())
    files = c["provenance"]["user_files"]
    import hashlib

    assert files["model"]["sha256"] == hashlib.sha256((EXAMPLES / "my_model.py").read_bytes()).hexdigest()
    assert files["dataset"]["sha256"] == hashlib.sha256((EXAMPLES / "my_data.py").read_bytes()).hexdigest()
    assert c["data"]["kind"] == "file" and c["data"]["metric"] == "val_acc" and c["data"]["direction"] == "up"
    # the same config again: deterministic
    again = run(RunConfig.from_dict(BASE), tmp_path / "b")
    assert _metrics(tmp_path / "a") == _metrics(tmp_path / "b") and again["final_val_acc"] == summ["final_val_acc"]


def test_a_changed_file_is_refused_on_rerun(tmp_path):
    model = tmp_path / "m.py"
    shutil.copy(EXAMPLES / "my_model.py", model)
    cfg = RunConfig.from_dict({**BASE, "model": f"{model}:build", "steps": 4})
    run(cfg, tmp_path / "r")
    model.write_text(model.read_text() + "\n# edited\n")
    with pytest.raises(RunDirError, match=r"model file .*m\.py changed \(sha256 "):
        run(cfg, tmp_path / "r")


@pytest.mark.parametrize("source, key, message", [
    (None, "model", "no such file"),
    ("x = 1\n", "model", "defines no callable 'build'"),
    ("raise ImportError('no torch here')\n", "dataset", "importing .* failed: ImportError: no torch here"),
])
def test_config_checks_the_file_before_any_work(tmp_path, source, key, message):
    f = tmp_path / "user.py"
    if source is not None:
        f.write_text(source)
    with pytest.raises(ConfigError, match=message) as ei:
        RunConfig.from_dict({**BASE, key: f"{f}:build"})
    assert ei.value.key == key and "\n" not in str(ei.value)


@pytest.mark.parametrize("body, message", [
    ("def build():\n    return 3\n", "build\\(\\) returned int, not lowbw.train.userfiles.UserDataset"),
    ("def build():\n    return UserDataset(torch.zeros(4, 2), torch.zeros(3).long(), torch.zeros(2, 2), "
     "torch.zeros(2).long())\n", "x_train and y_train need the same number of samples"),
    ("def build():\n    return UserDataset(torch.zeros(4, 2), torch.zeros(4), torch.zeros(2, 2), "
     "torch.zeros(2).long())\n", "y_train holds torch.float32; targets are integer class indices"),
    ("def build():\n    return UserDataset(torch.zeros(4, 2), torch.zeros(4).long(), torch.zeros(2, 2), "
     "torch.zeros(2).long(), metric='val_loss', direction='up')\n", "direction='up' for metric val_loss"),
])
def test_a_bad_dataset_is_one_line_exit_2(tmp_path, body, message):
    f = tmp_path / "data.py"
    f.write_text("import torch\nfrom lowbw.train.userfiles import UserDataset\n" + body)
    r = subprocess.run([sys.executable, "-m", "lowbw", "train", "--set", f"dataset={f}:build",
                        "--set", f"model={EXAMPLES}/my_model.py:build", "--set", "steps=2", "--set", "progress=false",
                        "--out", str(tmp_path / "out")], env=_env(), capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, r.stderr
    import re

    assert len(r.stderr.strip().splitlines()) == 1 and re.search(message, r.stderr), r.stderr


def test_user_dataset_is_frozen():
    d = UserDataset([[0.0]], [0], [[0.0]], [0])
    with pytest.raises(AttributeError):
        d.metric = "val_loss"  # type: ignore[misc]


@pytest.mark.slow
def test_procs_and_testbed_match_sim_with_a_compressor_and_diloco_and_compare(tmp_path):
    """sim = procs = procs on the testbed for the user's files, with top-k + EF and with DiLoCo; then compare."""
    from lowbw.net.testbed import netns_missing

    runs = tmp_path / "runs"
    schemes = {"topk": {"compressor": "topk", "compressor_args": {"ratio": 0.1}, "error_feedback": "on"},
               "diloco": {"sync": "diloco", "world_period": 8}}
    backends = {"sim": {}, "procs": {"backend": "procs"}}
    if not netns_missing():
        backends["testbed"] = {"backend": "procs", "testbed": True, "bandwidth_mbit": 50}
    for s, extra in schemes.items():
        got = {}
        for b, be in backends.items():
            out = runs / f"{s}_{b}"
            run(RunConfig.from_dict({**BASE, **extra, **be, "seed": 0}), out, quiet=True)
            got[b] = _metrics(out)
        assert all(v == got["sim"] for v in got.values()), s
    r = subprocess.run([sys.executable, "-m", "lowbw", "compare", str(runs / "*_sim")], env=_env(),
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "val_acc>=0.85 reached" in r.stdout and "diloco H=8 M=2" in r.stdout and "topk(ratio=0.1) +EF" in r.stdout
    assert (runs / "compare.png").stat().st_size > 10_000 and (runs / "compare.csv").is_file()
