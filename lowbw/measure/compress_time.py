"""The advisor's compression times of a device: every compressor of the workflow's method presets timed at
several tensor sizes on one device, and each fitted as a fixed per-call cost plus a per-byte cost.

For each distinct compressor setting of ``config/config.yaml``'s presets (compressor, its arguments, error
feedback as the preset sets it) and each size n in ``--sizes`` (fp32 entries, as a near-square matrix so
that PowerSGD sees a matrix), one compress + decompress of a seeded Gaussian tensor is timed ``--reps``
times or more (within half a second) after one warm-up call (state kept across calls: training's steady
state; CUDA calls synchronised), and the fastest kept: on a CPU with one torch thread (the default) in CPU
seconds of the calling thread, the call's cost on an idle core however busy the shared machine is (wall
seconds beside), else in wall seconds. The fit is least squares of
``t(n) = fixed_s + per_byte_s * 4 n`` weighted by ``1 / t`` (relative errors: the small sizes fix the per-call
cost, the large ones the per-byte cost); each row keeps its times and the fit's largest relative residual
(the advisor uses the segments between measured sizes, :func:`lowbw.advise.device.per_call_s`).

What :func:`run` returns (provenance and the machine's conditions included) is written by the benchmark
:mod:`lowbw.bench.compress_time` (``python -m lowbw.bench.compress_time``), read by :mod:`lowbw.advise.device`;
:mod:`lowbw.bench.advise_compress` and the advisor's ``--measure`` time single settings with :func:`time_setting`.
"""

from __future__ import annotations

import json
import math
import re
import time
from typing import Any

import numpy as np
import torch

from lowbw.compress import State, make
from lowbw.measure import conditions
from lowbw.measure.presets import load_methods
from lowbw.runs.io import provenance

__all__ = ["SIZES", "device_key", "settings", "fit", "time_setting", "run"]

SIZES = (4096, 65536, 1048576, 8388608)  # fp32 entries: 16 kB to 32 MB


def device_key(dev: torch.device) -> str:
    """``cpu``, or a CUDA device's short lower-case model name (``NVIDIA H200`` -> ``h200``)."""
    if dev.type != "cuda":
        return "cpu"
    name = torch.cuda.get_device_name(dev)
    m = re.search(r"\b([A-Z]\d{2,4}[A-Z]?)\b", name.replace("NVIDIA", ""))
    return m.group(1).lower() if m else re.sub(r"\W+", "_", name.lower()).strip("_")


