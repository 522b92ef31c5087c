"""One lent GPU's share of the language-model grid: gpt-medium at nanoGPT's GPU recipe (examples/gpu/gpt_medium.yaml)
under the issue's methods and seeds, run where the store lacks them, as many at once as fit the time, and the
finished ones stored (``lowbw store add``). examples/gpu/lm_evidence.sh calls it; see its header for the sizing.

    python3 examples/gpu/lend.py OUTDIR [--train-s 420] [--parallel N] [--store paper/measured/gpu] [--cpu]

1. The cells: every (method, seed) of ``METHODS`` x ``SEEDS`` (seed-major: every method's seed 0 before any
   seed 1) without a stored run in ``STORE/e9_gpu_lm/method~M/seed~S``; a cell whose estimated time alone
   (:func:`estimate`) exceeds ``--train-s`` is skipped, saying what budget it needs.
2. The first ``--parallel`` cells (0: as many as the estimate lets finish together) start at once, each
   ``python -m lowbw train`` in its own process group.
3. Every ``--poll-s`` seconds each run's steps (its metrics.jsonl) give its rate over the last interval and its
   projected end; while more than one run is alive and one projects past the deadline (start + ``--train-s``),
   the last-started run is stopped (the others then get its share of the GPU) and the rates are measured anew.
4. At the deadline every run still going is stopped: a run that did not finish is not stored.
5. Finished runs (summary.json complete) are stored; OUTDIR/lend.json records every cell (stored, stopped,
   failed, skipped), its steps, wall seconds and rate, for the next lend's sizing.

``--cpu`` validates all of it on a CPU in seconds: gpt-tiny, 40 steps, device cpu, the store under OUTDIR.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
CONFIG = Path(__file__).with_name("gpt_medium.yaml")
# the grid is config/gpu.yaml's experiment e9_gpu_lm (its methods' presets, its seeds; the 2,000-step runs
# without dropout are the store's gpu_lm), so that a run of the GPU profile and a lend write the same store
# paths; its order is the order cells run in
EXPERIMENT = "e9_gpu_lm"
_GPU = yaml.safe_load((ROOT / "config" / "gpu.yaml").read_text())
SEEDS = tuple(_GPU["experiments"][EXPERIMENT]["seeds"])
METHODS: dict[str, dict] = {m: _GPU["methods"][m] for m in _GPU["experiments"][EXPERIMENT]["grid"]["method"]}
# seconds per step of one run when n runs share one H200 (paper/measured/gpu/gpu_lm, no dropout, 2,000 steps:
# top-k 1% alone 136 s; dense and DiLoCo H=50 two at once 184 s each; dense with four at once 269 s; three
# interpolated); PowerSGD rank 4 at 1.55x (418 s / 269 s with four at once); x 1.1 for dropout (an assumption)
SHARED_STEP_S = {1: 0.068, 2: 0.092, 3: 0.113, 4: 0.1345}
METHOD_FACTOR = {"powersgd4": 1.55}
DROPOUT_FACTOR = 1.1
START_S = 30  # start (CUDA context, data) and 21 evaluations of the validation split, per run
CPU_SETS = {"model": "gpt-tiny", "device": "cpu", "steps": 40, "eval_every": 0.02, "log_every": 5, "threads": 1,
            "test_limit": 40, "batch_size": 16, "warmup_steps": 5, "clock": "model", "clock_sample_s": 0.001}


@dataclass
class Cell:
    """One (method, seed) of the grid and what this lend did with it."""

    method: str
    seed: int
    out: str  # its run directory
    status: str = "pending"  # skipped | stored | stopped (projected past the deadline) | timed out | failed
    note: str = ""  # why it was skipped or stopped
    steps_done: int = 0  # the last step its metrics.jsonl logged
    wall_s: float = 0.0  # seconds from its start to its end here
    rate_steps_s: float = 0.0  # steps per second over its whole run here
    final_val_loss: float | None = None
    best_val_loss: float | None = None
    samples: list = field(default_factory=list)  # (seconds since start, step) at each poll


def estimate(methods: list[str], steps: int) -> float:
    """Seconds until the slowest of ``methods`` ends when they run at once (``SHARED_STEP_S``; 0 runs: 0)."""
    if not methods:
        return 0.0
    n = min(len(methods), max(SHARED_STEP_S))
    return max(METHOD_FACTOR.get(m, 1.0) for m in methods) * SHARED_STEP_S[n] * DROPOUT_FACTOR * steps + START_S


def plan(cells: list[Cell], train_s: float, parallel: int, steps: int, cpu: bool = False) -> list[Cell]:
    """The cells to start now (step 1 of the module docstring): ``cells`` in order less those that cannot finish
    alone in ``train_s`` (marked skipped; ``cpu``: none), the first ``parallel`` of them, or with ``parallel``
    0 as many as :func:`estimate` lets finish together (at least one)."""
    fit = []
    for c in cells:
        est = estimate([c.method], steps)
        if not cpu and est > train_s:
            c.status, c.note = "skipped", f"needs ~{est:.0f} s alone (--train-s {train_s:.0f})"
        else:
            fit.append(c)
    n = parallel or max([k for k in range(1, len(SHARED_STEP_S) + 1)
                         if estimate([c.method for c in fit[:k]], steps) <= train_s] or [1])
    return fit[:n]


def last_step(run: Path) -> int:
    """The step of the last line of ``run``'s metrics.jsonl (0 when it has none yet)."""
    try:
        with open(run / "metrics.jsonl", "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 4096))
            lines = f.read().decode(errors="replace").splitlines()
        for ln in reversed(lines):
            try:
                return int(json.loads(ln)["step"])
            except (ValueError, KeyError):
                continue
    except OSError:
        pass
    return 0


def stop(p: subprocess.Popen) -> None:
    """Stop a run's process group: SIGTERM, then SIGKILL after 15 s."""
    if p.poll() is not None:
        return
    os.killpg(p.pid, signal.SIGTERM)
    try:
        p.wait(15)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()


def launch_and_watch(a, todo: list[Cell], procs: dict, sets: dict, steps: int, out: Path, t0: float,
                     deadline: float) -> None:
    """Steps 2-3 of the module docstring: start ``todo``'s runs into ``procs``, then poll them until they end or
    the deadline, stopping the last-started one while the runs alive project past it."""
    for i, c in enumerate(todo):
        shutil.rmtree(c.out, ignore_errors=True)  # a run stopped by an earlier lend starts over
        cmd = [sys.executable, "-m", "lowbw", "train", "--config", str(CONFIG), "--out", c.out,
               "--set", f"seed={c.seed}", "--set", f"name={c.method}"]
        for k, v in {**METHODS[c.method], **sets}.items():
            cmd += ["--set", f"{k}={json.dumps(v)}"]
        log = open(out / f"run_{c.method}_{c.seed}.txt", "w")  # noqa: SIM115 (closed with the process)
        procs[i] = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        c.status = "running"
    while any(p.poll() is None for p in procs.values()) and time.monotonic() < deadline:
        time.sleep(min(a.poll_s, max(0.0, deadline - time.monotonic())))
        now = time.monotonic()
        alive = [i for i, p in procs.items() if p.poll() is None]
        late = []
        for i in alive:
            c = todo[i]
            c.samples.append((round(now - t0, 1), last_step(Path(c.out))))
            if len(c.samples) >= 2 and c.samples[-1][1] > c.samples[-2][1]:
                rate = (c.samples[-1][1] - c.samples[-2][1]) / (c.samples[-1][0] - c.samples[-2][0])
                if now + (steps - c.samples[-1][1]) / rate > deadline:
                    late.append(i)
        measured = all(len(todo[i].samples) >= 2 and todo[i].samples[-1][1] > todo[i].samples[-2][1] for i in alive)
        if late and measured and len(alive) > 1:
            i = max(alive)
            c = todo[i]
            stop(procs[i])
            c.status, c.wall_s = "stopped", round(time.monotonic() - t0, 1)
            c.note = f"at {now - t0:.0f} s, step {c.samples[-1][1]}: the runs alive projected past the deadline"
            print(f"stopped {c.method} seed {c.seed}: {c.note}", flush=True)
            for j in alive:  # rates anew from the next poll on
                todo[j].samples = todo[j].samples[-1:]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("outdir")
    ap.add_argument("--train-s", type=float, default=420.0, help="seconds for the runs, from the first start")
    ap.add_argument("--parallel", type=int, default=0, help="runs started at once (0: as many as the estimate fits)")
    ap.add_argument("--store", default="paper/measured/gpu")
    ap.add_argument("--runs", default="runs", help="where the run directories go (runs/e9_gpu_lm/...)")
    ap.add_argument("--poll-s", type=float, default=30.0)
    ap.add_argument("--cpu", action="store_true",
                    help="validate on a CPU: gpt-tiny, 40 steps, the runs and the store under OUTDIR")
    ap.add_argument("--steps", type=int, default=0, help="steps per run (0: the config's, 5,000; --cpu: 40)")
    a = ap.parse_args(argv)
    if a.train_s <= 0 or a.parallel < 0 or a.poll_s <= 0:
        ap.error(f"--train-s {a.train_s}, --parallel {a.parallel}, --poll-s {a.poll_s}: need > 0, >= 0, > 0")
    out = Path(a.outdir)
    out.mkdir(parents=True, exist_ok=True)
    store = out / "store_cpu" if a.cpu else Path(a.store)
    runs = out / "runs" if a.cpu else Path(a.runs)
    sets = dict(CPU_SETS) if a.cpu else {}
    if a.steps:
        sets["steps"] = a.steps
    steps = int(sets.get("steps") or yaml.safe_load(CONFIG.read_text())["steps"])

    # 1. the cells the store lacks, in order; those that cannot finish alone in the time are skipped; as many
    # start at once as the estimate lets finish (--parallel 0) or as asked
    cells = [Cell(m, s, str(runs / EXPERIMENT / f"method~{m}" / f"seed~{s}")) for s in SEEDS for m in METHODS
             if not (store / EXPERIMENT / f"method~{m}" / f"seed~{s}" / "summary.json").is_file()]
    todo = plan(cells, a.train_s, a.parallel, steps, a.cpu)
    est = "" if a.cpu else f" (estimated {estimate([c.method for c in todo], steps):.0f} s on the measured H200)"
    print(f"{len(cells)} cells missing from {store}; running {[(c.method, c.seed) for c in todo]}{est}", flush=True)

    # 2. start them (a SIGTERM to this launcher, e.g. the script's outer timeout, stops them too: step 4's finally)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    t0 = time.monotonic()
    deadline = t0 + a.train_s
    procs: dict[int, subprocess.Popen] = {}
    try:
        launch_and_watch(a, todo, procs, sets, steps, out, t0, deadline)
    finally:
        # 4. the deadline (or this launcher stopped): stop what is still going
        for i, p in procs.items():
            if p.poll() is None:
                stop(p)
                todo[i].status, todo[i].note = "timed out", f"still running at {a.train_s:.0f} s"
    end = time.monotonic()

    # 5. store the finished runs; record every cell
    done = []
    for i, c in enumerate(todo):
        run = Path(c.out)
        c.steps_done = last_step(run)
        c.wall_s = c.wall_s or round(end - t0, 1)
        summ = run / "summary.json"
        if summ.is_file() and json.loads(summ.read_text()).get("complete"):
            s = json.loads(summ.read_text())
            c.wall_s = round(float(s.get("t_wall", c.wall_s)), 1)
            c.final_val_loss, c.best_val_loss = s.get("final_val_loss"), s.get("best_val_loss")
            done.append(c)
        elif c.status == "running":
            c.status, c.note = "failed", f"exit {procs[i].returncode} (its output: run_{c.method}_{c.seed}.txt)"
        c.rate_steps_s = round(c.steps_done / c.wall_s, 3) if c.wall_s else 0.0
    if done:
        from lowbw.workflow.store import StoreError, add  # lazy: the launcher needs no torch

        try:
            add([c.out for c in done], to=store, cuda=not a.cpu)
            for c in done:
                c.status = "stored"
        except StoreError as e:  # the record below still says what ran
            for c in done:
                c.status, c.note = "not stored", str(e)
            done = []
    rows = [{k: v for k, v in asdict(c).items() if k != "samples"} | {"polls": c.samples} for c in cells]
    (out / "lend.json").write_text(json.dumps({"train_s": a.train_s, "parallel": len(todo), "steps": steps,
                                               "store": str(store), "cells": rows}, indent=1))
    for c in cells:
        if c.status != "pending":
            print(f"{c.method:>13} seed {c.seed}: {c.status:9} steps {c.steps_done:5d}  {c.wall_s:7.1f} s  "
                  f"{c.rate_steps_s:6.2f} steps/s  final {c.final_val_loss}  best {c.best_val_loss}  {c.note}")
    return 0 if done else 1


if __name__ == "__main__":
    raise SystemExit(main())
