"""Calibrate the deterministic virtual clock (``clock: model``) for every run of a workflow grid.

    python -m lowbw bench clock --config config/config.yaml --out config/clock.json

With ``clock: measured`` a run's virtual time depends on how busy the machine was while it ran, so rebuilding
the paper could change its findings. With ``clock: model`` compute costs ``clock_sample_s`` per sample and
(de)compression ``P x 4 bytes / clock_compress_mbyte_s`` per step: deterministic. This benchmark measures both
once, with the same code the measured clock uses (the sim Trainer's per-worker compute and (de)compression
seconds, one replica at a time), for every distinct (model, dataset, local batch, optimiser, compressor) of the
grid, ``--reps`` times, and stores medians, spreads and provenance. The workflow config names the file as
``clock_calibration``; :func:`lowbw.workflow.grid.run_config` fills the two keys of every ``clock: model`` run from it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

from lowbw.bench import bench_provenance
from lowbw.measure import conditions
from lowbw.runs.io import atomic_write_json
from lowbw.train.allocator import steady_allocator
from lowbw.train.clock_table import KEY_FIELDS, TEXT_KEY_FIELDS, clock_key
from lowbw.train.config import RunConfig
from lowbw.train.loop import Trainer
from lowbw.train.world import SimWorld
from lowbw.workflow.grid import decode, run_config, run_dirs

__all__ = ["clock_key", "calibrate_one", "main", "KEY_FIELDS", "TEXT_KEY_FIELDS"]

# the synchronisation scheme's own keys, reset to their defaults for the calibration's synchronous steps
SCHEME_FIELDS = ("world_period", "local_start", "household_period", "neighbourhood_period", "outer_optimizer",
                 "outer_lr", "outer_momentum", "staleness", "worker_speeds")


def _compute_key(key: str) -> tuple:
    d = json.loads(key)
    return d["model"], d["dataset"], d["local_batch"], d["optimizer"], d.get("block_size")


def calibrate_one(cfg: dict[str, Any], steps: int = 20, warmup: int = 3) -> dict[str, float]:
    """Per-step compute and (de)compression seconds of one worker of ``cfg`` (sim, measured clock)."""
    over = {"backend": "sim", "clock": "measured", "clock_compute_scale": 1.0, "steps": 10**6, "progress": False,
            "bandwidth_schedule": [], "adaptive": "off", "dynamic_batch": "off", "sync": "sync", "workers": 2,
            "batch_size": 0, "effective_batch_size": 0,
            "local_batch_size": RunConfig.from_dict({**cfg, "clock": "measured"}).local_batch,
            "households": 0, "neighbourhoods": 0, "household_shards": 0, "assignment": "disjoint", "targets": [],
            "threads": 1, "ddp_hook": False}
    # one synchronous step per measured step: the keys of other schemes go back to their defaults
    defaults = RunConfig().to_dict()
    over.update({k: defaults[k] for k in SCHEME_FIELDS})
    rc = RunConfig.from_dict({**cfg, **over})
    steady_allocator()  # as every training process (lowbw.train.allocator)
    torch.set_num_threads(1)
    tr = Trainer(rc, SimWorld(rc))
    for _ in range(warmup):
        tr.train_step()
    c0 = dict(tr.clock)
    for _ in range(steps):
        tr.train_step()
    per = {k: (tr.clock[k] - c0[k]) / steps for k in ("t_virtual_compute", "t_virtual_compress")}
    return {"compute_s": per["t_virtual_compute"], "compress_s": per["t_virtual_compress"],
            "local_batch": rc.local_batch, "grad_bytes": tr.rep.P * 4}


def grid_configs(config: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """clock key -> one run config of the grid that has it (every run whose clock is ``model``)."""
    out: dict[str, dict[str, Any]] = {}
    for d in run_dirs(config):
        _, exp, rest = d.split("/", 2)
        cfg = run_config({**config, "clock_calibration": None}, exp, decode(rest))
        if cfg.get("clock") == "model":
            out.setdefault(clock_key(cfg), cfg)
    return out


def main(argv: list[str] | None = None) -> int:
    import yaml

    ap = argparse.ArgumentParser(prog="python -m lowbw bench clock", description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="config/config.yaml", help="workflow config (its grid)")
    ap.add_argument("--steps", type=int, default=20, help="timed steps per repetition")
    ap.add_argument("--reps", type=int, default=3, help="repetitions (median and spread)")
    ap.add_argument("--out", default="config/clock.json")
    ap.add_argument("--add", action="store_true",
                    help="keep the entries of --out that the grid still has and measure only the keys it lacks "
                         "(their provenance is recorded under 'added')")
    conditions.add_strict_flag(ap)
    a = ap.parse_args(argv)
    if a.steps < 1 or a.reps < 1:
        ap.error(f"--steps {a.steps} / --reps {a.reps}: both must be >= 1")
    config = yaml.safe_load(Path(a.config).read_text())
    todo = grid_configs(config)
    if not todo:
        ap.error(f"{a.config}: no run has clock: model (set it in train_defaults)")
    old: dict[str, Any] = {}
    if a.add and Path(a.out).is_file():
        old = json.loads(Path(a.out).read_text())
        kept = {k: v for k, v in old["entries"].items() if k in todo}  # entries the grid no longer has go
        todo = {k: v for k, v in todo.items() if k not in kept}
        if len(kept) < len(old["entries"]):
            print(f"dropped {len(old['entries']) - len(kept)} entries the grid no longer has")
        old["entries"] = kept
        if not todo:
            atomic_write_json(Path(a.out), old)
            print(f"{a.out} has every key of {a.config}'s grid")
            return 0
    t0 = time.perf_counter()
    rec = conditions.record().start()  # the machine's load while measuring, stored with the entries
    keys = sorted(todo)
    meas: dict[str, list[dict[str, float]]] = {k: [] for k in keys}
    for r in range(a.reps):  # repetitions outermost: a burst of background load hits every key alike
        for i, key in enumerate(keys):
            meas[key].append(calibrate_one(todo[key], a.steps))
            print(f"rep {r + 1}/{a.reps} [{i + 1}/{len(keys)}] {json.loads(key)['model']} "
                  f"{json.loads(key)['compressor']}", flush=True)
    # compute depends on (model, dataset, local batch, optimiser) only: pool every key that shares them, so
    # that methods differ in the clock by their compression and communication, never by compute noise
    pooled: dict[str, list[float]] = {}
    for key in keys:
        pooled.setdefault(_compute_key(key), []).extend(m["compute_s"] for m in meas[key])
    entries: dict[str, Any] = {}
    for key in keys:
        comp = pooled[_compute_key(key)]
        cmp_ = [m["compress_s"] for m in meas[key]]
        b, gb = meas[key][0]["local_batch"], meas[key][0]["grad_bytes"]
        med, med_c = statistics.median(comp), statistics.median(cmp_)
        entries[key] = {
            **json.loads(key),
            "clock_sample_s": med / b,
            "clock_compress_mbyte_s": (gb / 1e6 / med_c) if med_c > 0 else 0.0,
            "compute_s_per_step": comp, "compress_s_per_step": cmp_,
            "spread_compute": (max(comp) - min(comp)) / med,
            "spread_compress": (max(cmp_) - min(cmp_)) / med_c if med_c > 0 else 0.0,
        }
        e = entries[key]
        print(f"{e['model']:<6} b={b:<4} {e['compressor']:<10} compute {med * 1e3:8.2f} ms/step (n={len(comp)}, "
              f"spread {100 * e['spread_compute']:.0f}%)  compress {med_c * 1e3:8.2f} ms/step "
              f"(spread {100 * e['spread_compress']:.0f}%)", flush=True)
    what = (f"per-worker compute and (de)compression of the grid's runs, one thread, sim Trainer, {a.steps} "
            f"steps after 3 warm-up, {a.reps} repetitions (median)")
    cond = rec.stop()
    if not conditions.check(cond, "lowbw bench clock", a.out, a.strict):
        return 1
    if old:
        added = {"provenance": bench_provenance(), "what": what, "seconds": time.perf_counter() - t0,
                 "keys": sorted(entries), "conditions": cond.to_json()}
        entries = {**old["entries"], **entries}
        doc = {**old, "entries": entries, "added": [*old.get("added", []), added]}
    else:
        doc = {"provenance": bench_provenance(), "what": what, "config": a.config,
               "seconds": time.perf_counter() - t0, "conditions": cond.to_json(), "entries": entries}
    atomic_write_json(Path(a.out), doc)
    print(f"wrote {a.out}: {len(entries)} entries")
    return 0


if __name__ == "__main__":
    sys.exit(main())
