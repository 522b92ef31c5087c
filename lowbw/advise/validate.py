"""``lowbw advise --validate``: the ranking's top three and dense trained for a short horizon on the testbed
(one process per worker, every byte through a tc-shaped link at the advice's rates and latency), and each
one's predicted step time set beside the one measured, term by term.

The advisor predicts a step for one machine per worker (:meth:`lowbw.advise.steptime.StepPrediction.terms`:
compute, the inner optimiser's update, compression, communication, DiLoCo's outer step). The testbed runs every
worker on this machine. Its workers run under SCHED_RR (``testbed_realtime``, :data:`REALTIME`; ``0``: the fair
scheduler), as if each emulated machine had its CPU to itself: under the fair scheduler a worker also waits for
a core behind the other worker, the userspace link emulator (which adds the latency: this kernel has no netem)
and the peers' collective threads, a slow-down of its compute that depends on the latency and on the machine
and that neither the advisor nor E8's probe (on links without delay) models. What sharing the cores still
costs (memory bandwidth, caches) is E8's co-location factor: the check multiplies the CPU terms (compute,
optimiser, compression, outer step) by it (:func:`colocation`: E8's probe's compute of N workers at once against
one alone, over the steps between the method's synchronisations,
:func:`lowbw.measure.colocation.compute_scale_over`, read from E8's stored probes of a like workload under
the same scheduler where stored) and leaves communication as the advisor's cost model has it. The predicted
testbed step is the sum of those terms.

Measured per step (:func:`measured_terms`) = d(t_step - t_meta) / d step between the first logged step after
:data:`WARMUP` and the last step of the training loop (``t_meta``: lowbw's own bookkeeping exchanges, not
training; the final synchronisation after the loop is not a step of the horizon), split into ``compute`` (the
run's ``t_compute``: batch, forward + backward and the optimiser's update, the slowest worker's each step),
``compress`` (``t_compress``), ``comm`` (``t_comm``: inside the collective calls, waits for a later peer
included) and ``rest`` (the step less those three: the outer step and the step's own bookkeeping; negative
where the slowest worker's terms exceed rank 0's step, whose wall clock the step is). A method is within
the target where its step's error is at most :data:`TOLERANCE`.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from lowbw.advise.candidates import CONFIG_FILE
from lowbw.comm.algorithms import ALLREDUCE_ALGORITHMS
from lowbw.measure.colocation import compute_scale_over
from lowbw.measure.presets import load_methods
from lowbw.train.workload_specs import workload_of
from lowbw.workflow.hoststore import HOST_STORE, locate

__all__ = ["Check", "Colocation", "WARMUP", "TOLERANCE", "CPU_TERMS", "REALTIME", "plan", "run_config",
           "measured_per_step", "measured_terms", "colocation", "testbed_terms", "check_of", "validate",
           "format_checks", "write_checks"]

WARMUP = 4  # steps left out of the slope: first-call set-up (buffers, connections, allocator)
EXTRA = 3  # methods after the top three: dense is always checked, as the baseline the ranking is against
TOLERANCE = 0.20  # the target: |measured / predicted - 1| of the step per method (issue 46)
REALTIME = 10  # the workers' SCHED_RR priority (E8's --realtime default); 0: the fair scheduler
CPU_TERMS = ("compute", "optimizer", "compress", "outer")  # the terms that share this machine's cores
ROOT = Path(__file__).resolve().parents[2]  # the repository: runs/bench and the host store are under it
# E8's measurement of each kind of workload whose probes give the co-location factor (lowbw.workflow.hoststore)
PROBES = {"lm": "e2e_lm", "image": "e2e"}


@dataclass(frozen=True)
class Colocation:
    """The slow-down of a worker's CPU work when N workers share this machine's cores."""

    factor: float  # the testbed's CPU seconds per one machine's (>= 0)
    source: str  # where it comes from, in words


@dataclass(frozen=True)
class Check:
    """One method's predicted against measured step, on the testbed."""

    method: str  # the preset's name
    rank: int  # its place in the ranking (1 = best)
    steps: int  # steps trained (WARMUP of them left out of the slope)
    predicted_step_s: float  # the advisor's step on the testbed: the sum of predicted_terms (s)
    measured_step_s: float  # the testbed's step (s)
    predicted_compute_s: float  # the testbed's predicted compute + optimiser (co-located), as t_compute counts
    measured_compute_s: float  # the testbed's t_compute per step (N processes on this machine's cores)
    predicted_rest_s: float  # predicted_step_s - predicted_compute_s
    measured_rest_s: float  # the testbed's step less its compute
    run_dir: str  # the testbed run
    advised_step_s: float = 0.0  # the advisor's step with one machine per worker (its ranking's)
    colocation: float = 1.0  # the factor on predicted_terms' CPU terms (CPU_TERMS)
    colocation_source: str = ""  # where the factor comes from
    predicted_terms: dict[str, float] = field(default_factory=dict)  # StepPrediction.terms() on the testbed (s)
    measured_terms: dict[str, float] = field(default_factory=dict)  # compute, compress, comm, rest (s per step)

    @property
    def step_err(self) -> float:
        """measured / predicted - 1 of the whole step."""
        return self.measured_step_s / self.predicted_step_s - 1

    @property
    def rest_err(self) -> float | None:
        """measured / predicted - 1 of the step less compute (None where nothing was predicted)."""
        return self.measured_rest_s / self.predicted_rest_s - 1 if self.predicted_rest_s > 0 else None

    @property
    def within(self) -> bool:
        """The step's error is within :data:`TOLERANCE`."""
        return abs(self.step_err) <= TOLERANCE

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "step_err": self.step_err, "rest_err": self.rest_err, "within": self.within,
                "tolerance": TOLERANCE}


