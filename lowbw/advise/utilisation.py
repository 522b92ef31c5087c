"""The link rate a method needs for a compute utilisation: the advisor's step model solved for the bandwidth.

Compute utilisation u = compute / step: the fraction of a step the accelerators spend computing. The step at
link rate r is :func:`lowbw.advise.steptime.predict`'s for the method's candidate, its exchange one flat
all-reduce of ``params x bytes_per_param`` bytes (the fastest algorithm the cost model knows for it) over
``workers`` equal links of rate r and one-way latency alpha, compression not counted. u(r) does not decrease
with r, so the rate for a target u* is found by bisection on log r (to 1e-4 relative), and is ``inf`` where
even an unbounded rate does not reach u* (latency alone exceeds the budget).

    python -m lowbw.advise.utilisation --params 1e10 --step-ms 800 --workers 2 --period 1 100 300 \\
        --utilisation 0.5 0.8 0.9 0.95 0.99 [--bytes-per-param 2] [--latency 0ms]
"""

from __future__ import annotations

import argparse
import math
import sys

from lowbw.advise.candidates import Call, Candidate, Exchange
from lowbw.advise.rates import delay_s
from lowbw.advise.steptime import predict
from lowbw.net.costlinks import WorkerLink

__all__ = ["candidate", "step_s", "utilisation", "bandwidth_for", "main"]


def candidate(period: int) -> Candidate:
    """Data-parallel training (period 1: its exchange overlaps the backward pass, DDP's buckets) or DiLoCo
    every ``period`` steps (its outer exchange blocks), as the advisor's candidates define them."""
    if period == 1:
        return Candidate("dense", "dense", "none", (), None, 1, 1, 0, 0, True)
    return Candidate(f"diloco{period}", "diloco", "none", (), None, period, 1, 0, 0, False)


def step_s(period: int, params: float, bytes_per_param: float, compute_s: float, workers: int, rate_bps: float,
           latency_s: float = 0.0) -> float:
    """The advisor's seconds per step at link rate ``rate_bps`` (bits/s)."""
    nbytes = params * bytes_per_param
    ex = Exchange((Call("all_reduce", nbytes, "world"),), nbytes, 0.0, True)
    links = tuple(WorkerLink(rate_bps, rate_bps, latency_s, 0.0) for _ in range(workers))
    return predict(candidate(period), ex, compute_s, 4.0 * params, links, compress_s=0.0).step_s


def utilisation(period: int, params: float, bytes_per_param: float, compute_s: float, workers: int,
                rate_bps: float, latency_s: float = 0.0) -> float:
    """compute / step at link rate ``rate_bps``."""
    return compute_s / step_s(period, params, bytes_per_param, compute_s, workers, rate_bps, latency_s)


def bandwidth_for(target: float, period: int, params: float, bytes_per_param: float, compute_s: float,
                  workers: int, latency_s: float = 0.0) -> float:
    """The smallest link rate (bits/s) at which the utilisation reaches ``target`` (module docstring)."""
    if not 0 < target < 1:
        raise ValueError(f"--utilisation {target}: a fraction in (0, 1)")
    if workers < 2:
        raise ValueError(f"--workers {workers}: a link rate matters only for >= 2 workers")

    def u(r: float) -> float:
        return utilisation(period, params, bytes_per_param, compute_s, workers, r, latency_s)

    lo, hi = 1.0, 1e18
    if u(hi) < target:
        return math.inf
    while hi / lo > 1 + 1e-4:
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if u(mid) < target else (lo, mid)
    return hi


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m lowbw.advise.utilisation", description=__doc__.splitlines()[0])
    ap.add_argument("--params", type=float, required=True)
    ap.add_argument("--step-ms", type=float, required=True, help="compute per step (forward + backward), ms")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--period", type=int, nargs="+", default=[1], help="1: data-parallel; H: DiLoCo every H steps")
    ap.add_argument("--utilisation", type=float, nargs="+", default=[0.5, 0.8, 0.9, 0.95, 0.99])
    ap.add_argument("--bytes-per-param", type=float, default=2.0, help="2: bf16 (default), 4: fp32")
    ap.add_argument("--latency", default="0ms", help="one-way latency per message")
    a = ap.parse_args(argv)
    try:
        alpha = delay_s(a.latency)
        if not a.params > 0 or not a.step_ms > 0:
            raise ValueError(f"--params {a.params:g} --step-ms {a.step_ms:g}: both must be > 0")
        print("method       " + "".join(f"{f'{100 * u:g}%':>10}" for u in a.utilisation) + "   (Gbit/s)")
        for h in a.period:
            cells = [bandwidth_for(u, h, a.params, a.bytes_per_param, a.step_ms / 1e3, a.workers, alpha) / 1e9
                     for u in a.utilisation]
            print(f"{'DP' if h == 1 else f'DiLoCo H={h}':<13}" + "".join(f"{c:>10.3g}" for c in cells))
    except ValueError as e:
        print(f"lowbw.advise.utilisation: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
