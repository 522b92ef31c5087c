"""E11's second comparison: the advisor's step-time model of DiLoCo against data-parallel training, set beside the
analytic wall-clock model of the DiLoCo scaling-law paper (Charles et al. 2025, arXiv 2503.09799, Appendix A).

The paper's model, as restated by the public DiLoCo calculator that cites its Appendix A.2-A.3 (we could not
read the appendix itself, so we use that restatement and say so in the paper): M replicas train a model of N
parameters in bf16 on R accelerators at Q FLOP/s each, D tokens in T steps of B tokens,

    T_comp  = 6 N D / (R Q)                                 (compute, no communication overlap)
    T_inter = [2 S / W (1 - 1/R) + eps] * T / H             (one all-reduce of the S = 2N bytes every H steps)

with W the cross-replica bandwidth and eps a latency per synchronisation; data-parallel training is H = 1. Per
step: ``C + (2 S / W (1 - 1/R) + eps) / H`` with C = 6 N B / (R Q). We evaluate it with one accelerator per
replica (R = M; the paper's intra-replica term is then zero) on a grid of our choosing (:data:`GRID`).

The advisor's model (``lowbw.advise``, :mod:`lowbw.net.costmodel`) for the same step: the fastest all-reduce the
cost model knows for S bytes over M workers on links of rate W and one-way latency alpha (each algorithm's own
alpha-beta cost: a ring pays 2 (M-1) alpha, a butterfly 2 log2 M alpha), every H steps; a data-parallel step's
exchange overlaps the backward pass (DDP's buckets), DiLoCo's outer exchange does not.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import product

from lowbw.comm.algorithms import OWN_ALLREDUCE_ALGORITHMS
from lowbw.net.costmodel import LinkParams, allreduce_time, step_time
from lowbw.report.latex import booktabs, escape, fmt_num

__all__ = ["Setting", "GRID", "charles_step", "advisor_step", "rows", "summary", "numbers", "table"]

TOKENS_PER_STEP = 2 ** 20  # B: global batch in tokens (about a million, the scale of the paper's largest runs)
FLOPS_PER_ACCELERATOR = 4e14  # Q: 40% of an H100's 989 TFLOP/s bf16 peak
BYTES_PER_PARAM = 2  # bf16 parameters and pseudo-gradients, as the paper's model assumes
LATENCY_S = 0.01  # eps of the paper's model and the advisor's one-way alpha: 10 ms, a cross-region link


@dataclass(frozen=True)
class Setting:
    """One point of the comparison."""

    params: float  # N
    replicas: int  # M (= R: one accelerator per replica)
    gbit_s: float  # W, each replica's link, Gbit/s
    period: int  # H (1: data-parallel)

    @property
    def compute_s(self) -> float:
        """C = 6 N B / (R Q): one step's forward and backward, s."""
        return 6 * self.params * TOKENS_PER_STEP / (self.replicas * FLOPS_PER_ACCELERATOR)

    @property
    def sync_bytes(self) -> float:
        """S: the bytes one synchronisation all-reduces."""
        return BYTES_PER_PARAM * self.params


GRID = tuple(Setting(n, m, w, h) for n, m, w, h in product((1e9, 1e10), (2, 8), (1.0, 10.0, 100.0), (1, 30, 100)))


def charles_step(s: Setting, eps_s: float = LATENCY_S) -> float:
    """The paper's seconds per step: C + (2 S / W (1 - 1/R) + eps) / H, R = M."""
    return s.compute_s + (2 * s.sync_bytes * 8 / (s.gbit_s * 1e9) * (1 - 1 / s.replicas) + eps_s) / s.period


def advisor_step(s: Setting, alpha_s: float = LATENCY_S) -> tuple[float, str]:
    """The advisor's seconds per step and the all-reduce it takes (see the module docstring)."""
    link = LinkParams(alpha_s=alpha_s, bandwidth_bps=s.gbit_s * 1e9)
    comm, algo = min((allreduce_time(a, s.sync_bytes, s.replicas, link), a) for a in OWN_ALLREDUCE_ALGORITHMS)
    if s.period == 1:
        return step_time(s.compute_s, comm, overlap=True), algo
    return s.compute_s + comm / s.period, algo


