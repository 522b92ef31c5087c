"""Statistics the Results quote: mean +- std over seeds, Welch's two-sample t-test, and times to a target that
count every seed.

A time to target is censored: a seed that never reached the target has a time longer than its run, not no
time. :func:`censored` therefore keeps every seed, a non-arrival as +inf (slower than any arrival): the
arrivals k of n, the median over all n (inf when half or more never arrived) and a bootstrap interval of that
median; :func:`rank_test` compares two methods' times over all their seeds (Mann-Whitney U, the non-arrivals
tied last). A mean over only the seeds that arrived is biased towards the lucky seeds and is never quoted.
Correlations over methods need at least :data:`MIN_CORRELATION_METHODS` of them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import stats

__all__ = ["MeanStd", "mean_std", "welch", "TTest", "Censored", "censored", "rank_test",
           "MIN_CORRELATION_METHODS"]

#: no rank correlation over fewer methods is quoted (with 3 methods, rho = 1 has probability 1/6 by chance)
MIN_CORRELATION_METHODS = 6
BOOTSTRAP_REPS = 2000  # resamples of the seeds for the median's interval
BOOTSTRAP_SEED = 0  # a fixed stream: the same runs give the same interval


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


@dataclass(frozen=True)
class Censored:
    """Times to a target over all seeds of one group (seconds; a seed that never arrived is +inf)."""

    arrived: int  # seeds that reached the target
    n: int  # all seeds
    median: float  # median over all n seeds (inf: half or more never arrived; NaN: no seeds)
    lo: float  # 95 % bootstrap percentile interval of the median (resampling seeds; inf where censored)
    hi: float
    mean: float  # mean over all seeds when every seed arrived, else NaN (never a mean of the arrivals only)

    @property
    def all_arrived(self) -> bool:
        return self.n > 0 and self.arrived == self.n


def censored(times) -> Censored:
    """:class:`Censored` of per-seed times to target, NaN or inf meaning the seed never arrived."""
    a = np.asarray(list(times), dtype=float)
    a = np.where(np.isfinite(a), a, np.inf)
    n, k = int(a.size), int(np.isfinite(a).sum())
    if n == 0:
        return Censored(0, 0, float("nan"), float("nan"), float("nan"), float("nan"))
    med = float(np.median(a))
    if n > 1:
        idx = np.random.default_rng(BOOTSTRAP_SEED).integers(0, n, size=(BOOTSTRAP_REPS, n))
        meds = np.median(a[idx], axis=1)
        lo, hi = (float(x) for x in np.percentile(meds, [2.5, 97.5], method="inverted_cdf"))
    else:
        lo = hi = med
    return Censored(k, n, med, lo, hi, float(a.mean()) if k == n else float("nan"))


def rank_test(a, b, alpha: float = 0.05) -> TTest:
    """Two-sided Mann-Whitney U test of two groups' times to target over all their seeds (NaN/inf: never
    arrived, tied slowest). ``t`` holds U. Fewer than 2 seeds a side -> not significant, p=NaN. With 3 seeds a
    side the smallest possible p is 0.1: three seeds cannot show a difference at 0.05, and say so."""
    a = np.asarray(list(a), dtype=float)
    b = np.asarray(list(b), dtype=float)
    if a.size < 2 or b.size < 2:
        return TTest(float("nan"), float("nan"), False, alpha)
    a = np.where(np.isfinite(a), a, np.inf)
    b = np.where(np.isfinite(b), b, np.inf)
    if np.all(np.concatenate([a, b]) == a[0]):
        return TTest(float(a.size * b.size / 2), 1.0, False, alpha)
    r = stats.mannwhitneyu(a, b, alternative="two-sided", method="auto")
    return TTest(float(r.statistic), float(r.pvalue), bool(r.pvalue < alpha), alpha)
