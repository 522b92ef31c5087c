"""What random packet loss costs a training run on the testbed, against what the virtual clock charges for it.

Each cell trains the language model (``--model``, ``--workers`` workers) with one method of
``config/config.yaml`` on ``procs`` over the testbed (``testbed: true``): every worker behind its own
``--rate`` link whose uplink drops ``link_loss`` of its packets on the wire (the userspace link emulator,
:func:`lowbw.train.launch.testbed_links`), TCP resending what is lost. The same run's virtual clock charges
its exchanges as :mod:`lowbw.train.links` does under ``link_loss`` (TCP's recovery:
:mod:`lowbw.net.tcploss`), with the compute the run measured, so per cell (steps after the first
``WARMUP_STEPS``, per step, rank 0):

* ``comm_s``: measured seconds in exchanges (``t_comm``); ``meta_s``: lowbw's own bookkeeping exchanges
  (``t_meta``, over the same lossy links but not training);
* ``clock_comm_s``: the clock's charge for the same exchanges (``t_virtual_comm``); ``err_comm`` = clock /
  measured - 1;
* ``extra_s`` and ``clock_extra_s``: the cell's comm less the same method's at loss 0, measured and charged
  (what loss adds, free of what the clock's stack model misses at any loss); ``err_extra`` = clock / measured
  - 1;
* ``final_val_loss``: TCP delivers every byte, so a synchronous method trains to the same loss at every loss
  rate.

    python -m lowbw bench loss_train [--methods dense,diloco16] [--losses 0 0.01 0.1] [--rate 10]
        [--steps 48] [--model gpt-mini] [--workers 2] [--runs-dir runs/bench/loss_train] [--out
        runs/bench/loss_train.json]

Needs root (network namespaces). Writes the JSON with provenance and the machine's conditions per cell and over
the run (:mod:`lowbw.measure.conditions`; the comparison is of one run's two clocks, so load changes the compute
both see, not the comparison of their comm) and prints the table.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from lowbw.bench import bench_provenance
from lowbw.bench.e8.grid import WARMUP_STEPS, metrics_lines, train_window
from lowbw.measure import conditions
from lowbw.measure.presets import load_methods, method_config
from lowbw.runs.io import atomic_write_json
from lowbw.train.config import RunConfig
from lowbw.train.launch import run

__all__ = ["main", "cell_config", "cell_row", "rows_of", "LM_BASE", "DEFAULT_OUT"]

DEFAULT_OUT = "runs/bench/loss_train.json"
#: E9/E10's language-model workload (config/config.yaml's ``lm`` base) without its evaluations during the run
LM_BASE = {"dataset": "shakespeare", "batch_size": 16, "epochs": 0, "train_limit": 0, "test_limit": 200,
           "optimizer": "adamw", "adam_beta2": 0.99, "weight_decay": 0.1, "weight_decay_on": "matrices",
           "grad_clip": 1.0, "lr": 0.004, "lr_min": 0.0004, "warmup_steps": 0, "eval_every": 1.0,
           "eval_batch_size": 200}


def cell_config(method: dict[str, Any], loss: float, args) -> dict[str, Any]:
    """The run config of one cell: the LM workload, ``method``'s keys (its own learning rate over the
    workload's, as E10's ``fixed`` does not here: a cell compares clocks, not methods), ``loss`` on every uplink
    of a procs run over the testbed. Raises ConfigError (one line) on a key that would not run."""
    cfg = {**LM_BASE, **method, "model": args.model, "workers": args.workers, "steps": args.steps,
           "bandwidth_mbit": float(args.rate), "link_loss": float(loss), "backend": "procs", "testbed": True,
           "seed": args.seed, "log_every": args.log_every}
    RunConfig.from_dict(cfg)  # bad keys fail here, before any work
    return cfg


def cell_row(run_dir: Path, *, method: str, loss: float, steps: int) -> dict[str, Any]:
    """Per-step measured and charged seconds of one run directory over :func:`train_window`."""
    lines = metrics_lines(run_dir)
    a, b = train_window(lines, steps)
    n = b["step"] - a["step"]
    if n <= 0:
        raise RuntimeError(f"{method} at loss {loss}: no steps after the warm-up in {run_dir}")

    def d(k: str) -> float:
        return (b[k] - a[k]) / n

    comm, clock_comm = d("t_comm"), d("t_virtual_comm")
    summary = [x for x in lines if x.get("complete")] or [{}]
    return {"method": method, "loss": loss, "window": [a["step"], b["step"]], "comm_s": comm, "meta_s": d("t_meta"),
            "step_s": d("t_step") - d("t_meta"), "compute_s": d("t_compute"), "clock_comm_s": clock_comm,
            "clock_step_s": d("t_virtual"), "err_comm": clock_comm / comm - 1 if comm > 0 else None,
            "messages": d("messages"), "bytes_sent": d("bytes_sent"),
            "final_val_loss": summary[-1].get("final_val_loss", lines[-1].get("val_loss"))}


def rows_of(cells: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The cells with ``extra_s``, ``clock_extra_s`` and ``err_extra`` over the same method's loss-0 cell."""
    base = {c["method"]: c for c in cells if c["loss"] == 0}
    out = []
    for c in cells:
        b = base.get(c["method"])
        extra = c["comm_s"] - b["comm_s"] if b else None
        cextra = c["clock_comm_s"] - b["clock_comm_s"] if b else None
        err = cextra / extra - 1 if c["loss"] and extra and extra > 0 else None
        out.append({**c, "extra_s": extra, "clock_extra_s": cextra, "err_extra": err})
    return out