def rows() -> list[dict]:
    """Every :data:`GRID` point: both models' step, their ratio, and the speed-up of DiLoCo over data-parallel
    each model predicts at the same N, M and W."""
    out = []
    for s in GRID:
        ours, algo = advisor_step(s)
        dp = Setting(s.params, s.replicas, s.gbit_s, 1)
        out.append({"params": s.params, "replicas": s.replicas, "gbit_s": s.gbit_s, "period": s.period,
                    "compute_s": s.compute_s, "charles_s": charles_step(s), "advisor_s": ours, "algorithm": algo,
                    "ratio": ours / charles_step(s),
                    "speedup_charles": charles_step(dp) / charles_step(s),
                    "speedup_advisor": advisor_step(dp)[0] / ours})
    return out


def summary(table: list[dict]) -> dict[str, float]:
    """Largest |advisor / paper - 1| over DiLoCo points (H > 1) and over data-parallel points, and the largest
    ratio of the two models' DiLoCo speed-ups over data-parallel."""
    dil = [r for r in table if r["period"] > 1]
    dp = [r for r in table if r["period"] == 1]
    return {"diloco_max_dev": max(abs(r["ratio"] - 1) for r in dil),
            "dp_max_dev": max(abs(r["ratio"] - 1) for r in dp),
            "dp_min_ratio": min(r["ratio"] for r in dp),
            "speedup_max_dev": max(abs(r["speedup_advisor"] / r["speedup_charles"] - 1) for r in dil),
            "finite": float(all(math.isfinite(r["ratio"]) for r in table))}


def numbers() -> dict[str, str]:
    """E11's macros of this comparison (the largest deviations of the advisor's model from the paper's)."""
    t = rows()
    sm = summary(t)
    return {"EElevenCharlesPoints": str(len(t)),
            "EElevenCharlesDilocoDev": fmt_num(100 * sm["diloco_max_dev"], 2),
            "EElevenCharlesDpDev": fmt_num(100 * sm["dp_max_dev"], 2),
            "EElevenCharlesSpeedupDev": fmt_num(100 * sm["speedup_max_dev"], 2)}


def table() -> str:
    """The grid as E11's second table: both models' seconds per step and DiLoCo's speed-up over data-parallel
    training in each."""
    cells = []
    for r in rows():
        cells.append([f"{r['params'] / 1e9:g}B", str(r["replicas"]), f"{r['gbit_s']:g}",
                     "DP" if r["period"] == 1 else str(r["period"]), fmt_num(r["compute_s"], 3),
                     fmt_num(r["charles_s"], 3), fmt_num(r["advisor_s"], 3), escape(r["algorithm"]),
                     fmt_num(r["ratio"], 3), fmt_num(r["speedup_charles"], 3), fmt_num(r["speedup_advisor"], 3)])
    return booktabs(cells, ["$N$", "$M$", "Gbit/s", "$H$", "$C$ (s)", "Charles (s)", "Advisor (s)", "All-reduce",
                           "Ratio", "Speed-up (Charles)", "Speed-up (advisor)"],
                    "Seconds per step of data-parallel training (DP) and DiLoCo every $H$ steps in the analytic "
                    r"wall-clock model of Charles et al.\ (2025, Appendix A, as restated by the public DiLoCo "
                    "calculator) and in the advisor's model, at one accelerator per replica, bf16 parameters, "
                    f"$2^{{20}}$ tokens per step at {FLOPS_PER_ACCELERATOR / 1e12:g} TFLOP/s per "
                    f"accelerator and {1e3 * LATENCY_S:g} ms latency (our choices). Ratio = advisor / "
                    "Charles; speed-up = DP's step / DiLoCo's in each model. A model against a model, no "
                    "measurement: the table shows that the advisor charges what the paper's accounting charges, "
                    "not that either predicts a real step.", "tab:e11-walltime",
                    size=r"\scriptsize")