def settings(methods: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """The distinct compressor settings of the presets (``none`` left out): compressor, sorted arguments,
    error feedback (True/False, or None for the compressor's default) and the presets that use it."""
    out: dict[str, dict[str, Any]] = {}
    for name, p in methods.items():
        comp = p.get("compressor", "none")
        if comp == "none":
            continue
        ef = {"on": True, "off": False}.get(str(p.get("error_feedback", "auto")))
        args = dict(sorted((p.get("compressor_args") or {}).items()))
        key = json.dumps([comp, args, ef], sort_keys=True)
        out.setdefault(key, {"compressor": comp, "compressor_args": args, "error_feedback": ef, "presets": []})
        out[key]["presets"].append(name)
    return list(out.values())


def _make(s: dict[str, Any]):
    kw = dict(s["compressor_args"])
    if s["error_feedback"] is not None:
        kw["error_feedback"] = s["error_feedback"]
    try:
        return make(s["compressor"], **kw)
    except ValueError:  # error feedback fixed by the method's definition
        kw.pop("error_feedback", None)
        return make(s["compressor"], **kw)


def _shape(n: int) -> tuple[int, int]:
    r = 2 ** (int(math.log2(n)) // 2)
    return r, n // r


def time_setting(comp, n: int | tuple[int, ...], dev: torch.device, reps: int, budget_s: float = 0.5
                 ) -> tuple[float, float]:
    """(fastest, fastest wall) seconds of one compress + decompress of ``n`` fp32 entries (a near-square
    matrix; or a tensor of shape ``n`` where it is a tuple) on ``dev``: at least ``reps`` calls after one
    warm-up, more while they take under ``budget_s`` in all (at most 100). On a CPU with one torch thread the
    first is the calling thread's CPU time (``time.thread_time``: the call's cost on an idle core, whatever
    else the shared machine runs), else wall time (CUDA calls synchronised)."""
    shape = _shape(n) if isinstance(n, int) else tuple(n)
    g = torch.Generator().manual_seed(math.prod(shape) % 100_003)
    x = torch.randn(shape, generator=g).to(dev)
    state = State(seed=0)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    on_thread = dev.type == "cpu" and torch.get_num_threads() == 1
    cpu: list[float] = []
    wall: list[float] = []
    start = time.perf_counter()
    i = 0
    while i <= reps or (time.perf_counter() - start < budget_s and i <= 100):
        sync()
        c, t = time.thread_time(), time.perf_counter()
        comp.decompress(comp.compress(x, name="t", state=state))
        sync()
        if i:
            cpu.append(time.thread_time() - c)
            wall.append(time.perf_counter() - t)
        i += 1
    return (min(cpu) if on_thread else min(wall)), min(wall)


def fit(sizes: list[int], times: list[float]) -> tuple[float, float, float]:
    """(fixed_s, per_byte_s, largest relative residual) of ``t = fixed + per_byte * 4 n``, weighted by 1/t;
    both coefficients kept >= 0 (a negative one is refitted as 0 with the other alone)."""
    a = np.array([[1.0, 4.0 * n] for n in sizes])
    t = np.array(times)
    w = 1.0 / t
    coef = np.linalg.lstsq(a * w[:, None], t * w, rcond=None)[0]
    if coef[0] < 0:
        coef = np.array([0.0, float(np.sum(t * w * a[:, 1] * w) / np.sum((a[:, 1] * w) ** 2))])
    elif coef[1] < 0:
        coef = np.array([float(np.sum(t * w * w) / np.sum(w * w)), 0.0])
    resid = float(np.max(np.abs(a @ coef / t - 1)))
    return float(coef[0]), float(coef[1]), resid


def run(device: str = "cpu", sizes: tuple[int, ...] = SIZES, reps: int = 5, threads: int | None = None,
        config: str = "config/config.yaml", log=print) -> dict[str, Any]:
    """Time every setting at every size on ``device`` and fit each (the file's content, see the docstring)."""
    if len(set(sizes)) < 3:
        raise ValueError(f"--sizes {sizes}: at least three distinct sizes fit a per-call and a per-byte cost")
    if threads:
        torch.set_num_threads(threads)
    dev = torch.device(device)
    rows = []
    rec = conditions.record().start()
    t0 = time.time()
    for s in settings(load_methods(config)):
        comp = _make(s)
        timed = [time_setting(comp, n, dev, reps) for n in sizes]
        times = [t for t, _ in timed]
        fixed, per_byte, resid = fit(list(sizes), times)
        rows.append({**s, "passes": float(comp.passes), "sizes": list(sizes), "times_s": times,
                     "wall_times_s": [m for _, m in timed],
                     "fixed_s": fixed, "per_byte_s": per_byte, "fit_max_rel_residual": resid})
        log(f"[{time.time() - t0:6.1f}s] {s['compressor']:<11} {json.dumps(s['compressor_args']):<36} "
            f"fixed {fixed * 1e6:8.1f} us  {1e-9 / per_byte if per_byte else math.inf:7.2f} GB/s  "
            f"residual {100 * resid:.0f}%")
    cond = rec.stop()
    conditions.check(cond, "lowbw bench compress_time")
    return {"device": device_key(dev), "device_name": torch.cuda.get_device_name(dev) if dev.type == "cuda"
            else "cpu", "torch_threads": torch.get_num_threads(), "reps": reps, "rows": rows,
            "clock": "thread CPU time" if dev.type == "cpu" and torch.get_num_threads() == 1 else "wall",
            "what": "compress + decompress per call, fastest of the reps after one warm-up; fit t = fixed + "
                    "per_byte * 4 n weighted by 1/t", "seconds": time.time() - t0,
            "conditions": cond.to_json(), "provenance": provenance()}