def _table(rows: list[dict[str, Any]]) -> str:
    head = (f"{'method':<10} {'loss':>5} {'steps':>7} {'comm s':>8} {'clock s':>8} {'err':>6} {'extra s':>8} "
            f"{'clock +s':>8} {'err':>6} {'meta s':>7} {'val loss':>8}")
    lines = [head, "-" * len(head)]
    for r in rows:
        def pct(x):
            return "" if x is None else f"{100 * x:+.0f}%"

        def sec(x):
            return "" if x is None else f"{x:.3f}"
        lines.append(f"{r['method']:<10} {100 * r['loss']:>4.0f}% {r['window'][0]:>3}-{r['window'][1]:<3} "
                     f"{r['comm_s']:>8.3f} {r['clock_comm_s']:>8.3f} {pct(r['err_comm']):>6} {sec(r['extra_s']):>8} "
                     f"{sec(r['clock_extra_s']):>8} {pct(r['err_extra']):>6} {r['meta_s']:>7.3f} "
                     f"{r['final_val_loss']:>8.4f}" + (" (busy)" if r.get("busy") else ""))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="lowbw bench loss_train", description=__doc__.split("\n\n")[0])
    ap.add_argument("--methods", default="dense,diloco16",
                    help="methods of config/config.yaml, comma-separated (default dense,diloco16; an asynchronous "
                    "method on procs replays the clock's own schedule of arrivals, so its measured exchanges are "
                    "not the ones the clock charges)")
    ap.add_argument("--losses", nargs="+", type=float, default=[0.0, 0.01, 0.1],
                    help="fractions of packets every uplink drops (default 0 0.01 0.1; 0 is added if missing)")
    ap.add_argument("--rate", type=float, default=10.0, help="every link's rate, Mbit/s (default 10)")
    ap.add_argument("--steps", type=int, default=48, help=f"training steps per run (> {WARMUP_STEPS}; default 48)")
    ap.add_argument("--log-every", type=int, default=2, help="metrics line every this many steps (default 2)")
    ap.add_argument("--model", default="gpt-mini")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--runs-dir", default="runs/bench/loss_train", help="where the cells' run directories go")
    ap.add_argument("--keep", action="store_true", help="keep the run directories (default: delete each after use)")
    ap.add_argument("--out", default=DEFAULT_OUT)
    conditions.add_strict_flag(ap)
    a = ap.parse_args(argv)
    losses = sorted(set([0.0, *a.losses]))
    try:  # every bad value before any work
        if a.steps <= WARMUP_STEPS:
            raise ValueError(f"--steps {a.steps}: needs more than the {WARMUP_STEPS} warm-up steps")
        bad = [x for x in losses if not 0 <= x < 0.5]
        if bad:
            raise ValueError(f"--losses {bad[0]}: a fraction in [0, 0.5)")
        methods = load_methods()
        names = [m.strip() for m in a.methods.split(",") if m.strip()]
        plan = [(m, p, cell_config(method_config(m, methods), p, a)) for m in names for p in losses]
    except ValueError as e:
        print(f"lowbw bench loss_train: {e}", file=sys.stderr)
        return 2
    whole = conditions.record().start()
    t0 = time.perf_counter()
    cells = []
    for m, p, cfg in plan:
        d = Path(a.runs_dir) / f"{m}_loss{p:g}"
        rec = conditions.record().start()
        run(cfg, d, overwrite=True, quiet=True)
        cond = rec.stop()
        row = cell_row(d, method=m, loss=p, steps=a.steps)
        tb = d / ".testbed.json"
        cj = cond.to_json(samples=False)
        cells.append({**row, "config": cfg, "busy": bool(cj.get("busy")),
                      "testbed": tb.read_text() if tb.exists() else None, "conditions": cj})
        print(f"{m} at loss {p:g}: comm {row['comm_s']:.3f} s/step, clock {row['clock_comm_s']:.3f}", flush=True)
        if not a.keep:
            shutil.rmtree(d, ignore_errors=True)
    cond = whole.stop()
    if not conditions.check(cond, "lowbw bench loss_train", a.out, a.strict):
        return 1
    rows = rows_of(cells)
    doc = {"benchmark": "loss_train", "provenance": bench_provenance(), "conditions": cond.to_json(),
           "setting": {"methods": names, "losses": losses, "rate_mbit": a.rate, "steps": a.steps, "model": a.model,
                       "workers": a.workers, "seed": a.seed, "warmup_steps": WARMUP_STEPS,
                       "model_of_loss": "lowbw.net.tcploss via lowbw.train.links.lossy"},
           "seconds": time.perf_counter() - t0, "rows": rows}
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    atomic_write_json(Path(a.out), doc)
    print(f"{a.workers} workers, {a.model}, {a.rate:g} Mbit/s links, procs over the testbed; "
          f"{conditions.describe(cond)}")
    print(_table(rows))
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
