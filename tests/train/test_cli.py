"""``python -m lowbw train``: help lists every key, bad configs exit 2 naming the key, runs write a run dir."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys

from lowbw.cli import main
from lowbw.train.config import RunConfig


def test_help_documents_every_key(capsys):
    with contextlib.suppress(SystemExit):
        main(["train", "--help"])
    out = capsys.readouterr().out
    for k in RunConfig.keys():  # noqa: SIM118 (a classmethod, not a dict)
        assert f"  {k} = " in out, k


def test_bad_key_exits_2_naming_it(tmp_path, capsys):
    assert main(["train", "--set", "wrokers=2", "--out", str(tmp_path / "r")]) == 2
    assert "wrokers" in capsys.readouterr().err
    (tmp_path / "c.yaml").write_text("workers: 3\n")
    assert main(["train", "--config", str(tmp_path / "c.yaml"), "--out", str(tmp_path / "r")]) == 2
    assert "batch_size" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


def test_schema_and_print_config(capsys):
    assert main(["train", "--schema"]) == 0
    assert set(json.loads(capsys.readouterr().out)["properties"]) == set(RunConfig.keys())
    assert main(["train", "--set", "workers=8", "--print-config"]) == 0
    assert json.loads(capsys.readouterr().out)["derived"]["local_batch_size"] == 16


def test_run_from_yaml_with_overrides_then_skip_when_complete(tmp_path):
    (tmp_path / "run.yaml").write_text(
        "dataset: synthetic\nmodel: mlp\nworkers: 2\nbatch_size: 32\nsteps: 3\ntrain_limit: 200\ntest_limit: 50\n")
    cmd = [sys.executable, "-m", "lowbw", "train", "--config", str(tmp_path / "run.yaml"), "--set", "lr=0.1",
           "--set", "progress=false", "--out", str(tmp_path / "r")]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout.splitlines()[-1])["step"] == 3
    cfg = json.loads((tmp_path / "r" / "config.json").read_text())["config"]
    assert cfg["lr"] == 0.1 and cfg["model"] == "mlp"
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0 and "complete" in p.stderr
