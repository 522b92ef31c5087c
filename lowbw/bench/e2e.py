"""E8 -- does the simulator tell the truth? The same run config, seed and steps, once on ``sim`` (virtual clock:
measured compute + the alpha-beta model at the link) and once on ``procs`` with ``testbed: true`` (one process
per worker, every byte through a real tc-shaped link, gloo), per cell (method x link rate x workers).

    python -m lowbw bench e2e --methods dense,fp16,q8nl,topk1,powersgd,local16 --rates 10 100 1000 \\
        --workers 2 4 --steps 60 --out runs/bench/e2e.json

``--methods`` takes the preset names of ``config/config.yaml``'s ``methods:``; ``NAME+ddp`` runs the preset
through torch DDP with the compressor as its communication hook (``ddp_hook: true``). ``--model gpt-small``
runs the language model's cells (:data:`LM_BASE`: Tiny Shakespeare, AdamW; time-to-target on ``val_loss``) into
their own file, e.g. ``--methods dense,topk1,powersgd,diloco16 --out runs/bench/e2e_lm.json --runs-dir
runs/bench/e2e_lm`` (a row names its method, workers and rate, not its model).

Per cell, in order:

1. the sim run with the uncalibrated clock, for the cell's CPU work per step (compute, compression) and calls
   per step, a call being 2 (N-1) latency terms; and the cell's sequence of calls in one exchange with the
   CPU work before each (:func:`cell_sequence`: the compressor's own gaps between its calls, measured in this
   process by :func:`lowbw.bench.e2e_calls.call_sequence`, scaled to the sim's compression; the step's compute
   before the first call);
2. a probe, the testbed run, and a second probe, on the same kind of testbed (the two probes' samples pooled,
   so that background load that moves within minutes hits probes and cell alike). A probe measures what the
   virtual clock needs to know about *this host* and nothing about the training run:

   * ``overhead_sequence_ms``: the per-message cost of the software stack (Python + gloo + TCP + wake-ups) in
     the cell's sequence: tiny collectives through lowbw.comm, each after its CPU work (a spin, at most
     ``PROBE_MAX_GAP_MS``) on every rank, timed inside the calls of the rank whose work took longest (the
     clock's slowest worker; its in-call time holds its waits for a peer that came later into a call), /
     (2 (N-1)) per message (an all-gather's sizes exchange and payload, a ring all-reduce's two phases, each
     take N-1 steps; :mod:`lowbw.bench.e2e_probe`). A call after CPU work costs more than one back to back (the
     receiving side's threads must be woken and scheduled while the cores are busy), and how much depends on
     the pattern: a per-layer step alternates long and near-zero gaps, so the cost at its mean gap is not
     the mean of its calls' costs. Recorded beside it: ``overhead_curve``, the cost after 0 and after the
     mean gap g in bursts of equal gaps, and ``overhead_pingpong_ms``, the one-way time of a one-float
     ping-pong between ranks 0 and 1 (Hockney's alpha, as E1 calibrates it);
   * ``compute_scale``: forward + backward + update of the model at the local batch, all N workers at once
     (the slowest) against one alone, alternately (N processes share this machine's cores; the virtual
     clock assumes a machine each). The N at once compute in the cell's conditions: each after the cell's
     calls per step (compute right after communication runs slower), and a DDP cell's through DDP with
     lowbw's hook (DDP's own per-step work and its hand-offs to the exchange thread): the cell's own hook
     where its exchange is short (``PROBE_CELL_HOOK_MAX_S``), so that the worker waits for it as long as in the
     cell and the wake-up after that wait counts as compute as it does there;
   * ``compress_scale``: the same for one exchange's compression with the cell's compressor (no communication):
     sharing the cores slows it less than the forward and backward passes;

3. the sim run again, with ``clock_overhead_ms`` = the sequence's per-message cost (files from before the
   replay: the curve at g, linear between probed gaps, flat beyond),
   ``clock_compute_scale`` and ``clock_compress_scale`` from the probes, and ``clock_shaper_burst_bytes`` = the
   testbed's tbf bucket
   (:meth:`lowbw.net.link.LinkSpec.tbf_params`: the bytes that leave at line rate after a link idles, during
   compute and between per-layer messages).

Each row also carries the prediction of the uncalibrated clock (ideal stack, a machine per worker, a plain link),
recomputed from the run's alpha-beta coefficients, so the paper can show what the calibration changed.

A cell is ``link_bound`` where its bytes per step at the link's goodput (``predicted_wire_s``) take at least
half of its predicted step; the per-message cost of many small messages is software (CPU) time.

Per cell (steps ``warmup`` .. ``steps``; t_meta, lowbw's own bookkeeping exchanges, is not training):
``predicted_step_s`` = d t_virtual / d step (sim); ``measured_step_s`` = d (t_step - t_meta) / d step
(procs, rank 0's wall clock); ``err_step`` = (pred - meas) / meas; the same split into compute, compress and
comm; time-to-accuracy at the first evaluation at or above ``--target`` (training time, evaluations excluded).
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
import time
from pathlib import Path
from typing import Any

from lowbw.bench import bench_provenance
from lowbw.bench.e2e_calls import call_sequence
from lowbw.bench.e2e_cell import (
    WARMUP_STEPS,
    cell_calibration,
    cell_calls_per_step,
    cell_dir,
    cell_gap_ms,
    cell_row,
    cell_sequence,
    cell_wire_s,
)
from lowbw.bench.e2e_probe import PROBE_MAX_GAP_MS, overhead_at, probe, probe_summary
from lowbw.bench.presets import load_methods, method_config

__all__ = ["main", "plan", "run_cells", "cell_row", "cell_dir", "cells", "method_config", "sim_twin", "BASE",
           "LM_BASE", "DEFAULT_TARGET", "base_for",
           "probe_summary", "overhead_at", "cell_gap_ms", "cell_calls_per_step", "cell_sequence", "cell_wire_s",
           "cell_calibration", "cell_config", "probe"]

DEFAULT_OUT = "runs/bench/e2e.json"
# The training every cell runs (MLP on MNIST: the quick profile's E4 model), with knobs E8 needs: frequent
# metrics lines, evaluations for time-to-accuracy, bit-identical dense sums in sim (threads), latency 0 (this
# kernel has no netem; the testbed's links add none).
BASE: dict[str, Any] = {
    "dataset": "mnist", "model": "mlp", "batch_size": 128, "train_limit": 24000, "test_limit": 2000,
    "optimizer": "sgd", "lr": 0.1, "momentum": 0.9, "weight_decay": 1e-4, "lr_schedule": "constant",
    "latency_ms": 0.0, "log_every": 5, "eval_every": 0.05, "progress": False, "sim_dense": "threads",
    "eval_batch_size": 1000,
}
# A language model's cells (``--model gpt-*``; gpt-small on Tiny Shakespeare with nanoGPT's CPU recipe: AdamW,
# betas (0.9, 0.99), decay 0.1 on matrices, batch 12 per worker at N = 2), with the same E8 knobs; evaluations
# on the first 200 validation windows.
LM_BASE: dict[str, Any] = {
    **BASE, "dataset": "shakespeare", "model": "gpt-small", "batch_size": 24, "train_limit": 0, "test_limit": 200,
    "optimizer": "adamw", "lr": 1e-3, "adam_beta2": 0.99, "weight_decay": 0.1, "weight_decay_on": "matrices",
    "eval_batch_size": 100,
}
_FLOAT = re.compile(r"^\s*[0-9.eE+-]+\s*$")  # --target as a bare number: a test accuracy
# time-to-target's default target: a test accuracy (images), a validation loss in nats per character (text)
DEFAULT_TARGET: dict[str, float | str] = {"image": 0.8, "text": "val_loss<=2.5"}


def base_for(model: str) -> dict[str, Any]:
    """The base config of a cell of ``model``: :data:`LM_BASE` for a language model, else :data:`BASE`."""
    from lowbw.train.models import model_kind

    return LM_BASE if model_kind(model) == "text" else BASE


# ----------------------------------------------------------------------------------------------- configs
def cell_config(method: dict[str, Any], workers: int, rate: float, steps: int, args, probe: dict[str, float]
                ) -> dict[str, Any]:
    from lowbw.train.world import default_threads

    cfg = {**base_for(args.model), "model": args.model, "dataset": args.dataset, "batch_size": args.batch_size,
           "seed": args.seed,
           **method, "workers": workers, "bandwidth_mbit": float(rate), "steps": steps,
           "targets": [args.target], "clock": "measured",
           "clock_overhead_ms": probe["overhead_ms"], "clock_compute_scale": probe["compute_scale"],
           "clock_compress_scale": float(probe.get("compress_scale") or 0.0),
           "clock_shaper_burst_bytes": float(probe.get("shaper_burst_bytes") or 0.0)}
    from lowbw.train.config import RunConfig

    rc = RunConfig.from_dict({**cfg, "backend": "procs", "testbed": True})  # bad keys fail here, before work
    cfg["threads"] = default_threads(rc)  # sim measures each worker's compute with the threads a process gets
    return cfg


def sim_twin(cfg: dict[str, Any]) -> dict[str, Any]:
    """The sim run of a cell: the same config. Sim has no DDP: a DDP-hook cell's twin aggregates with the
    same compressor the flat gradient in one exchange, as the hook sends a bucket (the gradient of a model
    under DDP's 25 MB bucket cap is one bucket) in one packed collective."""
    twin = {k: v for k, v in cfg.items() if k != "ddp_hook"} | {"backend": "sim"}
    if cfg.get("ddp_hook"):
        twin["granularity"] = "flat"
    return twin


# ----------------------------------------------------------------------------------------------- the grid
UNCALIBRATED = {"overhead_ms": 0.0, "compute_scale": 1.0, "shaper_burst_bytes": 0.0}
# a DDP cell's probe computes through the cell's own hook where its bytes take at most this long a step (s;
# 40 repetitions of it stay a few seconds), else through a one-element top-k (compute is then a negligible
# part of the step)
PROBE_CELL_HOOK_MAX_S = 0.05


def plan(args) -> tuple[dict[str, dict[str, Any]], tuple[list[int], int]]:
    """The cells' method configs and the data's (image shape [C, H, W], classes) or, for a text dataset,
    ([context T], vocabulary); raises ValueError (naming the method or key) for any cell that would not run,
    before any work."""
    from lowbw.data import load
    from lowbw.data.text import TEXT_SPECS
    from lowbw.train.config import RunConfig
    from lowbw.train.workload import is_text_dataset, text_block_size

    methods = load_methods()
    wanted = [m.strip() for m in args.methods.split(",") if m.strip()]
    mcfg = {m: method_config(m, methods) for m in wanted}
    for n in args.workers:
        for rate in args.rates:
            for m in wanted:
                cell_config(mcfg[m], n, rate, args.steps, args, UNCALIBRATED)
    if args.dataset == "synthetic":
        return mcfg, ([3, 16, 16], 10)
    if is_text_dataset(args.dataset):
        rc = RunConfig.from_dict(cell_config({}, args.workers[0], args.rates[0], args.steps, args, UNCALIBRATED))
        return mcfg, ([text_block_size(rc)], TEXT_SPECS[args.dataset].vocab_size)
    ds = load(args.dataset)  # [N, H, W(, C)] uint8 -> the model's [C, H, W]
    x = ds.x_train
    return mcfg, ([x.shape[3] if x.dim() == 4 else 1, x.shape[1], x.shape[2]], ds.num_classes)


def run_cells(args, mcfg: dict[str, dict[str, Any]], shape: tuple[list[int], int],
              earlier: dict[str, Any] | None = None) -> dict[str, Any]:
    """Every cell of ``mcfg`` x ``args.workers`` x ``args.rates`` (see the module docstring); with ``earlier``
    (an e2e.json, ``--append``), its rows are kept and each cell measured now is its next repeat. The machine's
    conditions (:mod:`lowbw.bench.conditions`) are recorded per cell (``rows[].conditions``) and for the run; a
    busy machine gets a warning, and with ``args.strict`` nothing is written (not even after each cell)."""
    from lowbw.bench import conditions
    from lowbw.runio import atomic_write_json
    from lowbw.train.launch import run

    out = Path(args.out)
    rows: list[dict[str, Any]] = list(earlier["rows"]) if earlier else []
    probes: list[dict[str, Any]] = list(earlier["probes"]) if earlier else []
    t_start = time.perf_counter()
    strict = bool(getattr(args, "strict", False))
    whole = conditions.record().start()
    for n in args.workers:
        for rate in args.rates:
            base = cell_config({}, n, rate, args.steps, args, UNCALIBRATED)
            for m in mcfg:
                here = conditions.record().start()  # this cell's: its row's mark in the report
                k = sum(1 for r in rows if (r["method"], r["workers"], r["rate_mbit"]) == (m, n, rate))
                cell = cell_dir(args.runs_dir, m, n, rate, k)
                sim_dir = cell / "sim"
                # 1. sim with the uncalibrated clock: the cell's CPU work between calls (cheap: no links)
                twin = sim_twin(cell_config(mcfg[m], n, rate, args.steps, args, UNCALIBRATED))
                run(twin, sim_dir, overwrite=True, quiet=True)
                gap = min(cell_gap_ms(sim_dir, args.steps, n), PROBE_MAX_GAP_MS)
                ddp = bool(mcfg[m].get("ddp_hook"))
                at = {"gaps_ms": (0.0, gap), "calls_per_step": cell_calls_per_step(sim_dir, args.steps, n),
                      "ddp": ddp, "hook_method": (mcfg[m] if ddp and cell_wire_s(sim_dir, args.steps, n, rate)
                                                  <= PROBE_CELL_HOOK_MAX_S else None),
                      "sequence": cell_sequence(call_sequence(twin, n, shape), sim_dir, args.steps, n),
                      "twin": twin}
                # 2. the testbed run between two probes in the cell's conditions (pooled: background load that
                #    moves within minutes hits probe and cell alike; one burst during one probe does not decide)
                pre = probe(base, n, rate, shape, **at)
                tbf = {"emulation": pre["emulation"], "shaper_burst_bytes": pre["shaper_burst_bytes"]}
                t0 = time.perf_counter()
                cfg = cell_config(mcfg[m], n, rate, args.steps, args, UNCALIBRATED)
                run({**cfg, "backend": "procs", "testbed": True}, cell / "procs", overwrite=True, quiet=True)
                wall = time.perf_counter() - t0
                post = probe(base, n, rate, shape, **at)
                pr = {**probe_summary([pre, post], n), **tbf}
                probes.append({"workers": n, "rate_mbit": rate, "method": m, "repeat": k, **pr})
                # 3. sim again with the calibrated clock
                pc = cell_calibration(pr, sim_dir, args.steps, n)
                cfg = cell_config(mcfg[m], n, rate, args.steps, args, pc)
                run(sim_twin(cfg), sim_dir, overwrite=True, quiet=True)
                row = cell_row(sim_dir, cell / "procs", method=m, workers=n, rate=rate, steps=args.steps,
                               target=args.target, probe_res=pc, cfg=cfg)
                row["wall_s"] = wall
                row["repeat"] = k
                row["conditions"] = here.stop().to_json(samples=False)
                rows.append(row)
                replayed = (f", {pr['overhead_sequence_ms']:.2f} in the cell's calls"
                            if pr.get("overhead_sequence_ms") is not None else "")
                print(f"  probes: overhead {_curve_str(pr)}{replayed} ms/message, compute x{pr['compute_scale']:.2f} "
                      f"({pr['emulation']})", flush=True)
                print(_fmt_row(row), flush=True)
                if not strict:
                    atomic_write_json(out, _result(rows, probes, args, t_start, False, earlier))
    res = _result(rows, probes, args, t_start, True, earlier, whole.stop().to_json())
    if conditions.check(whole.conditions, "lowbw bench e2e", out, strict):
        atomic_write_json(out, res)
    return res


def reanalyse(args) -> dict[str, Any]:
    """The rows of an existing e2e.json recomputed from its run directories (analysis only, no measurement)."""
    from lowbw.runio import atomic_write_json

    res = json.loads(Path(args.out).read_text())
    methods = load_methods()
    # one probe per cell and repeat (its method named), or, in files before that, one per (N, rate) group
    probes = {(p["workers"], p["rate_mbit"], p.get("method"), p.get("repeat", 0)): p for p in res["probes"]}
    a = argparse.Namespace(**{**vars(args), **{k: v for k, v in res["args"].items() if k in (
        "model", "dataset", "batch_size", "seed", "target", "runs_dir")}})
    rows = []
    for r in res["rows"]:
        k = r.get("repeat", 0)
        cell = cell_dir(a.runs_dir, r["method"], r["workers"], r["rate_mbit"], k)
        pr = (probes.get((r["workers"], r["rate_mbit"], r["method"], k))
              or probes[(r["workers"], r["rate_mbit"], None, 0)])
        pr = cell_calibration(pr, cell / "sim", r["steps"], r["workers"])
        cfg = cell_config(method_config(r["method"], methods), r["workers"], r["rate_mbit"], r["steps"], a, pr)
        rows.append({**cell_row(cell / "sim", cell / "procs", method=r["method"], workers=r["workers"],
                                rate=r["rate_mbit"], steps=r["steps"], target=r["target"], probe_res=pr, cfg=cfg),
                     "wall_s": r.get("wall_s"), "repeat": k, "conditions": r.get("conditions")})
    res.update(rows=rows, summary=summarise(rows), reanalysed=bench_provenance())
    atomic_write_json(Path(args.out), res)
    return res


def _result(rows, probes, args, t_start, complete: bool, earlier: dict[str, Any] | None = None,
            conditions: dict[str, Any] | None = None) -> dict[str, Any]:
    """The e2e.json; appended to ``earlier``, its provenance, args and conditions stay and this run's go to
    ``appended``."""
    now = {"provenance": bench_provenance(), "complete": complete, "seconds": time.perf_counter() - t_start,
           "args": dict(vars(args)), "conditions": conditions}
    head = {**{k: earlier.get(k) for k in ("provenance", "complete", "seconds", "args", "conditions")},
            "appended": [*earlier.get("appended", []), now]} if earlier else now
    return {**head, "base_config": base_for(args.model), "warmup_steps": WARMUP_STEPS, "probes": probes, "rows": rows,
            "summary": summarise(rows)}


def cells(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One entry per cell (method, workers, rate): its repeats' median ``err_step`` (the lower middle one of an
    even count: a repeat that was measured), that repeat's row as ``run``, their range and count; a cell is
    link-bound if any repeat is."""
    by_cell: dict[tuple, list[dict[str, Any]]] = {}
    for r in rows:
        by_cell.setdefault((r["method"], r["workers"], r["rate_mbit"]), []).append(r)
    out = []
    for (m, n, rate), rs in by_cell.items():
        ranked = sorted((r for r in rs if r["err_step"] is not None), key=lambda r: r["err_step"])
        mid = ranked[(len(ranked) - 1) // 2] if ranked else rs[0]
        out.append({"method": m, "workers": n, "rate_mbit": rate, "repeats": len(rs),
                    "err_step": mid["err_step"], "run": mid,
                    "err_step_min": ranked[0]["err_step"] if ranked else None,
                    "err_step_max": ranked[-1]["err_step"] if ranked else None,
                    "link_bound": any(r["link_bound"] for r in rs)})
    return out


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Worst |err_step| per method, and the issue's target (N = 2 at 10 and 100 Mbit/s; 1000 where link-bound),
    per cell the median over its repeats."""
    by_method: dict[str, float] = {}
    cs = cells(rows)
    for c in cs:
        if c["err_step"] is not None:
            by_method[c["method"]] = max(by_method.get(c["method"], 0.0), abs(c["err_step"]))
    target_cells = [c for c in cs if c["workers"] == 2 and (c["rate_mbit"] <= 100 or c["link_bound"])]
    worst = max((abs(c["err_step"]) for c in target_cells if c["err_step"] is not None), default=None)
    return {"worst_abs_err_step_by_method": by_method, "repeats": max((c["repeats"] for c in cs), default=0),
            "target": {"what": "|err_step| <= 0.10 at N=2, 10 and 100 Mbit/s, and 1000 where link-bound "
                               "(per cell the median over its repeats)",
                       "max_abs_err": worst, "n": len(target_cells),
                       "met": worst is not None and worst <= 0.10}}


def _curve_str(pr: dict[str, Any]) -> str:
    """``0.62 @0, 1.41 @0.5, ...``: the overhead (ms) after each probed gap (ms)."""
    return ", ".join(f"{o:.2f} @{g:g}" for g, o in pr["overhead_curve"])


def _fmt(v, spec: str) -> str:
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, spec)


