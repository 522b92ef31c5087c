"""The GPU table (lowbw.report.gpu): overfitting marked with both values stated, fewer seeds than promised said,
time to target over all seeds."""

from __future__ import annotations

import pandas as pd

from lowbw.report.experiment import Stats
from lowbw.report.gpu import table


def _stats(seeds: int) -> Stats:
    runs = pd.DataFrame([{"dataset": "shakespeare", "model": "gpt-medium", "workers": 4, "batch_size": 64}])
    methods = pd.DataFrame([
        {"model": "gpt-medium", "method": "dense", "metric": "val_loss", "seeds": seeds, "final_mean": 2.62,
         "final_std": 0.01, "best_mean": 1.52, "step_s_mean": 0.1, "epochs_to_target_mean": float("nan"),
         "steps_to_target_mean": float("nan"), "seeds_reached": seeds - 1, "epochs_to_target_median": float("nan"),
         "steps_to_target_median": 500.0 if seeds > 2 else float("inf"), "overfits": True},
        {"model": "gpt-medium", "method": "diloco50", "metric": "val_loss", "seeds": seeds, "final_mean": 1.58,
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
    assert "median 500 (2/3)" in dense  # over all seeds, the arrivals said
    assert "fewer than the 3 seeds" not in tex


def test_fewer_seeds_than_promised_are_said():
    tex = table(_stats(2))
    assert "2 of the 2 methods have fewer than the 3 seeds" in tex
    assert "-- (1/2)" in tex
