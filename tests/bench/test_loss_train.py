"""python -m lowbw bench loss_train: a training run's measured comm under random loss against the clock's charge --
the rows over the same method's lossless cell, bad flags refused before any work, and a short run on the testbed
(root)."""

from __future__ import annotations

import json

import pytest

from lowbw.bench import loss_train as bench
from tests.conftest import netns_tun


def _cell(method: str, p: float, comm: float, clock: float) -> dict:
    return {"method": method, "loss": p, "window": [10, 20], "comm_s": comm, "clock_comm_s": clock, "meta_s": 0.0,
            "err_comm": clock / comm - 1, "final_val_loss": 3.0}


def test_extras_over_the_same_methods_lossless_cell():
    rows = {(r["method"], r["loss"]): r for r in bench.rows_of(
        [_cell("dense", 0.0, 0.40, 0.36), _cell("dense", 0.1, 0.60, 0.50), _cell("diloco16", 0.0, 0.05, 0.04),
         _cell("diloco16", 0.1, 0.06, 0.07)])}
    d = rows[("dense", 0.1)]
    assert (d["extra_s"], d["clock_extra_s"]) == pytest.approx((0.20, 0.14))
    assert d["err_extra"] == pytest.approx(0.14 / 0.20 - 1)
    assert rows[("diloco16", 0.1)]["extra_s"] == pytest.approx(0.01)  # against its own loss 0, not dense's
    assert rows[("dense", 0.0)]["err_extra"] is None


@pytest.mark.parametrize("argv, words", [(["--losses", "0.5"], "--losses 0.5"), (["--steps", "5"], "--steps 5"),
                                         (["--methods", "nope"], "'nope'")])
def test_bad_flags_are_refused_before_any_work(argv, words, tmp_path, capsys):
    assert bench.main([*argv, "--out", str(tmp_path / "x.json"), "--runs-dir", str(tmp_path / "runs")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("lowbw bench loss_train:") and words in err and "\n" not in err
    assert not (tmp_path / "x.json").exists() and not (tmp_path / "runs").exists()


@netns_tun
@pytest.mark.slow
def test_a_short_lossy_training_run_on_the_testbed(tmp_path):
    out = tmp_path / "lt.json"
    assert bench.main(["--methods", "dense", "--losses", "0.1", "--steps", "12", "--model", "gpt-tiny",
                       "--runs-dir", str(tmp_path / "runs"), "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    rows = {r["loss"]: r for r in doc["rows"]}
    assert set(rows) == {0.0, 0.1} and all(r["comm_s"] > 0 and r["clock_comm_s"] > 0 for r in rows.values())
    assert rows[0.1]["clock_comm_s"] > rows[0.0]["clock_comm_s"]  # the clock charges the loss
    assert rows[0.1]["final_val_loss"] == rows[0.0]["final_val_loss"]  # TCP delivers every byte: same training
    assert json.loads(rows[0.1]["testbed"])["impairment"] == "userspace"
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())  # run directories deleted