def dataset_for(model: str) -> str:
    """The dataset a lowbw model trains on here: its workload spec's (lowbw.train.workload_specs)."""
    return workload_of(model).dataset


def check_inputs(model: str | None, kind: str | None = None, realtime: int = 0) -> None:
    """One-line errors before any work: ``--validate`` trains lowbw's own models, as root (the testbed), its
    workers under SCHED_RR where ``realtime`` and this machine allows it."""
    if model is None:
        raise ValueError("--validate: needs --model (one of lowbw's models): a --model-file or --params "
                         "workload cannot be trained here")
    if hasattr(os, "geteuid") and os.geteuid() != 0:
        raise ValueError("--validate: the testbed needs root (network namespaces and tc); run as root")
    if realtime:
        from lowbw.net.probe import realtime_available  # lazy: a probe of this machine, run once

        if not realtime_available():
            raise ValueError(f"--validate-realtime {realtime}: this machine does not let the workers run under "
                             "SCHED_RR; give --validate-realtime 0 (the fair scheduler)")


def plan(ranking: list, top: int = EXTRA) -> list[tuple[int, Any]]:
    """(rank, advice) of the ``top`` best methods that reach the target, and dense if it is not among them."""
    ok = [(i, a) for i, a in enumerate(ranking, 1) if a.reaches]
    chosen = ok[:top]
    if not any(a.candidate.name == "dense" for _, a in chosen):
        chosen += [(i, a) for i, a in enumerate(ranking, 1) if a.candidate.name == "dense"]
    return chosen


def run_config(advice, inputs: dict[str, Any], steps: int, preset: dict[str, Any], realtime: int = 0
               ) -> dict[str, Any]:
    """The procs + testbed run config of one method at the advice's workers, rates, latency and batch, its
    workers under SCHED_RR priority ``realtime`` (0: the fair scheduler)."""
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
            "log_every": 1, "eval_every": 1e6, "test_limit": 100, "progress": False,
            **({"testbed_realtime": realtime} if realtime else {})}


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