def _fmt_row(r: dict[str, Any]) -> str:
    return (f"{r['method']:<12} {r['workers']:>2} {r['rate_mbit']:>6g} {_fmt(r['predicted_step_s'], '9.4f')} "
            f"{_fmt(r['measured_step_s'], '9.4f')} {_fmt(r['err_step'], '+8.1%')} "
            f"{_fmt(r['err_step_nominal'], '+8.1%')} "
            f"{_fmt(r['predicted_comm_s'], '9.4f')} {_fmt(r['measured_comm_s'], '9.4f')} "
            f"{_fmt(r['err_ttt'], '+8.1%')} {'yes' if r['loss_identical'] else 'no':>4}")


HEADER = (f"{'method':<12} {'N':>2} {'Mbit/s':>6} {'pred s':>9} {'meas s':>9} {'err':>8} {'nominal':>8} "
          f"{'pred comm':>9} {'meas comm':>9} {'err ttt':>8} {'same':>4}")


def print_table(res: dict[str, Any]) -> None:
    print(HEADER)
    for r in res["rows"]:
        print(_fmt_row(r))
    print(json.dumps(res["summary"], indent=1))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m lowbw bench e2e", description=__doc__.splitlines()[0])
    ap.add_argument("--methods", default="dense,fp16,q8nl,topk1,powersgd,local16,fp16+ddp",
                    help="comma-separated presets of config/config.yaml's methods (NAME+ddp: through DDP's hook)")
    ap.add_argument("--rates", type=float, nargs="+", default=[10, 100, 1000], help="link rates, Mbit/s")
    ap.add_argument("--workers", type=int, nargs="+", default=[2, 4], help="worker counts")
    ap.add_argument("--steps", type=int, default=60, help="training steps per run")
    ap.add_argument("--model", default=BASE["model"],
                    help=f"{BASE['model']} (MNIST) or a language model, e.g. gpt-small (Tiny Shakespeare)")
    ap.add_argument("--dataset", default=None, help="default: the model's (mnist; shakespeare for gpt-*)")
    ap.add_argument("--batch-size", type=int, default=None,
                    help=f"global batch size (default {BASE['batch_size']}; {LM_BASE['batch_size']} for gpt-*)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--target", default=None,
                    help=f"time-to-target's target: a test accuracy (default {DEFAULT_TARGET['image']}) or "
                         f"\"<metric><=|>=<value>\" (gpt-*: default {DEFAULT_TARGET['text']})")
    ap.add_argument("--runs-dir", default="runs/bench/e2e", help="where the cells' run directories go")
    ap.add_argument("--out", default=DEFAULT_OUT)
    ap.add_argument("--append", action="store_true",
                    help="keep the rows of an existing --out; each cell measured now is its next repeat (the "
                         "summary and the paper take each cell's median over its repeats)")
    ap.add_argument("--reanalyse", action="store_true",
                    help="recompute the rows of --out from its cells' run directories and stored probes (no runs)")
    from lowbw.bench.conditions import add_strict_flag

    add_strict_flag(ap)
    a = ap.parse_args(argv)
    for flag, vals, lo in (("--rates", a.rates, 0), ("--workers", a.workers, 1)):
        bad = [v for v in vals if v <= lo or (flag == "--workers" and v < 2)]
        if bad:
            ap.error(f"{flag}: {bad[0]:g} is not allowed ({'> 0' if flag == '--rates' else '>= 2'})")
    if a.steps <= WARMUP_STEPS:
        ap.error(f"--steps {a.steps}: must exceed the {WARMUP_STEPS} warm-up steps")
    from lowbw.train.models import model_kind
    from lowbw.train.targets import TargetError, parse_target

    base = base_for(a.model)
    a.dataset = a.dataset or base["dataset"]
    a.batch_size = a.batch_size or base["batch_size"]
    if a.target is None:
        a.target = DEFAULT_TARGET[model_kind(a.model)]
    else:
        if _FLOAT.match(a.target):
            a.target = float(a.target)
        try:
            parse_target(a.target)
        except TargetError as e:
            ap.error(f"--target {a.target}: {e}")
    earlier = None
    if a.append:
        try:
            earlier = json.loads(Path(a.out).read_text())
        except (OSError, ValueError) as e:
            ap.error(f"--append: --out {a.out} is not an e2e.json to append to ({e})")
        if not earlier.get("complete", False) or "rows" not in earlier:
            ap.error(f"--append: --out {a.out} is not a complete e2e.json")
        if Path(earlier["args"]["runs_dir"]).resolve() != Path(a.runs_dir).resolve():
            ap.error(f"--append: --runs-dir {a.runs_dir} differs from the file's {earlier['args']['runs_dir']}")
    if a.reanalyse:
        res = reanalyse(a)
    else:
        try:
            mcfg, shape = plan(a)
        except ValueError as e:
            ap.error(str(e))
        res = run_cells(a, mcfg, shape, earlier)
        if a.strict and ((res["appended"][-1] if earlier else res)["conditions"] or {}).get("busy"):
            return 1  # run_cells printed why and wrote nothing
    print()
    print_table(res)
    return 0


if __name__ == "__main__":
    sys.exit(main())
