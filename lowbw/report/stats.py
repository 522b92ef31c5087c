"""Statistics the Results quote: mean +- std over seeds and Welch's two-sample t-test."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import stats

__all__ = ["MeanStd", "mean_std", "welch", "TTest"]


@dataclass(frozen=True)
class MeanStd:
    mean: float
    std: float  # sample std (ddof=1); NaN for a single value
    n: int


def mean_std(values) -> MeanStd:
    a = np.asarray(list(values), dtype=float)
    a = a[np.isfinite(a)]
    if a.size == 0:
        return MeanStd(float("nan"), float("nan"), 0)
    return MeanStd(float(a.mean()), float(a.std(ddof=1)) if a.size > 1 else float("nan"), int(a.size))


@dataclass(frozen=True)
class TTest:
    t: float
    p: float  # two-sided
    significant: bool
    alpha: float


def welch(a, b, alpha: float = 0.05) -> TTest:
    """Welch's unequal-variance t-test (two-sided). Fewer than 2 samples per side -> not significant, p=NaN."""
    a = np.asarray(list(a), dtype=float)
    b = np.asarray(list(b), dtype=float)
    if a.size < 2 or b.size < 2:
        return TTest(float("nan"), float("nan"), False, alpha)
    if np.all(a == a[0]) and np.all(b == b[0]):
        same = bool(a[0] == b[0])
        return TTest(0.0 if same else float("inf"), 1.0 if same else 0.0, not same, alpha)
    r = stats.ttest_ind(a, b, equal_var=False)
    return TTest(float(r.statistic), float(r.pvalue), bool(r.pvalue < alpha), alpha)
