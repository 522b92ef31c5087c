"""E6's data-overlap finding (lowbw.report.schemes): each overlapping configuration against its disjoint one,
with the comparison word chosen by the report so a regenerated difference cannot contradict the prose."""

from __future__ import annotations

import pandas as pd
import pytest

from lowbw.report.experiment import Stats
from lowbw.report.schemes import OVERLAP_PAIRS, _overlap, numbers


def _runs(sync_full: list[float]) -> pd.DataFrame:
    rows = []
    for assignment, method, accs in (("disjoint", "sync", [0.90, 0.91, 0.92]), ("full", "sync", sync_full),
                                     ("disjoint", "local16", [0.80, 0.81, 0.82])):
        rows += [{"assignment": assignment, "method": method, "seed": i, "final_test_acc": a}
                 for i, a in enumerate(accs)]
    return pd.DataFrame(rows)


@pytest.mark.parametrize("full, word", [([0.95, 0.96, 0.97], "higher"), ([0.85, 0.86, 0.87], "lower")])
def test_overlap_word_follows_the_sign(full, word):
    ov = _overlap(_runs(full), OVERLAP_PAIRS)
    assert list(ov["pair"]) == ["Sync"]  # pairs without both sides (local16 full, households) are left out
    acc = pd.DataFrame([{"assignment": "disjoint", "method": "sync", "test_acc_mean": 0.91, "significant": False}])
    times = pd.DataFrame(columns=["assignment", "method", "seeds_reached", "ttt_mean_s"])
    st = Stats({"accuracy": acc, "times": times, "overlap": ov},
               {"target_acc": 0.9, "focus_mbit": 10.0, "seeds": 3, "by": ["assignment", "method"]})
    out = numbers(st, "e6")
    assert out["ESixOverlapSyncDir"] == word and float(out["ESixOverlapSync"]) == pytest.approx(5)
    assert out["ESixOverlapSyncSig"] == "significant"
    assert "ESixOverlapLocal" not in out
