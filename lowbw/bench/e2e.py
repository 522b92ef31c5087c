"""E8 -- does the simulator tell the truth? The command that compares sim's virtual clock with the testbed.

Per cell (method x link rate x workers, :mod:`lowbw.bench.e8.grid`): an uncalibrated sim run, a probe of the
host (:mod:`lowbw.bench.e2e_probe`), the procs run on the tc-shaped testbed, a second probe, and the sim again
with the clock calibrated from the pooled probes (:mod:`lowbw.bench.e8.calibration`); the rows and summary
(:mod:`lowbw.bench.e8.rows`) go to e2e.json. The method and what the check found are in the paper's E8 section.

    python -m lowbw bench e2e --methods dense,fp16,q8nl,topk1,powersgd,local16 --rates 10mbit 100mbit 1gbit \\
        --workers 2 4 --steps 60 --out runs/bench/e2e.json
    python -m lowbw bench e2e --model gpt-small --methods dense,topk1,powersgd,diloco16 --rates 100mbit \\
        --workers 2 --out runs/bench/e2e_lm.json --runs-dir runs/bench/e2e_lm

``--methods``: presets of ``config/config.yaml``'s ``methods:``; ``NAME+ddp`` runs one through torch DDP with the
compressor as its communication hook. ``--model gpt-small``: the language model's cells (Tiny Shakespeare,
AdamW, time-to-target on ``val_loss``) into their own file. ``--realtime``: the cells' testbed workers and their
probes under SCHED_RR (``testbed_realtime``), as if each emulated machine had its own CPU; the paper sets such a
file (``e2e_lm_realtime.json``) beside the fair scheduler's.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path
from typing import Any

from lowbw.bench import bench_provenance
from lowbw.bench.e2e_probe import PROBE_MAX_GAP_MS, probe
from lowbw.bench.e8.calibration import (
    cell_calibration,
    cell_calls_per_step,
    cell_gap_ms,
    cell_sequence,
    cell_steps_per_sync,
    cell_wire_s,
    probe_summary,
)
from lowbw.bench.e8.calls import call_sequence
from lowbw.bench.e8.grid import (
    BASE,
    DEFAULT_TARGET,
    LM_BASE,
    UNCALIBRATED,
    WARMUP_STEPS,
    add_realtime_flag,
    base_for,
    cell_config,
    cell_dir,
    check_realtime,
    plan,
    sim_twin,
)
from lowbw.bench.e8.rows import cell_row, fmt_row, print_table, summarise
from lowbw.measure import conditions
from lowbw.measure.conditions import add_strict_flag
from lowbw.measure.presets import load_methods, method_config
from lowbw.net.units import rate_mbit_arg
from lowbw.runs.io import atomic_write_json
from lowbw.train.launch import run
from lowbw.train.models import model_kind
from lowbw.train.targets import TargetError, parse_target

__all__ = ["main", "run_cells", "reanalyse", "DEFAULT_OUT", "PROBE_CELL_HOOK_MAX_S"]

DEFAULT_OUT = "runs/bench/my_e2e.json"  # by hand; the workflow passes --out runs/bench/e2e.json
_FLOAT = re.compile(r"^\s*[0-9.eE+-]+\s*$")  # --target as a bare number: a test accuracy
# a DDP cell's probe computes through the cell's own hook where its bytes take at most this long a step (s;
# 40 repetitions of it stay a few seconds), else through a one-element top-k (compute is then a negligible
# part of the step)
PROBE_CELL_HOOK_MAX_S = 0.05


def run_cells(args, mcfg: dict[str, dict[str, Any]], shape: tuple[list[int], int],
              earlier: dict[str, Any] | None = None) -> dict[str, Any]:
    """Every cell of ``mcfg`` x ``args.workers`` x ``args.rates`` (the steps of the module docstring); with ``earlier``
    (an e2e.json, ``--append``), its rows are kept and each cell measured now is its next repeat. The machine's
    conditions (:mod:`lowbw.measure.conditions`) are recorded per cell (``rows[].conditions``) and for the run; a
    busy machine gets a warning, and with ``args.strict`` nothing is written (not even after each cell)."""
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
                exchange = call_sequence(twin, n, shape)
                at = {"gaps_ms": (0.0, gap), "calls_per_step": cell_calls_per_step(sim_dir, args.steps, n),
                      "ddp": ddp, "hook_method": (mcfg[m] if ddp and cell_wire_s(sim_dir, args.steps, n, rate)
                                                  <= PROBE_CELL_HOOK_MAX_S else None),
                      "sequence": cell_sequence(exchange, sim_dir, args.steps, n), "twin": twin}
                # 2. the testbed run between two probes in the cell's conditions (pooled: background load that
                #    moves within minutes hits probe and cell alike; one burst during one probe does not decide)
                at["realtime"] = args.realtime
                pre = probe(base, n, rate, shape, **at)
                tbf = {"emulation": pre["emulation"], "shaper_burst_bytes": pre["shaper_burst_bytes"]}
                t0 = time.perf_counter()
                cfg = cell_config(mcfg[m], n, rate, args.steps, args, UNCALIBRATED)
                run({**cfg, "backend": "procs", "testbed": True, "testbed_realtime": args.realtime}, cell / "procs",
                    overwrite=True, quiet=True)
                wall = time.perf_counter() - t0
                post = probe(base, n, rate, shape, **at)
                pr = {**probe_summary([pre, post], n), **tbf,
                      "steps_per_sync": cell_steps_per_sync(sim_dir, args.steps, n, len(exchange))}
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
                if pr.get("overhead_exchange_ms") is not None:
                    replayed += (f", {pr['overhead_exchange_ms']:.2f} in its exchange in situ (compression "
                                 f"x{pr['compress_scale']:.2f})")
                print(f"  probes: overhead {_curve_str(pr)}{replayed} ms/message, compute x{pc['compute_scale']:.2f} "
                      f"(synchronising every {pc['steps_per_sync']} steps; x{pr['compute_scale']:.2f} every step) "
                      f"({pr['emulation']})", flush=True)
                print(fmt_row(row), flush=True)
                if not strict:
                    atomic_write_json(out, _result(rows, probes, args, t_start, False, earlier))
    res = _result(rows, probes, args, t_start, True, earlier, whole.stop().to_json())
    if conditions.check(whole.conditions, "lowbw bench e2e", out, strict):
        atomic_write_json(out, res)
    return res


def reanalyse(args) -> dict[str, Any]:
    """The rows of an existing e2e.json recomputed from its run directories (analysis only, no measurement)."""
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


def _curve_str(pr: dict[str, Any]) -> str:
    """``0.62 @0, 1.41 @0.5, ...``: the overhead (ms) after each probed gap (ms)."""
    return ", ".join(f"{o:.2f} @{g:g}" for g, o in pr["overhead_curve"])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m lowbw bench e2e", description=__doc__.splitlines()[0])
    ap.add_argument("--methods", default="dense,fp16,q8nl,topk1,powersgd,local16,fp16+ddp",
                    help="comma-separated presets of config/config.yaml's methods (NAME+ddp: through DDP's hook)")
    ap.add_argument("--rates", type=rate_mbit_arg("--rates"), nargs="+", default=[10.0, 100.0, 1000.0],
                    help="link rates with their unit, e.g. 10mbit 100mbit 1gbit (default: 10, 100, 1000 Mbit/s)")
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
    ap.add_argument("--out", default=DEFAULT_OUT,
                    help="JSON file (default %(default)s; the workflow's is runs/bench/e2e.json)")
    add_realtime_flag(ap)
    ap.add_argument("--append", action="store_true",
                    help="keep the rows of an existing --out; each cell measured now is its next repeat (the "
                         "summary and the paper take each cell's median over its repeats)")
    ap.add_argument("--reanalyse", action="store_true",
                    help="recompute the rows of --out from its cells' run directories and stored probes (no runs)")

    add_strict_flag(ap)
    a = ap.parse_args(argv)
    for flag, vals, lo in (("--rates", a.rates, 0), ("--workers", a.workers, 1)):
        bad = [v for v in vals if v <= lo or (flag == "--workers" and v < 2)]
        if bad:
            ap.error(f"{flag}: {bad[0]:g} is not allowed ({'> 0' if flag == '--rates' else '>= 2'})")
    check_realtime(ap, a.realtime)
    if a.steps <= WARMUP_STEPS:
        ap.error(f"--steps {a.steps}: must exceed the {WARMUP_STEPS} warm-up steps")

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
        if earlier["args"].get("realtime", 0) != a.realtime:  # a cell's repeats share their scheduling
            ap.error(f"--append: --realtime {a.realtime} differs from the file's {earlier['args'].get('realtime', 0)}")
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
