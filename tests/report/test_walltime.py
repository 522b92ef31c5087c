"""The comparison with the DiLoCo scaling-law paper's wall-clock model: its formula by hand, the advisor's side
through the cost model, and the two findings the paper states (DiLoCo agrees; data-parallel differs by overlap)."""

from __future__ import annotations

import pytest

from lowbw.comm.registry import COLLECTIVES
from lowbw.report import walltime as W


def test_charles_step_by_hand():
    s = W.Setting(1e9, 8, 10.0, 30)
    c = 6 * 1e9 * 2 ** 20 / (8 * 4e14)
    comm = 2 * 2e9 * 8 / 10e9 * (1 - 1 / 8) + 0.01
    assert W.charles_step(s) == pytest.approx(c + comm / 30)


def test_advisor_data_parallel_overlaps_and_diloco_does_not():
    dp = W.Setting(1e9, 8, 10.0, 1)
    step, _ = W.advisor_step(dp)
    assert step < W.charles_step(dp)  # the all-reduce hides behind the backward pass
    assert step >= dp.compute_s
    dil = W.Setting(1e9, 8, 10.0, 30)
    step, algo = W.advisor_step(dil)
    assert step > dil.compute_s and COLLECTIVES[algo].run is not None  # one of ours


def test_summary_on_the_grid():
    t = W.rows()
    assert len(t) == len(W.GRID) == 36
    sm = W.summary(t)
    assert sm["diloco_max_dev"] < 0.01  # both charge one bandwidth-bound all-reduce per outer step
    assert sm["dp_max_dev"] > 0.1 and sm["dp_min_ratio"] < 1  # overlap: the advisor's DP step is shorter
    assert all(r["speedup_charles"] >= r["speedup_advisor"] - 1e-9 for r in t)
