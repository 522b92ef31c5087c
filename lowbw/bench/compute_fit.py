"""The advisor's compute per step on this machine: forward + backward of lowbw's models timed at several batch
sizes and fitted as a fixed cost per step plus a cost per sample.

A per-sample cost measured at one small batch, applied linearly at a larger one, overcharges: the fixed part
(kernel launches, the optimizer-free bookkeeping of autograd, weights read once per pass) is paid once per step,
not once per sample. For each model and each batch in ``--batches`` (samples per worker), one forward + backward
(loss: the output's sum) is timed ``--reps`` times after one warm-up in CPU seconds of the calling thread (one
torch thread runs the work there, so this is the pass's cost on an idle core however busy the shared machine
is; the wall seconds are kept beside), the fastest kept, and ``t(b) = fixed_s + per_sample_s * b`` is fitted by least
squares weighted by ``1 / t``. ``--threads`` defaults to 1: what each of two testbed workers gets on two cores
(:func:`lowbw.train.world.default_threads`). The file (provenance and the machine's conditions included) is
``config/compute_fit.json``, read by :mod:`lowbw.advise.workload`.

    python -m lowbw.bench.compute_fit [--models gpt-mini mlp resnet20] [--batches 4 8 16 32 64] [--threads 1]
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

import numpy as np
import torch

from lowbw.advise.workload import FIT_FILE, build_named, example_input
from lowbw.measure import conditions
from lowbw.runs.io import atomic_write_json, provenance

__all__ = ["FIT_FILE", "time_batch", "fit", "run", "main"]


def time_batch(model, x, reps: int) -> tuple[float, float]:
    """(fastest CPU seconds, fastest wall seconds) of forward + backward of ``x`` after one warm-up. With one
    torch thread the work runs on the calling thread, so its CPU time (``time.thread_time``) is what the pass
    costs on an idle core, whatever else the machine runs; the wall time is kept beside it."""
    cpu, wall = [], []
    for i in range(reps + 1):
        c, t = time.thread_time(), time.perf_counter()
        model(x).float().sum().backward()
        model.zero_grad(set_to_none=True)
        if i:
            cpu.append(time.thread_time() - c)
            wall.append(time.perf_counter() - t)
    return min(cpu), min(wall)


def fit(batches: list[int], times: list[float]) -> tuple[float, float, float]:
    """(fixed_s, per_sample_s, largest relative residual) of ``t = fixed + per_sample * b``, weighted by 1/t."""
    a = np.array([[1.0, float(b)] for b in batches])
    t = np.array(times)
    w = 1.0 / t
    coef = np.linalg.lstsq(a * w[:, None], t * w, rcond=None)[0]
    if coef[0] < 0:  # no fixed cost resolvable: per sample alone
        coef = np.array([0.0, float(np.sum(t * w * a[:, 1] * w) / np.sum((a[:, 1] * w) ** 2))])
    return float(coef[0]), float(coef[1]), float(np.max(np.abs(a @ coef / t - 1)))


def run(models: list[str], batches: list[int], reps: int = 5, threads: int = 1, log=print) -> dict[str, Any]:
    if len(set(batches)) < 3:
        raise ValueError(f"--batches {batches}: at least three distinct batch sizes fit a fixed and a per-sample cost")
    if threads != 1:
        raise ValueError(f"--threads {threads}: the CPU time of the calling thread is the pass's cost only with 1")
    torch.set_num_threads(threads)
    rec = conditions.record().start()
    out = {}
    for name in models:
        torch.manual_seed(0)
        m = build_named(name, "cpu")
        timed = [time_batch(m, example_input(name, m, b, "cpu"), reps) for b in batches]
        fixed, per, resid = fit(batches, [t for t, _ in timed])
        out[name] = {"batches": batches, "times_s": [t for t, _ in timed], "wall_times_s": [t for _, t in timed],
                     "fixed_s": fixed, "per_sample_s": per, "fit_max_rel_residual": resid}
        log(f"{name:<12} fixed {fixed * 1e3:7.2f} ms + {per * 1e3:7.3f} ms/sample  residual {100 * resid:.0f}%")
    cond = rec.stop()
    conditions.check(cond, "lowbw bench compute_fit")
    return {"models": out, "threads": threads, "reps": reps, "conditions": cond.to_json(),
            "what": "forward + backward (loss: output sum) per step, CPU seconds of the calling thread (one torch "
                    "thread: the cost on an idle core), fastest of reps after one warm-up, wall seconds beside; fit "
                    "t = fixed + per_sample * batch weighted by 1/t", "provenance": provenance()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m lowbw.bench.compute_fit", description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=["gpt-mini", "mlp", "resnet20"])
    ap.add_argument("--batches", type=int, nargs="+", default=[4, 8, 16, 32, 64])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default=str(FIT_FILE))
    a = ap.parse_args(argv)
    try:
        out = run(a.models, a.batches, a.reps, a.threads, log=lambda s: print(s, file=sys.stderr, flush=True))
    except ValueError as e:
        print(f"lowbw.bench.compute_fit: {e}", file=sys.stderr)
        return 2
    atomic_write_json(a.out, out)
    print(a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
