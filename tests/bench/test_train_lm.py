"""bench train_lm: the language model's step against nanoGPT's model.py (imported from its path, never copied)."""

from __future__ import annotations

import hashlib
import json
import os
import statistics
from pathlib import Path

import pytest

from lowbw.bench import train_lm
from lowbw.bench.cli import benchmarks

REPO = Path(__file__).resolve().parents[2]
MIRROR = Path(os.environ.get("LOWBW_DATA_MIRROR", REPO.parent / "shared" / "data"))
NANOGPT = REPO.parent / "shared" / "peers" / "nanogpt" / "model.py"
needs_corpus = pytest.mark.skipif(not (MIRROR / "tinyshakespeare.txt").is_file(),
                                  reason=f"no tinyshakespeare.txt in the data mirror {MIRROR}")
needs_nanogpt = pytest.mark.skipif(not NANOGPT.is_file(), reason=f"no nanoGPT model.py at {NANOGPT}")


def test_registered_and_default_path_is_beside_the_checkout():
    assert "train_lm" in benchmarks()
    assert train_lm.default_nanogpt_path() == NANOGPT
    assert not list((REPO / "lowbw").rglob("model.py")), "nanoGPT's model.py must not be copied into lowbw"


def test_absent_nanogpt_is_a_one_line_error_naming_the_path(tmp_path, capsys):
    missing = tmp_path / "nowhere" / "model.py"
    out = tmp_path / "r.json"
    assert train_lm.main(["--nanogpt", str(missing), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "absent" in err and str(missing) in err
    assert not out.exists()


def test_a_file_that_is_not_nanogpt_is_refused(tmp_path):
    p = tmp_path / "model.py"
    p.write_text("x = 1\n")
    with pytest.raises(train_lm.NanoGPTMissing, match="no GPT and GPTConfig"):
        train_lm.load_nanogpt(p)


@pytest.mark.parametrize("argv, what", [(["--workers", "2,x"], "--workers"), (["--workers", "1"], "workers=[1]"),
                                        (["--model", "resnet20"], "model='resnet20'")])
def test_bad_input_is_refused_naming_the_value(tmp_path, capsys, argv, what):
    assert train_lm.main([*argv, "--nanogpt", str(NANOGPT), "--out", str(tmp_path / "r.json")]) == 2
    assert what in capsys.readouterr().err


@needs_corpus
@needs_nanogpt
def test_gpt_tiny_measures_every_variant_and_reports_ratios(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("LOWBW_DATA_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("LOWBW_DATA_MIRROR", str(MIRROR))
    out = tmp_path / "train_gpt.json"
    rc = train_lm.main(["--model", "gpt-tiny", "--steps", "1", "--reps", "3", "--workers", "2", "--out", str(out)])
    assert rc == 0
    res = json.loads(out.read_text())
    assert set(res["step_s_all"]) == {"nanogpt", "module", "trainer_m1", "sim_m2"}
    assert all(len(v) == 3 and min(v) > 0 for v in res["step_s_all"].values())
    # the same architecture: nanoGPT's count (position embedding included) equals lowbw's
    assert res["params"]["nanogpt"] == res["params"]["lowbw"]
    assert res["nanogpt"]["sha256"] == hashlib.sha256(NANOGPT.read_bytes()).hexdigest()
    assert res["torch_threads"] == 1 and res["engine"] == {"trainer_m1": "loop", "sim_m2": "loop"}
    t = res["step_s_all"]
    sim = res["targets"]["sim_m2_vs_2x_trainer_m1"]
    assert sim["ratio"] == pytest.approx(statistics.median(a / (2 * b) for a, b in zip(t["sim_m2"], t["trainer_m1"])))
    assert sim["target"] == train_lm.TARGET_SIM
    for v in res["targets"].values():
        assert v["met"] == (v["ratio"] <= v["target"])
    assert res["targets"]["trainer_m1_vs_nanogpt"]["target"] == train_lm.TARGET_VS_NANOGPT
    assert "conditions" in res and "load_before" in res["conditions"] and res["provenance"]
    table = capsys.readouterr().out
    assert "trainer_m1" in table and "nanogpt" in table and "(reference)" in table
