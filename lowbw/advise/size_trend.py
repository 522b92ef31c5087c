"""How each family's loss and steps relative to dense training change with model size: the trends fitted on
the scaling campaign's stored runs (issue 44: ``config/scaling.yaml``, kept in ``paper/measured/scaling``) and
Charles et al. 2025's law for DiLoCo ("Communication-Efficient Language Model Training Scales Reliably and
Robustly: Scaling Laws for DiLoCo", arXiv 2503.09799, their Tables 4 and 5 and Section 4's joint fit).

At each measured size N (parameters) and for each family f at M workers, from the runs' final evaluation losses
(nats/character, mean over seeds) and evaluation curves:

* the loss ratio r_f(N) = L_f(N) / L_DP(N) against dense data-parallel training (DP) at the same size, steps
  and global batch;
* the step multiplier s_f(N): if the method ends above DP, s = T / T_DP(L_f), the method's steps over the
  steps DP took to first reach the method's final loss (linear interpolation between evaluations of DP's
  running-minimum curve); if it ends below, s = T_f(L_DP) / T, the steps the method took to reach DP's final
  loss over DP's. s > 1: the method needs more steps than dense for the same loss.

Each is fitted as a power law in N, log y = log a + b log N (least squares over every size's mean; with two
sizes the line through them): y(N) = a N^b. Charles et al.'s law for the DiLoCo family is the ratio of their
per-M fits to their DP fit, r(N) = (A_M / A_DP) N^(alpha_M - alpha_DP), at M = 1, 2, 4, 8, and at another M
their joint fit L = 19.226 N^-0.0985 M^0.0116 over DP's. Their law gives losses only (no step multiplier).

:func:`fit_power` is the one power-law fit of the repository (also E12's per-M and joint fits with their
intervals, :mod:`lowbw.report.e12`). :func:`points` makes the trends' points from run records; the report keeps
them as E12's tidy table ``paper/generated/stats/e12_trends.csv`` and a copy ships beside this module
(``size_trend.csv``) so that a fresh clone advises before any run. :func:`read` loads them, :func:`trend` fits
a family's law, :func:`answer` evaluates it for a user's size and workers and :func:`annotate` is the
advisor's hook: beyond the measured sizes a row is marked ``extrapolated (size)`` and one line per family
says which law was used and the spread between the two. Reading and evaluating import no numpy, pandas or
scipy: advice must start fast.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from lowbw.train.schemes.keys.diloco import FAMILY as DILOCO

__all__ = ["CHARLES_TABLE4", "CHARLES_FITS", "CHARLES_JOINT", "PowerFit", "SizeAnswer", "POINT_COLUMNS",
           "fit_power", "step_multiplier", "points", "read", "trend", "charles_ratio", "answer", "annotate",
           "trend_key", "SHIPPED", "GENERATED", "EXTRAPOLATED"]

SHIPPED = Path(__file__).with_name("size_trend.csv")
GENERATED = Path("paper/generated/stats/e12_trends.csv")  # E12's tidy table of points
EXTRAPOLATED = "extrapolated (size)"  # the advisor's confidence word for a row beyond the measured sizes

# Charles et al.'s Table 4: evaluation loss on C4 at four sizes (parameters), DP then DiLoCo M = 1, 2, 4, 8
CHARLES_TABLE4: dict[float, tuple[float, float, float, float, float]] = {
    35e6: (3.485, 3.482, 3.508, 3.554, 3.621),
    90e6: (3.167, 3.162, 3.182, 3.213, 3.265),
    180e6: (2.950, 2.943, 2.957, 2.981, 3.019),
    2.4e9: (2.326, 2.317, 2.323, 2.332, 2.351),
}
# their per-method fits L(N) = A N^alpha: "DP" and M = 1, 2, 4, 8
CHARLES_FITS: dict[str, tuple[float, float]] = {"DP": (18.129, -0.0953), "1": (18.363, -0.0961),
                                                "2": (18.768, -0.0969), "4": (19.762, -0.0992),
                                                "8": (21.051, -0.1018)}
CHARLES_JOINT = (19.226, -0.0985, 0.0116)  # L = A N^alpha M^beta over DiLoCo's runs


@dataclass(frozen=True)
class PowerFit:
    """y = A N^alpha (times M^beta for a joint fit), fitted by least squares on logs, with 95% intervals."""

    A: float  # the prefactor
    alpha: float  # the exponent of N
    alpha_lo: float  # 95% interval of alpha (t distribution; nan with no residual degrees of freedom)
    alpha_hi: float
    n: int  # points fitted
    beta: float = math.nan  # the exponent of M (joint fits only)
    beta_lo: float = math.nan  # its 95% interval
    beta_hi: float = math.nan
    A_lo: float = math.nan  # 95% interval of A
    A_hi: float = math.nan

    def __call__(self, n: float, m: float = 1.0) -> float:
        return self.A * n ** self.alpha * (m ** self.beta if math.isfinite(self.beta) else 1.0)


def _solve(a: list[list[float]], b: list[float]) -> list[float]:
    """x of a x = b (Gaussian elimination with partial pivoting; a small dense system)."""
    k = len(b)
    m = [row[:] + [v] for row, v in zip(a, b)]
    for i in range(k):
        p = max(range(i, k), key=lambda r: abs(m[r][i]))
        if abs(m[p][i]) < 1e-12:
            raise ValueError("fit_power: the sizes (and worker counts) do not determine the fit")
        m[i], m[p] = m[p], m[i]
        for r in range(i + 1, k):
            f = m[r][i] / m[i][i]
            m[r] = [x - f * y for x, y in zip(m[r], m[i])]
    x = [0.0] * k
    for i in reversed(range(k)):
        x[i] = (m[i][k] - sum(m[i][j] * x[j] for j in range(i + 1, k))) / m[i][i]
    return x


def fit_power(n: list[float], y: list[float], m: list[float] | None = None, intervals: bool = True) -> PowerFit:
    """Least squares of log y on log N (and log M where ``m`` is given): the fit and its 95% intervals.

    1. X = [1, log N (, log M)], z = log y; 2. coef = (X^T X)^-1 X^T z; 3. s^2 = |z - X coef|^2 / (n - k);
    4. interval coef_j -+ t_{0.975, n-k} s sqrt((X^T X)^-1_jj), A's from coef_0's (exp of its ends); nan with
    no residual degrees of freedom or ``intervals`` False (no scipy import: the advisor's use)."""
    if len(n) != len(y) or (m is not None and len(m) != len(n)):
        raise ValueError(f"fit_power: {len(n)} sizes, {len(y)} values, {len(m or [])} worker counts differ")
    if any(not v > 0 for v in [*n, *y, *(m or [])]):
        raise ValueError("fit_power: every size, value and worker count must be positive")
    X = [[1.0, math.log(a)] + ([math.log(m[i])] if m else []) for i, a in enumerate(n)]
    z = [math.log(v) for v in y]
    k = len(X[0])
    if len(n) < k:
        raise ValueError(f"fit_power: {len(n)} points cannot fit {k} coefficients")
    xtx = [[sum(r[i] * r[j] for r in X) for j in range(k)] for i in range(k)]
    coef = _solve(xtx, [sum(r[i] * v for r, v in zip(X, z)) for i in range(k)])
    dof = len(n) - k
    half = [math.nan] * k
    if intervals and dof > 0:
        from scipy.stats import t as student_t  # lazy: only the report's intervals need it

        s2 = sum((v - sum(c * x for c, x in zip(coef, r))) ** 2 for r, v in zip(X, z)) / dof
        tq = float(student_t.ppf(0.975, dof))
        inv = [_solve(xtx, [1.0 if i == j else 0.0 for i in range(k)]) for j in range(k)]
        half = [tq * math.sqrt(max(inv[j][j], 0.0) * s2) for j in range(k)]
    b = (coef[2], coef[2] - half[2], coef[2] + half[2]) if m else (math.nan,) * 3
    return PowerFit(math.exp(coef[0]), coef[1], coef[1] - half[1], coef[1] + half[1], len(n), *b,
                    math.exp(coef[0] - half[0]), math.exp(coef[0] + half[0]))


def _first_reach(curve: list[tuple[float, float]], target: float) -> float:
    """First step at which the running minimum of ``curve`` ((step, loss), in step order) reaches ``target``,
    interpolated linearly between evaluations; nan if it never does."""
    best, prev = math.inf, None
    for step, loss in curve:
        loss = min(loss, best)
        if loss <= target:
            if prev is None or prev[1] == loss:
                return float(step)
            (s0, l0) = prev
            return s0 + (step - s0) * (l0 - target) / (l0 - loss)
        best, prev = loss, (step, loss)
    return math.nan


def step_multiplier(dense: list[tuple[float, float]], method: list[tuple[float, float]]) -> float:
    """s of the module docstring from two evaluation curves ((step, loss) in step order, the last point each
    run's final evaluation)."""
    l_dense, l_method = dense[-1][1], method[-1][1]
    if l_method >= l_dense:
        t = _first_reach(dense, l_method)
        return method[-1][0] / t if t > 0 else math.nan
    t = _first_reach(method, l_dense)
    return t / dense[-1][0]


def _mean_curve(curves: list[list[tuple[float, float]]]) -> list[tuple[float, float]]:
    """The mean loss over seeds at the evaluation steps every seed shares."""
    steps = set.intersection(*(set(s for s, _ in c) for c in curves))
    return [(s, sum(dict(c)[s] for c in curves) / len(curves)) for s in sorted(steps)]


POINT_COLUMNS = ["family", "workers", "params", "loss_ratio", "step_multiplier", "seeds", "dense_seeds"]


def points(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The trends' points from run records: one dict per run with ``family`` ("dense" for DP; "diloco",
    "sparsify", "lowrank", "sparseloco", "muloco"), ``workers``, ``params`` and ``curve`` ((step, val_loss)
    of its evaluations, the last its final one). One row (:data:`POINT_COLUMNS`) per (family, workers, size)
    with DP measured at that size: the seed-mean curves' loss ratio and step multiplier."""
    by: dict[tuple[str, int, int], list[list[tuple[float, float]]]] = {}
    for r in records:
        key = (r["family"], 1 if r["family"] == "dense" else int(r["workers"]), int(r["params"]))
        by.setdefault(key, []).append([(float(s), float(v)) for s, v in r["curve"]])
    out = []
    for fam, m, n in sorted(k for k in by if k[0] != "dense"):
        if ("dense", 1, n) not in by:
            continue
        d, c = _mean_curve(by[("dense", 1, n)]), _mean_curve(by[(fam, m, n)])
        out.append({"family": fam, "workers": m, "params": n, "loss_ratio": c[-1][1] / d[-1][1],
                    "step_multiplier": step_multiplier(d, c), "seeds": len(by[(fam, m, n)]),
                    "dense_seeds": len(by[("dense", 1, n)])})
    return out


def read(path: str | Path | None = None) -> list[dict[str, Any]]:
    """The points at ``path``, else the report's (``GENERATED``: E12's tidy table) where built, else the copy
    shipped with lowbw; an absent file gives none. A CSV whose first lines are ``# key: value`` comments."""
    p = Path(path) if path else GENERATED if GENERATED.is_file() else SHIPPED
    if path and not p.is_file():
        raise ValueError(f"size trend file {path} does not exist")
    if not p.is_file():
        return []
    lines = [ln for ln in p.read_text(encoding="utf-8").splitlines() if ln and not ln.startswith("#")]
    rows = []
    for r in csv.DictReader(lines):
        rows.append({"family": r["family"], "workers": int(float(r["workers"])), "params": float(r["params"]),
                     "loss_ratio": float(r["loss_ratio"] or "nan"),
                     "step_multiplier": float(r["step_multiplier"] or "nan")})
    return rows


def trend(rows: list[dict[str, Any]], family: str, workers: int, quantity: str) -> PowerFit | None:
    """``quantity`` (loss_ratio or step_multiplier) of ``family`` at ``workers`` as a power law in N fitted on
    its finite positive points (None with fewer than two sizes)."""
    ok = [(r["params"], r[quantity]) for r in rows if r["family"] == family and r["workers"] == workers
          and math.isfinite(r[quantity]) and r[quantity] > 0]
    if len({n for n, _ in ok}) < 2:
        return None
    return fit_power([n for n, _ in ok], [v for _, v in ok], intervals=False)


def charles_ratio(n: float, m: int) -> float:
    """Charles et al.'s DiLoCo-over-DP loss ratio at N parameters and M replicas (per-M fits at 1, 2, 4, 8,
    else the joint fit)."""
    a_dp, al_dp = CHARLES_FITS["DP"]
    if str(m) in CHARLES_FITS:
        a, al = CHARLES_FITS[str(m)]
        return a / a_dp * n ** (al - al_dp)
    a, al, be = CHARLES_JOINT
    return a * n ** al * m ** be / (a_dp * n ** al_dp)


@dataclass(frozen=True)
class SizeAnswer:
    """A family's trend evaluated at the user's size and workers."""

    family: str  # the trend's family
    workers: int  # the measured M it was taken at (the nearest to the user's, in log M)
    params: float  # the user's N
    extrapolated: bool  # N outside the measured sizes
    ours_loss_ratio: float  # our micro-scale law's L_f / L_DP at N
    ours_step_multiplier: float  # our law's step multiplier at N (nan: not fitted)
    charles_loss_ratio: float  # Charles et al.'s at N and the user's M (nan: not the DiLoCo family)
    used: str  # which law the loss ratio is taken from: "ours" or "Charles et al."

    @property
    def loss_ratio(self) -> float:
        return self.charles_loss_ratio if self.used == "Charles et al." else self.ours_loss_ratio

    @property
    def spread(self) -> float:
        """|ours - Charles et al.'s| loss ratio (nan where there is one law)."""
        return abs(self.ours_loss_ratio - self.charles_loss_ratio)

    def words(self) -> str:
        ours = f"ours {self.ours_loss_ratio:.3f}x dense's loss"
        if math.isfinite(self.ours_step_multiplier):
            ours += f" ({self.ours_step_multiplier:.2f}x its steps)"
        where = f"{self.params:.3g} parameters, measured {self.family} at M={self.workers}"
        if math.isfinite(self.charles_loss_ratio):
            return (f"{where}: used {self.used}'s law; Charles et al. {self.charles_loss_ratio:.3f}x, {ours}; "
                    f"spread {self.spread:.3f}")
        return f"{where}: used our micro-scale law (no published one): {ours}"


def trend_key(name: str, family: str) -> str:
    """The trend family of an advisor candidate: MuLoCo (Muon inner steps) is its own, else the candidate's."""
    return "muloco" if name.startswith("muloco") else family


def answer(rows: list[dict[str, Any]], family: str, params: float, workers: int) -> SizeAnswer | None:
    """The family's trend at ``params`` and ``workers``, taken at the measured M nearest the user's in log M
    (None: no trend for the family)."""
    have = sorted({r["workers"] for r in rows if r["family"] == family})
    if not have:
        return None
    m = min(have, key=lambda w: abs(math.log(w) - math.log(max(workers, 1))))
    loss, steps = trend(rows, family, m, "loss_ratio"), trend(rows, family, m, "step_multiplier")
    if loss is None:
        return None
    sizes = [r["params"] for r in rows if r["family"] == family and r["workers"] == m]
    charles = charles_ratio(params, max(workers, 1)) if family == DILOCO else math.nan  # their law is DiLoCo's
    used = "Charles et al." if family == DILOCO and params > max(sizes) else "ours"
    return SizeAnswer(family, m, float(params), not min(sizes) <= params <= max(sizes), loss(params),
                      steps(params) if steps else math.nan, charles, used)


def annotate(ranking: list, params: float, workers: int, rows: list[dict[str, Any]]) -> tuple[list, list[str]]:
    """The advisor's hook: ``ranking`` (lowbw.advise.rank.Advice, best first) with every row whose family has a
    trend and whose model lies outside the measured sizes marked ``extrapolated (size)``, and one line per
    such family saying which law was used and the spread between the two (the ranking's order and step
    ratios are unchanged: they rest on the efficiency table)."""
    out, lines, seen = [], [], set()
    for a in ranking:
        key = trend_key(a.candidate.name, a.candidate.family)
        ans = answer(rows, key, params, workers)
        if ans is not None and ans.extrapolated:
            a = replace(a, efficiency=replace(a.efficiency, confidence=EXTRAPOLATED))
            if key not in seen:
                seen.add(key)
                lines.append(f"{key}: {ans.words()}")
        out.append(a)
    if lines:
        sizes = [r["params"] for r in rows]
        lines.insert(0, f"size trend: your model lies outside the measured sizes ({min(sizes):,.0f}-"
                        f"{max(sizes):,.0f} parameters); rows of these families are marked '{EXTRAPOLATED}':")
    return out, lines