def measured_terms(run_dir: Path) -> dict[str, float]:
    """Seconds per step of a run, from its ``metrics.jsonl``: ``step`` and its ``compute``, ``compress``,
    ``comm`` and ``rest`` (see the module docstring)."""
    train = [x for x in training_lines(run_dir) if x.get("step", 0) >= WARMUP and x.get("t_step") is not None]
    if len(train) < 2:
        raise ValueError(f"{run_dir}: fewer than two metrics lines after step {WARMUP}")
    a, b = train[0], train[-1]
    n = b["step"] - a["step"]

    def d(k: str) -> float:
        return (b.get(k, 0.0) - a.get(k, 0.0)) / n

    out = {"step": d("t_step") - d("t_meta"), "compute": d("t_compute"), "compress": d("t_compress"),
           "comm": d("t_comm")}
    out["rest"] = out["step"] - out["compute"] - out["compress"] - out["comm"]
    return out


def measured_per_step(run_dir: Path) -> tuple[float, float]:
    """(step, compute) seconds per step of a run (:func:`measured_terms`)."""
    m = measured_terms(run_dir)
    return m["step"], m["compute"]


def colocation(kind: str, workers: int, period: int, cores: int | None = None, realtime: bool = False,
               runs_dir: Path = ROOT / "runs", store: Path | None = None) -> Colocation:
    """The factor on a worker's CPU work when ``workers`` workers share this machine, synchronising every
    ``period`` steps: :func:`lowbw.measure.colocation.compute_scale_over` of E8's probes at that many workers
    (pooled over its cells and rates) in E8's measurement of a workload of ``kind`` (``lm``: ``e2e_lm``, else
    ``e2e``; under SCHED_RR, ``realtime``, its ``_realtime`` file where there is one, else the fair
    scheduler's, said so; this machine's ``runs/bench`` file, else the repository's stored one). Where none
    holds such probes, ``max(1, workers / cores)`` (N processes on C cores, nothing else measured), said so."""
    base = PROBES.get(kind, "e2e")
    for name in ([base + "_realtime"] if realtime else []) + [base]:
        loc = locate(name, runs_dir, store if store is not None else ROOT / HOST_STORE)
        if loc is None:
            continue
        doc = json.loads(loc.path.read_text())
        samples = [x for p in doc.get("probes") or [] if p.get("workers") == workers for x in p.get("samples") or []]
        f = compute_scale_over(samples, max(1, period)) if samples else None
        if f is not None:
            model = (doc.get("args") or {}).get("model", "?")
            sched = ("" if not realtime or name.endswith("_realtime")
                     else "; under the fair scheduler: no SCHED_RR probe stored")
            return Colocation(f, f"E8's probe ({model}, {workers} workers at once against one alone, over "
                                 f"{max(1, period)} step(s) between synchronisations; {loc.origin}: "
                                 f"{_rel(loc.path)}{sched})")
    cores = cores or os.cpu_count() or 1
    return Colocation(max(1.0, workers / cores), f"assumed: {workers} processes on {cores} cores (no E8 probe of "
                                                 f"{workers} workers in {base}.json)")


def _rel(path: Path) -> str:
    try:
        return str(Path(path).resolve().relative_to(ROOT))
    except ValueError:
        return str(path)


def testbed_terms(terms: dict[str, float], factor: float) -> dict[str, float]:
    """The advisor's step terms (:meth:`lowbw.advise.steptime.StepPrediction.terms`) on the testbed: the CPU
    terms (:data:`CPU_TERMS`) times the co-location ``factor``, communication as predicted."""
    return {k: v * factor if k in CPU_TERMS else v for k, v in terms.items()}


