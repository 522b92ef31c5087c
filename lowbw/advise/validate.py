"""``lowbw advise --validate``: the ranking's top three and dense trained for a short horizon on the testbed
(one process per worker, every byte through a tc-shaped link at the advice's rates and latency), and each
one's predicted step time set beside the one measured.

The advisor predicts a step as ``compute + compression + communication`` for one machine per worker. The
testbed runs every worker on this machine, so its compute is slower by the sharing of cores (N processes on
C cores: about N/C), which the prediction does not model. The check therefore also splits the step:

* ``compute``: the forward and backward pass (measured: the run's ``t_compute`` per step);
* ``rest = step - compute``: compression and communication, what the advisor's network model predicts.

A method whose ``rest`` agrees while its step does not is right about the network and wrong only about this
machine's cores. Measured per step = d(t_step - t_meta) / d step between the first logged step after
:data:`WARMUP` and the last (``t_meta``: lowbw's own bookkeeping exchanges, not training).
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from lowbw.advise.candidates import CONFIG_FILE
from lowbw.comm.algorithms import ALLREDUCE_ALGORITHMS
from lowbw.measure.presets import load_methods
from lowbw.train.workload_specs import workload_of

__all__ = ["Check", "WARMUP", "plan", "run_config", "measured_per_step", "validate", "format_checks"]

WARMUP = 4  # steps left out of the slope: first-call set-up (buffers, connections, allocator)
EXTRA = 3  # methods after the top three: dense is always checked, as the baseline the ranking is against


@dataclass(frozen=True)
class Check:
    """One method's predicted against measured step, on the testbed."""

    method: str  # the preset's name
    rank: int  # its place in the ranking (1 = best)
    steps: int  # steps trained (WARMUP of them left out of the slope)
    predicted_step_s: float  # the advisor's step (s)
    measured_step_s: float  # the testbed's step (s)
    predicted_compute_s: float  # the advisor's forward + backward (one machine per worker)
    measured_compute_s: float  # the testbed's forward + backward (N processes on this machine's cores)
    predicted_rest_s: float  # the advisor's compression + communication per step
    measured_rest_s: float  # the testbed's step less its compute
    run_dir: str  # the testbed run

    @property
    def step_err(self) -> float:
        """measured / predicted - 1 of the whole step."""
        return self.measured_step_s / self.predicted_step_s - 1

    @property
    def rest_err(self) -> float | None:
        """measured / predicted - 1 of compression + communication (None where nothing was predicted)."""
        return self.measured_rest_s / self.predicted_rest_s - 1 if self.predicted_rest_s > 0 else None

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "step_err": self.step_err, "rest_err": self.rest_err}


def dataset_for(model: str) -> str:
    """The dataset a lowbw model trains on here: its workload spec's (lowbw.train.workload_specs)."""
    return workload_of(model).dataset


def check_inputs(model: str | None, kind: str | None = None) -> None:
    """One-line errors before any work: ``--validate`` trains lowbw's own models, as root (the testbed)."""
    if model is None:
        raise ValueError("--validate: needs --model (one of lowbw's models): a --model-file or --params "
                         "workload cannot be trained here")
    if hasattr(os, "geteuid") and os.geteuid() != 0:
        raise ValueError("--validate: the testbed needs root (network namespaces and tc); run as root")


def plan(ranking: list, top: int = EXTRA) -> list[tuple[int, Any]]:
    """(rank, advice) of the ``top`` best methods that reach the target, and dense if it is not among them."""
    ok = [(i, a) for i, a in enumerate(ranking, 1) if a.reaches]
    chosen = ok[:top]
    if not any(a.candidate.name == "dense" for _, a in chosen):
        chosen += [(i, a) for i, a in enumerate(ranking, 1) if a.candidate.name == "dense"]
    return chosen


