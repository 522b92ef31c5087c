"""The GPU table (lowbw.report.gpu): overfitting marked with both values stated, fewer seeds than promised said,
time to target over all seeds, each language-model row's dropout and length (runs stored before the dropout key
had none)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd

from lowbw.report.experiment import Stats
from lowbw.report.gpu import stats, table

STORE = Path(__file__).resolve().parents[2] / "paper" / "measured" / "gpu"


def _stats(seeds: int) -> Stats:
    runs = pd.DataFrame([{"dataset": "shakespeare", "model": "gpt-medium", "workers": 4, "batch_size": 64}])
    methods = pd.DataFrame([
        {"model": "gpt-medium", "method": "dense", "dropout": 0.0, "run_steps": 2000, "metric": "val_loss",
         "seeds": seeds, "final_mean": 2.62,
         "final_std": 0.01, "best_mean": 1.52, "step_s_mean": 0.1, "epochs_to_target_mean": float("nan"),
         "steps_to_target_mean": float("nan"), "seeds_reached": seeds - 1, "epochs_to_target_median": float("nan"),
         "steps_to_target_median": 500.0 if seeds > 2 else float("inf"), "overfits": True},
        {"model": "gpt-medium", "method": "diloco50", "dropout": 0.0, "run_steps": 2000, "metric": "val_loss",
         "seeds": seeds, "final_mean": 1.58,
         "final_std": 0.01, "best_mean": 1.54, "step_s_mean": 0.1, "epochs_to_target_mean": float("nan"),
         "steps_to_target_mean": 1125.0, "seeds_reached": seeds, "epochs_to_target_median": float("nan"),
         "steps_to_target_median": 1125.0, "overfits": False}])
    return Stats({"runs": runs, "methods": methods},
                 {"target_acc": 0.91, "measured": [["H200", "2026-11-25", "2.11", "13.0"]], "commits": ["abc"]})


def test_overfitting_is_marked_and_both_values_stated():
    tex = table(_stats(3))
    dense = next(line for line in tex.splitlines() if line.startswith("gpt-medium / dense"))
    assert "2.62" in dense and r"$^\dagger$" in dense and "1.52" in dense
    assert "it overfits" in tex and "dropout 0.2" in tex
    assert "gpt-medium without dropout over 2{,}000 steps: 2 methods" in tex
    assert dense.startswith("gpt-medium / dense & 0 & 2{,}000 & 3 &")
    assert "median 500 (2/3)" in dense  # over all seeds, the arrivals said
    assert "fewer than the 3 seeds" not in tex


def test_fewer_seeds_than_promised_are_said():
    tex = table(_stats(2))
    assert "2 of the 2 methods have fewer than the 3 seeds" in tex
    assert "-- (1/2)" in tex


def test_runs_with_and_without_dropout_are_rows_of_their_own(tmp_path):
    """The stored 2,000-step runs (no dropout key: none) and a run at nanoGPT's GPU recipe of the same method are
    two rows, each with its dropout and steps, and the caption names both recipes."""
    store = tmp_path / "gpu"
    shutil.copytree(STORE / "gpu_lm" / "method~dense", store / "gpu_lm" / "method~dense")
    new = store / "e9_gpu_lm" / "method~dense" / "seed~0"
    shutil.copytree(STORE / "gpu_lm" / "method~dense" / "seed~0", new)
    cfg = json.loads((new / "config.json").read_text())
    assert "dropout" not in cfg["config"]
    cfg["config"].update(dropout=0.2, steps=5000)
    (new / "config.json").write_text(json.dumps(cfg))
    st = stats(store)
    m = st.tables["methods"]
    assert sorted(zip(m["dropout"], m["run_steps"], m["seeds"])) == [(0.0, 2000, 2), (0.2, 5000, 1)]
    tex = table(st)
    assert "gpt-medium without dropout over 2{,}000 steps: 1 method" in tex
    assert "gpt-medium with dropout 0.2 over 5{,}000 steps (nanoGPT's GPU recipe): 1 method" in tex
    assert "gpt-medium / dense & 0.2 & 5{,}000 & 1 &" in tex
