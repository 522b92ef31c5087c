"""The advisor's compute per step on this machine: the trainer's local step of lowbw's models timed at several
batch sizes and fitted as a fixed cost per step plus a cost per sample, and each optimiser's update of the
model's parameters.

A per-sample cost measured at one small batch, applied linearly at a larger one, overcharges: the fixed part
(kernel launches, the optimizer-free bookkeeping of autograd, weights read once per pass) is paid once per step,
not once per sample. For each model (built as the trainer builds it on its dataset:
:func:`lowbw.advise.workload.build_named`) and each batch in ``--batches`` (samples per worker), the trainer's
local step (:meth:`lowbw.train.replicas.Replicas.forward_backward`: forward, mean cross-entropy, backward, the
gradient copied into the flat row, on a random batch of the model's input shape) is timed ``--reps`` times after
one warm-up in CPU seconds of the calling thread (one torch thread runs the work there, so this is the step's
cost on an idle core however busy the shared machine is; the wall seconds are kept beside), the median kept (a
step's typical cost: the advisor sums steps), and ``t(b) = fixed_s + per_sample_s * b`` is fitted by least
squares weighted by ``1 / t``. Beside it, per model, the median CPU seconds of one update of its parameters by
each optimiser of :data:`OPTIMIZERS` (the trainer's ``make_optimizer`` at the config's defaults:
``optimizer_s``) and of DiLoCo's outer step (the pseudo-gradient, a Nesterov SGD step of theta_start, the copy
back to the replica: ``outer_s``). ``--threads`` defaults to 1: what each of two testbed workers gets on two
cores (:func:`lowbw.train.world.default_threads`). The file (provenance and the machine's conditions included) is
``config/compute_fit.json``, read by :mod:`lowbw.advise.workload`.

    python -m lowbw.bench.compute_fit [--models gpt-mini mlp resnet20] [--batches 4 8 16 32 64] [--threads 1]
        [--strict]
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

import numpy as np
import torch

from lowbw.advise.workload import FIT_FILE, build_named
from lowbw.bench.e8.calls import probe_batch
from lowbw.data.text import TEXT_SPECS
from lowbw.measure import conditions
from lowbw.runs.io import atomic_write_json, provenance
from lowbw.train.config import RunConfig
from lowbw.train.optim import FlatOptimizer, make_optimizer
from lowbw.train.replicas import Replicas
from lowbw.train.workload_specs import GPT_SIZES, workload_of

__all__ = ["FIT_FILE", "OPTIMIZERS", "time_cpu", "time_batch", "time_updates", "fit", "run", "main"]

OPTIMIZERS = ("sgd", "adamw", "adam")  # the inner optimisers whose update is timed (the presets' choices)
OUTER_LR, OUTER_MOMENTUM = 0.7, 0.9  # DiLoCo's outer Nesterov step (Douillard et al. 2023; the presets')


def time_cpu(fn, reps: int) -> tuple[float, float]:
    """(median CPU seconds, median wall seconds) of ``fn()`` over ``reps`` calls after one warm-up. With one
    torch thread the work runs on the calling thread, so its CPU time (``time.thread_time``) is what it costs
    on an idle core, whatever else the machine runs; the wall time is kept beside it."""
    cpu, wall = [], []
    for i in range(reps + 1):
        c, t = time.thread_time(), time.perf_counter()
        fn()
        if i:
            cpu.append(time.thread_time() - c)
            wall.append(time.perf_counter() - t)
    return float(np.median(cpu)), float(np.median(wall))


def data_shape(name: str) -> tuple[list[int], int]:
    """lowbw model ``name``'s input on its dataset as :func:`lowbw.bench.e8.calls.probe_batch` takes it:
    ``([T], vocabulary)`` for a language model (its size's context), ``([C, H, W], classes)`` for an image
    model."""
    spec = workload_of(name)
    if spec.kind == "text":
        return [GPT_SIZES[name].block_size], TEXT_SPECS[spec.dataset].vocab_size
    return [spec.in_channels, spec.image_size, spec.image_size], spec.num_classes


def time_batch(rep: Replicas, shape: tuple[list[int], int], batch: int, reps: int) -> tuple[float, float]:
    """:func:`time_cpu` of the trainer's local step of ``rep`` (one replica) on a random batch of ``batch``
    samples of ``shape``."""
    x, y = probe_batch(shape, batch)
    return time_cpu(lambda: rep.forward_backward([x], [y]), reps)


def time_updates(rep: Replicas, reps: int) -> tuple[dict[str, float], float]:
    """(median CPU seconds of one update of ``rep``'s parameters per optimiser of :data:`OPTIMIZERS`, of one
    DiLoCo outer step: Delta = theta_start - theta, theta_start's Nesterov SGD step, theta <- theta_start)."""
    params, grads = rep.params, torch.randn_like(rep.params) * 1e-3
    out = {}
    for kind in OPTIMIZERS:
        opt = make_optimizer(RunConfig.from_dict({"optimizer": kind}), 1, rep.P, params.device, rep.p_layout)
        out[kind] = time_cpu(lambda o=opt: o.step(params, grads, 1e-6), reps)[0]
    start = params.clone()
    outer = FlatOptimizer("sgd", (1, rep.P), params.device, momentum=OUTER_MOMENTUM, nesterov=True)

    def outer_step():
        outer.step(start, start - params, OUTER_LR)
        params.copy_(start)

    return out, time_cpu(outer_step, reps)[0]


def fit(batches: list[int], times: list[float]) -> tuple[float, float, float]:
    """(fixed_s, per_sample_s, largest relative residual) of ``t = fixed + per_sample * b``, weighted by 1/t."""
    a = np.array([[1.0, float(b)] for b in batches])
    t = np.array(times)
    w = 1.0 / t
    coef = np.linalg.lstsq(a * w[:, None], t * w, rcond=None)[0]
    if coef[0] < 0:  # no fixed cost resolvable: per sample alone
        coef = np.array([0.0, float(np.sum(t * w * a[:, 1] * w) / np.sum((a[:, 1] * w) ** 2))])
    return float(coef[0]), float(coef[1]), float(np.max(np.abs(a @ coef / t - 1)))


def run(models: list[str], batches: list[int], reps: int = 9, threads: int = 1, log=print
        ) -> tuple[dict[str, Any], conditions.Conditions]:
    """(the fit file's contents, the machine's conditions while it measured)."""
    if len(set(batches)) < 3:
        raise ValueError(f"--batches {batches}: at least three distinct batch sizes fit a fixed and a per-sample cost")
    if threads != 1:
        raise ValueError(f"--threads {threads}: the CPU time of the calling thread is the pass's cost only with 1")
    torch.set_num_threads(threads)
    rec = conditions.record().start()
    out = {}
    for name in models:
        torch.manual_seed(0)
        rep = Replicas(build_named(name, "cpu"), 1)
        shape = data_shape(name)
        timed = [time_batch(rep, shape, b, reps) for b in batches]
        fixed, per, resid = fit(batches, [t for t, _ in timed])
        updates, outer = time_updates(rep, reps)
        out[name] = {"batches": batches, "times_s": [t for t, _ in timed], "wall_times_s": [t for _, t in timed],
                     "fixed_s": fixed, "per_sample_s": per, "fit_max_rel_residual": resid, "params": rep.P,
                     "input_shape": shape[0], "classes": shape[1], "optimizer_s": updates, "outer_s": outer}
        log(f"{name:<12} fixed {fixed * 1e3:7.2f} ms + {per * 1e3:7.3f} ms/sample  residual {100 * resid:.0f}%  "
            + "  ".join(f"{k} {v * 1e3:.3f} ms" for k, v in updates.items()) + f"  outer {outer * 1e3:.3f} ms")
    cond = rec.stop()
    return {"models": out, "threads": threads, "reps": reps, "conditions": cond.to_json(),
            "what": "the trainer's local step (Replicas.forward_backward: forward, mean cross-entropy, backward, "
                    "gradient into the flat row) per step at the model's input on its dataset, CPU seconds of the "
                    "calling thread (one torch thread: the cost on an idle core), median of reps after one "
                    "warm-up, wall seconds beside; fit t = fixed + per_sample * batch weighted by 1/t; "
                    "optimizer_s: one update of the parameters per optimiser (make_optimizer's defaults), "
                    "outer_s: DiLoCo's outer step (pseudo-gradient, Nesterov SGD of theta_start, copy back), "
                    "median CPU seconds", "provenance": provenance()}, cond


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m lowbw.bench.compute_fit", description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=["gpt-mini", "mlp", "resnet20"])
    ap.add_argument("--batches", type=int, nargs="+", default=[4, 8, 16, 32, 64])
    ap.add_argument("--reps", type=int, default=9)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default=str(FIT_FILE))
    conditions.add_strict_flag(ap)
    a = ap.parse_args(argv)
    try:
        out, cond = run(a.models, a.batches, a.reps, a.threads, log=lambda s: print(s, file=sys.stderr, flush=True))
    except ValueError as e:
        print(f"lowbw.bench.compute_fit: {e}", file=sys.stderr)
        return 2
    if not conditions.check(cond, "lowbw bench compute_fit", a.out, a.strict):
        return 1
    atomic_write_json(a.out, out)
    print(a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
