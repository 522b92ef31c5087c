"""lowbw.runs.results: run directories -> tidy DataFrames; incomplete or corrupt runs are named."""

from __future__ import annotations

import json

import pytest

from lowbw.runs.io import append_jsonl, atomic_write_json
from lowbw.runs.results import RunError, find_runs, load_metrics, load_runs


def fake_run(d, compressor="none", seed=0, acc=0.5, complete=True):
    d.mkdir(parents=True)
    atomic_write_json(d / "config.json", {"config": {"compressor": compressor, "seed": seed, "workers": 4,
                                                     "compressor_args": {"ratio": 0.01}},
                                          "derived": {"local_batch_size": 32}, "provenance": {"host": "h"}})
    for s in range(3):
        append_jsonl(d / "metrics.jsonl", {"step": s, "loss": 1.0 / (s + 1), "t_virtual": float(s)})
    if complete:
        atomic_write_json(d / "summary.json", {"complete": True, "final_test_acc": acc, "step": 2,
                                               "time_to_target": {"0.4": {"step": 1, "t_virtual": 1.0}, "0.9": None}})


def test_load_runs_one_row_per_run(tmp_path):
    root = tmp_path / "runs"
    for c in ("none", "topk"):
        for s in (0, 1):
            fake_run(root / "e4_comp" / f"compressor~{c}" / f"seed~{s}", c, s, acc=0.5 + s / 10)
    (root / "bench").mkdir()
    atomic_write_json(root / "bench" / "x.json", {"a": 1})
    df = load_runs(root)
    assert len(df) == 4 and set(df["experiment"]) == {"e4_comp"}
    assert set(df["compressor"]) == {"none", "topk"} and sorted(df["seed"]) == [0, 0, 1, 1]
    assert df["compressor_args.ratio"].iloc[0] == 0.01 and df["derived.local_batch_size"].iloc[0] == 32
    assert df["ttt.0.4.t_virtual"].iloc[0] == 1.0 and df["ttt.0.9.step"].isna().all()
    assert df["complete"].all()
    one = load_runs(root / "e4_comp")
    assert len(one) == 4 and set(one["experiment"]) == {"e4_comp"}
    m = load_metrics(root, id_columns=("workers",))
    assert len(m) == 12 and {"run", "compressor", "seed", "workers", "step"} <= set(m.columns)


def test_incomplete_run_is_named(tmp_path):
    fake_run(tmp_path / "e1_x" / "seed~0")
    fake_run(tmp_path / "e1_x" / "seed~1", complete=False)
    with pytest.raises(RunError, match="seed~1.*summary.json is missing"):
        load_runs(tmp_path)
    assert len(load_runs(tmp_path, incomplete="skip")) == 1
    df = load_runs(tmp_path, incomplete="include")
    assert sorted(df["complete"].tolist()) == [False, True]


def test_corrupt_summary_is_named(tmp_path):
    fake_run(tmp_path / "e1_x" / "seed~0")
    (tmp_path / "e1_x" / "seed~0" / "summary.json").write_text('{"complete": tr')
    with pytest.raises(RunError, match=r"seed~0: summary.json is corrupt"):
        load_runs(tmp_path)


def test_real_run_directory_loads(tmp_path):
    from lowbw.train.launch import run

    run({"dataset": "synthetic", "model": "mlp", "workers": 2, "batch_size": 16, "steps": 2, "progress": False,
         "train_limit": 100, "test_limit": 20, "targets": [0.01]}, tmp_path / "e9_t" / "model~mlp")
    df = load_runs(tmp_path)
    assert df["model"].iloc[0] == "mlp" and df["complete"].iloc[0]
    assert df["ttt.0.01.step"].iloc[0] == 0
    assert json.loads(df["lr_milestones"].iloc[0]) == [0.5, 0.75]
    assert find_runs(tmp_path) == [tmp_path / "e9_t" / "model~mlp"]