def run_config(advice, inputs: dict[str, Any], steps: int, preset: dict[str, Any]) -> dict[str, Any]:
    """The procs + testbed run config of one method at the advice's workers, rates, latency and batch."""
    n = inputs["workers"]
    rates = [r / 1e6 for r in inputs["rates_bps"]]
    link = ({"bandwidth_mbit": rates[0]} if len(set(rates)) == 1 else {"worker_bandwidth_mbit": rates})
    # the all-reduce the advice chose (the cost model's fastest for the exchange), not the runs' default ring:
    # the check times what the advisor recommends
    chosen = advice.step.collective if advice is not None else None
    coll = {"collective": chosen} if chosen in ALLREDUCE_ALGORITHMS else {}
    return {**preset, **coll, "model": inputs["model"], "dataset": dataset_for(inputs["model"]),
            "workers": n, "batch_size": inputs["batch"] * n, "steps": steps, "epochs": 0, "seed": 0,
            "latency_ms": 1e3 * inputs["latency_s"], **link, "backend": "procs", "testbed": True,
            "log_every": 1, "eval_every": 1e6, "test_limit": 100, "progress": False}


def horizon(period: int, steps: int) -> int:
    """Steps to train: the warm-up and at least ``steps``, in whole periods (every exchange of a local method
    is in the slope)."""
    return WARMUP + period * max(1, math.ceil(steps / period))


def training_lines(run_dir: Path) -> list[dict[str, Any]]:
    """The metrics lines of a run's training loop, one per step: the first line logged at each step. A run
    whose last step leaves the replicas apart (a local method stopped between two exchanges) writes its last
    step twice, the second time after the final synchronisation (:meth:`lowbw.train.loop.Trainer.run`, its
    step 7), whose exchange counts in ``t_step`` like a step's: not one of the horizon's steps, so left out."""
    lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines() if x.strip()]
    seen: set[int] = set()
    out = []
    for x in lines:
        if x.get("step") not in seen:
            seen.add(x.get("step"))
            out.append(x)
    return out


def measured_per_step(run_dir: Path) -> tuple[float, float]:
    """(step, compute) seconds per step of a run, from its ``metrics.jsonl`` (see the module docstring)."""
    train = [x for x in training_lines(run_dir) if x.get("step", 0) >= WARMUP and x.get("t_step") is not None]
    if len(train) < 2:
        raise ValueError(f"{run_dir}: fewer than two metrics lines after step {WARMUP}")
    a, b = train[0], train[-1]
    n = b["step"] - a["step"]
    return ((b["t_step"] - b.get("t_meta", 0.0)) - (a["t_step"] - a.get("t_meta", 0.0))) / n, \
        (b["t_compute"] - a["t_compute"]) / n


def validate(ranking: list, inputs: dict[str, Any], out_dir: str | os.PathLike, steps: int = 24) -> list[Check]:
    """Train :func:`plan`'s methods on the testbed into ``out_dir/<method>`` and return their checks."""
    from lowbw.train.launch import run  # lazy: the ranking alone needs no torch

    presets = load_methods(CONFIG_FILE)
    checks = []
    for place, a in plan(ranking):
        n_steps = horizon(a.candidate.period, steps)
        cfg = run_config(a, inputs, n_steps, presets[a.candidate.name])
        d = Path(out_dir) / a.candidate.name
        run(cfg, d, overwrite=True, quiet=True)
        step, compute = measured_per_step(d)
        p = a.step
        checks.append(Check(method=a.candidate.name, rank=place, steps=n_steps, predicted_step_s=p.step_s,
                            measured_step_s=step, predicted_compute_s=p.compute_s, measured_compute_s=compute,
                            predicted_rest_s=p.step_s - p.compute_s, measured_rest_s=step - compute,
                            run_dir=str(d)))
    return checks


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:+.0f}%"


def format_checks(checks: list[Check]) -> str:
    """The checks as a table of at most 100 columns (seconds)."""
    head = (f"{'#':>2} {'method':<13}{'steps':>6}{'step pred':>10}{'meas':>8}{'err':>6}"
            f"{'compute pred':>13}{'meas':>8}{'rest pred':>10}{'meas':>8}{'err':>6}")
    lines = [head, "-" * len(head)]
    for c in checks:
        lines.append(f"{c.rank:>2} {c.method:<13}{c.steps:>6}{c.predicted_step_s:>10.3f}{c.measured_step_s:>8.3f}"
                     f"{_pct(c.step_err):>6}{c.predicted_compute_s:>13.3f}{c.measured_compute_s:>8.3f}"
                     f"{c.predicted_rest_s:>10.3f}{c.measured_rest_s:>8.3f}{_pct(c.rest_err):>6}")
    return "\n".join(lines)