def validate(ranking: list, inputs: dict[str, Any], out_dir: str | os.PathLike, steps: int = 24,
             realtime: int = REALTIME) -> list[Check]:
    """Train :func:`plan`'s methods on the testbed (workers under SCHED_RR priority ``realtime``; 0: the fair
    scheduler) into ``out_dir/<method>`` and return their checks."""
    from lowbw.train.launch import run  # lazy: the ranking alone needs no torch

    presets = load_methods(CONFIG_FILE)
    checks = []
    for place, a in plan(ranking):
        c = a.candidate
        n_steps = horizon(c.period, steps)
        cfg = run_config(a, inputs, n_steps, presets[c.name], realtime)
        d = Path(out_dir) / c.name
        run(cfg, d, overwrite=True, quiet=True)
        co = colocation(inputs["kind"], inputs["workers"], max(1, c.period // max(1, c.fragments)),
                        realtime=bool(realtime))
        checks.append(check_of(place, a, n_steps, measured_terms(d), co, d))
    return checks


def check_of(place: int, advice, steps: int, measured: dict[str, float], co: Colocation, run_dir: Path) -> Check:
    """The check of ``advice`` (ranked ``place``, trained ``steps`` steps into ``run_dir``) against the run's
    :func:`measured_terms`: the predicted testbed step is the sum of the advice's step terms co-located
    (:func:`testbed_terms`), its compute the compute and optimiser terms (as the run's ``t_compute`` counts)."""
    terms = testbed_terms(advice.step.terms(), co.factor)
    step = sum(terms.values())
    compute = terms["compute"] + terms["optimizer"]
    return Check(method=advice.candidate.name, rank=place, steps=steps, predicted_step_s=step,
                 measured_step_s=measured["step"], predicted_compute_s=compute, measured_compute_s=measured["compute"],
                 predicted_rest_s=step - compute, measured_rest_s=measured["step"] - measured["compute"],
                 run_dir=str(run_dir), advised_step_s=advice.step.step_s, colocation=co.factor,
                 colocation_source=co.source, predicted_terms=terms,
                 measured_terms={k: v for k, v in measured.items() if k != "step"})


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:+.0f}%"


def _ms(x: float | None) -> str:
    return "-" if x is None else f"{1e3 * x:.1f}"


COLUMNS = (("compute", "compute"), ("opt", "optimizer"), ("compr.", "compress"), ("comm", "comm"),
           ("outer", "outer"), ("rest", "rest"))


def format_checks(checks: list[Check]) -> str:
    """The checks as a table of at most 100 columns: per method a row of predicted terms (ms per step; the CPU
    terms co-located) and one of measured (the run's t_compute holds the optimiser's update: "incl." under opt),
    the step, its error and whether it is within :data:`TOLERANCE`."""
    head = (f"{'#':>2} {'method':<13}{'':<6}" + "".join(f"{h:>8}" for h, _ in COLUMNS)
            + f"{'step':>8}{'err':>6}  within {100 * TOLERANCE:.0f}%")
    lines = [head, "-" * len(head)]
    for c in checks:
        p, m = c.predicted_terms, c.measured_terms
        pred = "".join(f"{_ms(p.get(k)) if k != 'rest' else '-':>8}" for _, k in COLUMNS)
        meas = "".join(f"{('incl.' if k == 'optimizer' else '-') if k not in m else _ms(m[k]):>8}"
                       for _, k in COLUMNS)
        lines.append(f"{c.rank:>2} {c.method:<13}{'pred':<6}{pred}{_ms(c.predicted_step_s):>8}")
        lines.append(f"{'':>2} {f'x{c.colocation:.2f} cpu':<13}{'meas':<6}{meas}{_ms(c.measured_step_s):>8}"
                     f"{_pct(c.step_err):>6}  {'yes' if c.within else 'NO'}")
    return "\n".join(lines)


def write_checks(path: Path, checks: list[Check], inputs: dict[str, Any], conditions: dict[str, Any]) -> Path:
    """``validation.json`` under the runs' directory: every check (:meth:`Check.as_dict`), the advice's inputs
    and the machine's conditions while the runs trained; written atomically."""
    from lowbw.runs.io import atomic_write_json  # lazy: the ranking alone needs no torch

    out = Path(path) / "validation.json"
    atomic_write_json(out, {"validation": [c.as_dict() for c in checks], "inputs": inputs,
                            "validation_conditions": conditions, "tolerance": TOLERANCE,
                            "all_within": all(c.within for c in checks)})
    return out
