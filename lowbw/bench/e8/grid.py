"""E8's cells and their grid: a cell is one method x link rate x worker count, run once on ``sim`` and once on
``procs`` over the tc-shaped testbed with the same config, seed and steps. This module holds the training every
cell runs (:data:`BASE`, :data:`LM_BASE`), a cell's run config and its sim twin, where its runs go, the window
of steps it is judged on, and the grid's check before any work (:func:`plan`)."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

from lowbw.data import load
from lowbw.data.text import TEXT_SPECS
from lowbw.measure.presets import load_methods, method_config
from lowbw.train.config import RunConfig
from lowbw.train.models import model_kind
from lowbw.train.workload import is_text_dataset, text_block_size
from lowbw.train.world import default_threads

__all__ = ["BASE", "LM_BASE", "DEFAULT_TARGET", "UNCALIBRATED", "GOODPUT", "WARMUP_STEPS", "base_for",
           "cell_config", "sim_twin", "cell_dir", "metrics_lines", "train_window", "plan", "add_realtime_flag",
           "check_realtime"]

# The training every cell runs (MLP on MNIST: the quick profile's E4 model), with knobs E8 needs: frequent
# metrics lines, evaluations for time-to-accuracy, bit-identical dense sums in sim (threads), latency 0 (the
# testbed's links add none).
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
# time-to-target's default target: a test accuracy (images), a validation loss in nats per character (text)
DEFAULT_TARGET: dict[str, float | str] = {"image": 0.8, "text": "val_loss<=2.5"}
# the clock's calibration before any probe: an ideal software stack, a machine per worker, a plain link
UNCALIBRATED = {"overhead_ms": 0.0, "compute_scale": 1.0, "shaper_burst_bytes": 0.0}
GOODPUT = 1448 / 1514  # TCP payload per wire byte (RunConfig.link_goodput's default)
WARMUP_STEPS = 10  # steps excluded from the per-step figures (TCP slow start, first-touch allocations)


def base_for(model: str) -> dict[str, Any]:
    """The base config of a cell of ``model``: :data:`LM_BASE` for a language model, else :data:`BASE`."""
    return LM_BASE if model_kind(model) == "text" else BASE


def cell_config(method: dict[str, Any], workers: int, rate: float, steps: int, args, probe: dict[str, float]
                ) -> dict[str, Any]:
    """The run config of the cell (``method``'s keys, ``workers``, ``rate`` Mbit/s, ``steps``) with the clock
    calibrated by ``probe`` (:data:`UNCALIBRATED` or :func:`lowbw.bench.e8.calibration.cell_calibration`'s);
    ``args``: model, dataset, batch_size, seed, target. Raises ValueError on a key that would not run on procs
    over the testbed."""
    cfg = {**base_for(args.model), "model": args.model, "dataset": args.dataset, "batch_size": args.batch_size,
           "seed": args.seed,
           **method, "workers": workers, "bandwidth_mbit": float(rate), "steps": steps,
           "targets": [args.target], "clock": "measured",
           "clock_overhead_ms": probe["overhead_ms"], "clock_compute_scale": probe["compute_scale"],
           "clock_compress_scale": float(probe.get("compress_scale") or 0.0),
           "clock_shaper_burst_bytes": float(probe.get("shaper_burst_bytes") or 0.0)}
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


def cell_dir(runs_dir: str | os.PathLike, method: str, workers: int, rate: float, repeat: int = 0) -> Path:
    """Where a cell's sim and procs runs go: ``{method}_n{N}_r{rate}``, ``.../rep{k}`` for a repeat k >= 1."""
    d = Path(runs_dir) / f"{method}_n{workers}_r{rate:g}"
    return d / f"rep{repeat}" if repeat else d


def metrics_lines(run_dir: Path) -> list[dict[str, Any]]:
    """The metrics lines of a run directory, in order."""
    return [json.loads(x) for x in (Path(run_dir) / "metrics.jsonl").read_text().splitlines() if x.strip()]


def train_window(lines: list[dict[str, Any]], steps: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """The metrics lines a cell is judged between: at the end of the warm-up and at the last step of the loop
    (before the run's final averaging/evaluation)."""
    first = next(x for x in lines if x["step"] >= min(WARMUP_STEPS, steps - 1))
    last = next(x for x in lines if x["step"] >= steps)
    return first, last


def plan(args) -> tuple[dict[str, dict[str, Any]], tuple[list[int], int]]:
    """The cells' method configs and the data's (image shape [C, H, W], classes) or, for a text dataset,
    ([context T], vocabulary); raises ValueError (naming the method or key) for any cell that would not run,
    before any work."""
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


def add_realtime_flag(ap: argparse.ArgumentParser) -> None:
    """``--realtime [PRIO]``: the testbed's workers (a cell's and its probes') under SCHED_RR, as if each emulated
    machine had its CPU to itself; 0 (default): the fair scheduler. Check it with :func:`check_realtime`."""
    ap.add_argument("--realtime", type=int, nargs="?", const=10, default=0, metavar="PRIO",
                    help="run the testbed's workers under SCHED_RR (priority PRIO, default 10), as if each emulated "
                         "machine had its CPU to itself (default: the fair scheduler)")


def check_realtime(ap: argparse.ArgumentParser, priority: int) -> None:
    """One line naming a ``--realtime`` outside 0-99, before any work."""
    if not 0 <= priority <= 99:
        ap.error(f"--realtime {priority}: a SCHED_RR priority is 1-99")
