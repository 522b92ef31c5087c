"""Times to target that count every seed (lowbw.report.stats.censored, rank_test; training.group_times)."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from lowbw.report.stats import MIN_CORRELATION_METHODS, censored, rank_test
from lowbw.report.training import group_times, ttt_cell

NAN = float("nan")


def test_a_seed_that_never_arrived_counts_as_the_slowest():
    c = censored([10.0, 12.0, NAN])
    assert (c.arrived, c.n) == (2, 3)
    assert c.median == 12.0  # not the arrivals' 11.0
    assert math.isnan(c.mean)  # no mean over the arrivals alone
    assert c.lo <= c.median <= c.hi and math.isinf(c.hi)  # a resample of mostly the non-arrival never arrives
    assert math.isinf(censored([10.0, NAN, NAN]).median)  # half or more never arrived: the median is never
    full = censored([10.0, 11.0, 12.0])
    assert full.mean == 11.0 and full.median == 11.0 and full.all_arrived


def test_the_interval_is_deterministic_and_brackets_the_median():
    a, b = censored([3.0, 1.0, 2.0, 5.0, 4.0]), censored([3.0, 1.0, 2.0, 5.0, 4.0])
    assert a == b
    assert 1.0 <= a.lo <= a.median <= a.hi <= 5.0


def test_rank_test_is_over_all_seeds():
    """E7's case: 2 of 3 adaptive seeds arrive, later than the baseline's worst. A test over the arrivals could
    call the adaptive faster; over all seeds the non-arrival ranks last, and three seeds a side cannot go
    below p = 0.1."""
    fast, slow = [1.0, 2.0, 3.0], [4.0, 5.0, 6.0]
    t = rank_test(fast, slow)
    assert t.p == pytest.approx(0.1) and not t.significant
    with_never = rank_test([4.0, 5.0, NAN], fast)
    assert with_never.p == pytest.approx(0.1)  # the never-arriving seed is the slowest, not dropped
    assert rank_test([4.0, 5.0, NAN], [4.5, 4.6, NAN]).p > 0.5
    assert math.isnan(rank_test([1.0], slow).p)
    assert rank_test([1.0, 2.0, 3.0, 4.0, 5.0, 6.0], [7.0, 8.0, 9.0, 10.0, 11.0, 12.0]).significant


def test_group_times_never_averages_the_arrivals_and_the_cell_says_so():
    per_run = pd.DataFrame({"method": ["a"] * 3 + ["b"] * 3 + ["c"] * 3, "bandwidth_mbit": 10.0,
                            "seed": [0, 1, 2] * 3,
                            "ttt_s": [1.0, 2.0, 3.0, 10.0, 20.0, NAN, 5.0, NAN, NAN]})
    t = group_times(per_run, ["method"]).set_index("method")
    assert t.loc["a", "ttt_mean_s"] == 2.0 and t.loc["a", "seeds_reached"] == 3
    assert math.isnan(t.loc["b", "ttt_mean_s"]) and t.loc["b", "ttt_median_s"] == 20.0
    assert math.isinf(t.loc["c", "ttt_median_s"])
    assert ttt_cell(t.loc["a"]) == "2 s"
    assert ttt_cell(t.loc["b"]) == "median 20 s (2/3)"
    assert ttt_cell(t.loc["c"]) == "-- (1/3)"


def test_no_correlation_below_six_methods():
    from lowbw.report.e4 import _rank_numbers

    five = pd.DataFrame({"method": list("abcde"), "ttt_lm_s": [1, 2, 3, 4, 5], "ttt_mlp_s": [1, 2, 3, 4, 5]})
    assert MIN_CORRELATION_METHODS == 6
    assert _rank_numbers("EFourLm", five) == {}
    six = pd.concat([five, pd.DataFrame({"method": ["f"], "ttt_lm_s": [6], "ttt_mlp_s": [6]})], ignore_index=True)
    assert _rank_numbers("EFourLm", six)["EFourLmRankMethods"] == "6"
