"""E2: every compressor on one large fp32 tensor: compression ratio, error, bias, throughput, peak memory.

Side by side in the same run: bitsandbytes' ``quantize_blockwise``/``dequantize_blockwise`` (block 2048,
dynamic code) and the compression math of torch's DDP hooks (``fp16_compress_hook``, ``bf16_compress_hook``,
and ``powerSGD_hook`` itself, run in a 1-process gloo group on a duck-typed bucket).

Inputs (:mod:`lowbw.bench.compressor_inputs`, ``numel`` fp32 entries each): ``gaussian`` N(0, 1); ``resnet20``
real gradients of ResNet-20 on CIFAR-10 (successive SGD steps' gradients concatenated until ``numel``; random
images if the dataset is not available, recorded in the JSON); ``student_t3`` a heavy-tailed synthetic (Student t,
3 dof).

Per (input, method) row:

* ``ratio`` = input bytes (4 n) / ``Payload.nbytes`` (for bitsandbytes: codes + absmax + the same header);
* ``rel_l2_error`` = ||D(C(x)) - x|| / ||x|| and ``bias`` = sum(D(C(x)) - x) / sum |x|, from the first call
  (fresh state: one step of a training run; stateful methods' memory is empty);
* ``throughput_gbps`` = 4 n / (encode + decode seconds) / 1e9 of the fastest of ``reps`` timed calls after one
  warm-up (state kept across calls: the steady state of training), with that call's ``encode_s`` and
  ``decode_s``; the fastest call estimates the method's own cost on a machine other programs also use (as
  ``timeit`` advises); ``throughput_median_gbps`` is the median call's;
* ``peak_extra_mem_bytes``: the peak of bytes allocated by torch during one compress + decompress (payload,
  output, temporaries and new state included; the input excluded), from torch.profiler's memory timeline on
  CPU (``profile_memory=True``, ``export_memory_timeline``; the timeline also counts the input once an op
  reads it, so the peak of a plain ``x.sum()`` is subtracted), or ``torch.cuda.max_memory_allocated`` on CUDA.
  bitsandbytes' allocations go through torch too, so they are counted the same way.

    python -m lowbw.bench.compressors [--numel 25000000] [--inputs gaussian resnet20] [--methods topk ...]
        [--reps 5] [--threads 2] [--no-memory] [--out runs/bench/compressors.json]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as ph
from torch.profiler import ProfilerActivity, profile

from lowbw.bench.compressor_inputs import INPUTS, make_input
from lowbw.compress import State, make
from lowbw.compress.registry import bench_settings
from lowbw.measure import conditions
from lowbw.measure.conditions import add_strict_flag
from lowbw.runs.io import atomic_write_json, provenance

__all__ = ["METHODS", "BASELINES", "INPUTS", "run_benchmark", "make_input", "targets", "table", "main"]

# (compressor name, params): every compressor's benchmark settings, from its registration (``bench=`` of
# lowbw.compress.registry.register, in the registry's order). "<k>std" values are resolved to k x the input's
# standard deviation (absolute thresholds only make sense relative to the data).
METHODS: list[tuple[str, dict[str, Any]]] = bench_settings()
BASELINES: list[tuple[str, dict[str, Any]]] = [
    ("bnb.quantize_blockwise", {"blocksize": 2048, "code": "dynamic"}),
    ("torch.fp16_compress_hook", {}),
    ("torch.bf16_compress_hook", {}),
    ("torch.powerSGD_hook", {"rank": 1}),
    ("torch.powerSGD_hook", {"rank": 4}),
]
# ------------------------------------------------------------------------------------------------ methods
def _resolve(params: dict[str, Any], std: float) -> dict[str, Any]:
    out = {}
    for k, v in params.items():
        if isinstance(v, str) and v.endswith("std"):
            v = float(v[:-3]) * std
        out[k] = v
    return out


def _matrix_shape(n: int) -> tuple[int, int]:
    """(rows, cols) with rows the largest divisor of n not above sqrt(n): how a flat tensor is seen as a matrix."""
    r = math.isqrt(n)
    while r > 1 and n % r:
        r -= 1
    return max(r, 1), n // max(r, 1)


class _Runner:
    """encode(x) -> payload, decode(payload) -> tensor, nbytes(payload) for one method; fresh() resets state."""

    def __init__(self, method: str, params: dict[str, Any], x: torch.Tensor):
        self.method, self.params = method, params
        self.shape = _matrix_shape(x.numel()) if "powersgd" in method.lower() else tuple(x.shape)
        self.encode: Callable[[torch.Tensor], Any]
        self.decode: Callable[[Any], torch.Tensor]
        self.nbytes: Callable[[Any], int]
        self.fresh()

    def fresh(self) -> None:
        m, p = self.method, self.params
        if m.startswith("bnb."):
            import bitsandbytes.functional as bnbf

            def bnb_encode(x):
                return bnbf.quantize_blockwise(x, blocksize=p["blocksize"])

            self.encode = bnb_encode
            self.decode = lambda qs: bnbf.dequantize_blockwise(qs[0], qs[1])
            # codes + fp32 absmax per block + our header (shape, two part lengths); the code table is constant
            self.nbytes = lambda qs: qs[0].numel() + 4 * qs[1].absmax.numel() + 8 * (len(self.shape) + 2)
        elif m in ("torch.fp16_compress_hook", "torch.bf16_compress_hook"):
            dt = torch.float16 if "fp16" in m else torch.bfloat16
            # the hook: buffer.to(dtype).div_(world_size); all-reduce; decompress: copy back into the fp32 buffer
            self.encode = lambda x: x.to(dt).div_(1)
            self.decode = lambda c: c.to(torch.float32)
            self.nbytes = lambda c: 2 * c.numel() + 8 * (len(self.shape) + 1)
        elif m == "torch.powerSGD_hook":
            self._torch_powersgd(p["rank"])
        else:
            comp, state = make(m, **p), State(seed=0)
            self.encode = lambda x: comp.compress(x.view(self.shape), "x", state)
            self.decode = comp.decompress
            self.nbytes = lambda pl: pl.nbytes

    def _torch_powersgd(self, rank: int) -> None:
        if not dist.is_initialized():
            dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)

        class Bucket:
            def __init__(self, t: torch.Tensor):
                self.t = t

            def buffer(self):
                return self.t.view(-1)

            def gradients(self):
                return [self.t]

            def index(self):
                return 0

            def is_last(self):
                return True

        state = ph.PowerSGDState(None, matrix_approximation_rank=rank, start_powerSGD_iter=2, random_seed=0)
        state.iter = 2  # past torch's mandatory vanilla iterations (they only count steps)
        n, mcols = self.shape
        r = min(n, mcols, rank)

        def encode(x):  # the hook works in place on the bucket: give it a copy (the copy is part of its cost)
            return ph.powerSGD_hook(state, Bucket(x.view(self.shape).clone())).wait()

        self.encode = encode
        self.decode = lambda out: out
        compressed = ph._should_compress(n, mcols, r, state.min_compression_rate)[0]
        self.nbytes = lambda out: 4 * ((n + mcols) * r if compressed else n * mcols) + 8 * (2 + 2)


def _time_call(fn: Callable[[], Any], device: torch.device) -> tuple[Any, float]:
    if device.type == "cuda":
        torch.cuda.synchronize()
    t = time.perf_counter()
    out = fn()
    if device.type == "cuda":
        torch.cuda.synchronize()
    return out, time.perf_counter() - t


@contextlib.contextmanager
def _quiet_stderr_fd():
    """Silence file descriptor 2 (the profiler's C++ start/stop lines), Python's sys.stderr included."""
    sys.stderr.flush()
    saved, devnull = os.dup(2), os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


def _peak_extra_memory(fn: Callable[[], Any], device: torch.device) -> int | None:
    """Peak bytes torch allocates while ``fn`` runs (allocations made before it are not counted)."""
    if device.type == "cuda":
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        fn()
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated() - base

    with tempfile.TemporaryDirectory() as d, warnings.catch_warnings(), _quiet_stderr_fd():
        warnings.simplefilter("ignore")
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True, record_shapes=True,
                     with_stack=True) as prof:
            keep = fn()  # noqa: F841 - alive until the profile ends, like a result in use
        try:
            path = Path(d) / "timeline.json"
            prof.export_memory_timeline(str(path), device="cpu")
            _, sizes = json.loads(path.read_text())
            return int(max((sum(s) for s in sizes), default=0))
        except Exception:  # noqa: BLE001 - the profiler API may change: report "not measured"
            return None


def _measure(method: str, params: dict[str, Any], x: torch.Tensor, reps: int, memory: bool) -> dict[str, Any]:
    device = x.device
    runner = _Runner(method, params, x)
    n = x.numel()
    xd = x.double()
    # error and bias: the first call, fresh state
    payload = runner.encode(x)
    y = runner.decode(payload).reshape(-1).to(torch.float32)
    err = float((y.double() - xd).norm() / xd.norm())
    bias = float((y.double() - xd).sum() / xd.abs().sum())
    nbytes = runner.nbytes(payload)
    del payload, y
    # throughput: steady state (state kept), reps after the first (warm-up) call above
    enc, dec = [], []
    for _ in range(reps):
        payload, te = _time_call(lambda: runner.encode(x), device)
        _, td = _time_call(lambda p=payload: runner.decode(p), device)
        enc.append(te)
        dec.append(td)
        del payload
    total = [a + b for a, b in zip(enc, dec)]
    best = min(range(reps), key=total.__getitem__)
    row = {
        "ratio": 4 * n / nbytes,
        "nbytes": nbytes,
        "rel_l2_error": err,
        "bias": bias,
        "encode_s": enc[best],
        "decode_s": dec[best],
        "throughput_gbps": 4 * n / total[best] / 1e9,
        "throughput_median_gbps": 4 * n / statistics.median(total) / 1e9,
        "peak_extra_mem_bytes": None,
    }
    if memory:
        runner.fresh()
        peak = _peak_extra_memory(lambda: runner.decode(runner.encode(x)), device)
        if peak is not None and device.type == "cpu":
            # the profiler's timeline also counts the input once an op reads it: measure that and take it off
            base = _peak_extra_memory(lambda: x.sum(), device)
            peak = None if base is None else max(0, peak - base)
        row["peak_extra_mem_bytes"] = peak
    return row


def _params_str(params: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}" for k, v in params.items())


# ------------------------------------------------------------------------------------------------ driver
def run_benchmark(numel: int = 1_000_000, methods: list[str] | None = None, inputs: list[str] | None = None,
                  reps: int = 5, memory: bool = True, baselines: bool = True, seed: int = 0,
                  threads: int | None = None, device: str = "cpu", out: str | os.PathLike | None = None,
                  log: Callable[[str], None] | None = None, strict: bool = False):
    """Measure every method (``methods``: compressor names to keep, default all) on every input; a DataFrame.

    With ``out`` the rows are also written as JSON with provenance and the issue's targets evaluated. The
    machine's conditions (:mod:`lowbw.measure.conditions`) are recorded for the run (``conditions``,
    ``df.attrs["conditions"]``) and per row; a busy machine gets a warning, and with ``strict`` no file.
    """
    if threads:
        torch.set_num_threads(threads)
    log = log or (lambda s: None)
    dev = torch.device(device)
    todo = [(m, p, False) for m, p in METHODS if methods is None or m in methods]
    if baselines:
        todo += [(m, p, True) for m, p in BASELINES]
    rows, described, h2h = [], {}, {}
    t0 = time.time()
    whole = conditions.record().start()
    for kind in inputs or INPUTS:
        x, desc = make_input(kind, numel, seed)
        x = x.to(dev)
        described[kind] = desc
        std = float(x.std())
        for method, params, baseline in todo:
            if method.startswith("bnb.") and dev.type != "cpu":
                continue
            p = _resolve(params, std)
            log(f"[{time.time() - t0:6.1f}s] {kind:10s} {method} {_params_str(p)}")
            row = {"input": kind, "method": method, "params": _params_str(p), "baseline": baseline,
                   "numel": numel}
            cell = conditions.record(interval_s=0).start()
            try:
                row.update(_measure(method, p, x, reps, memory))
                row["ok"] = True
            except Exception as e:  # noqa: BLE001 - one failing method must not lose the others: recorded
                row.update({"ok": False, "error": f"{type(e).__name__}: {e}"})
            row["conditions"] = cell.stop().to_json(samples=False)
            rows.append(row)
        if baselines and dev.type == "cpu" and (methods is None or "blockwise" in methods):
            log(f"[{time.time() - t0:6.1f}s] {kind:10s} head to head: blockwise 8-bit non-linear vs bitsandbytes")
            h2h[kind] = _head_to_head(x, 2 * reps)
        del x
    _cleanup_dist()
    config = {"numel": numel, "reps": reps, "seed": seed, "device": device, "threads": torch.get_num_threads(),
              "memory": memory,
              "memory_method": "torch.profiler memory timeline (CPU) / torch.cuda.max_memory_allocated"}
    result = {"rows": rows, "inputs": described, "head_to_head": h2h, "config": config,
              "targets": targets(rows, h2h), "seconds": time.time() - t0,
              "conditions": whole.stop().to_json()}
    if conditions.check(whole.conditions, "lowbw bench compressors", out, strict) and out:
        atomic_write_json(out, {**result, "provenance": provenance()})
    df = pd.DataFrame(rows)
    df.attrs["targets"] = result["targets"]
    df.attrs["conditions"] = whole.conditions
    return df


def _cleanup_dist() -> None:
    if dist.is_available() and dist.is_initialized():
        with contextlib.suppress(Exception):
            dist.destroy_process_group()


def _head_to_head(x: torch.Tensor, reps: int) -> dict[str, float]:
    """Our 8-bit non-linear blockwise and bitsandbytes' quantize+dequantize_blockwise (block 2048), called in
    alternation so that both see the same machine load, after one untimed call each (first-call costs: the
    codebook, bitsandbytes' backend, fresh output pages); seconds of the fastest and the median call. The
    fastest estimates each one's own cost; the median also holds the machine's interference, which on a
    2-core machine slows a 2-thread op by the slower of its threads (ours: torch's intra-op threads)."""
    import bitsandbytes.functional as bnbf

    ours = make("blockwise", bits=8, block_size=2048, codebook="nonlinear")
    ours.decompress(ours.compress(x))
    bnbf.dequantize_blockwise(*bnbf.quantize_blockwise(x, blocksize=2048))
    t_ours, t_bnb = [], []
    for _ in range(reps):
        t = time.perf_counter()
        ours.decompress(ours.compress(x))
        t_ours.append(time.perf_counter() - t)
        t = time.perf_counter()
        q, st = bnbf.quantize_blockwise(x, blocksize=2048)
        bnbf.dequantize_blockwise(q, st)
        t_bnb.append(time.perf_counter() - t)
    return {"reps": reps, "ours_best_s": min(t_ours), "bnb_best_s": min(t_bnb),
            "ours_median_s": statistics.median(t_ours), "bnb_median_s": statistics.median(t_bnb),
            "speed_ratio_best": min(t_bnb) / min(t_ours),
            "speed_ratio_median": statistics.median(t_bnb) / statistics.median(t_ours)}


def targets(rows: list[dict[str, Any]], head_to_head: dict[str, dict[str, float]] | None = None) -> dict[str, Any]:
    """The issue's targets on what was measured: our 8-bit non-linear blockwise vs bitsandbytes (error <=,
    speed ratio >= 1.0: the fastest calls' of the alternating head-to-head where there is one, as the rows'
    throughput, else from the two rows) per
    input, and every compressor's encode+decode >= 0.3 GB/s."""
    head_to_head = head_to_head or {}
    ok = [r for r in rows if r.get("ok")]
    out: dict[str, Any] = {"blockwise8_nonlinear_vs_bnb": {}, "min_throughput_gbps": {"target": ">= 0.3"}}
    for kind in sorted({r["input"] for r in ok}):
        ours = [r for r in ok if r["input"] == kind and r["method"] == "blockwise"
                and r["params"] == "bits=8, codebook=nonlinear"]
        bnb = [r for r in ok if r["input"] == kind and r["method"].startswith("bnb.")]
        if ours and bnb:
            o, b = ours[0], bnb[0]
            out["blockwise8_nonlinear_vs_bnb"][kind] = {
                "error_ours": o["rel_l2_error"], "error_bnb": b["rel_l2_error"],
                "error_met": o["rel_l2_error"] <= b["rel_l2_error"],
                "speed_ratio_rows": o["throughput_gbps"] / b["throughput_gbps"],
            }
            h = head_to_head.get(kind)
            ratio = h["speed_ratio_best"] if h else o["throughput_gbps"] / b["throughput_gbps"]
            out["blockwise8_nonlinear_vs_bnb"][kind].update({
                "speed_ratio": ratio, "speed_from": "head_to_head (fastest calls)" if h else "rows",
                "speed_met": ratio >= 1.0})
    ours_rows = [r for r in ok if not r["baseline"]]
    slow = [f"{r['input']}:{r['method']}({r['params']})={r['throughput_gbps']:.3f}" for r in ours_rows
            if r["throughput_gbps"] < 0.3]
    out["min_throughput_gbps"].update({
        "min": min((r["throughput_gbps"] for r in ours_rows), default=None),
        "met": not slow if ours_rows else None, "below": slow,
    })
    out["failed"] = [f"{r['input']}:{r['method']}: {r.get('error')}" for r in rows if not r.get("ok")]
    return out


def table(df) -> str:
    """A markdown table of the rows."""
    head = ("| input | method | params | ratio | rel. L2 error | bias | GB/s | GB/s median | encode ms | decode ms | "
            "peak extra MB |")
    lines = [head, "|" + "---|" * 11]
    for r in df.to_dict("records"):
        if not r.get("ok"):
            lines.append(f"| {r['input']} | {r['method']} | {r['params']} | failed: {r.get('error')} ||||||||")
            continue
        mem = r.get("peak_extra_mem_bytes")
        mem_s = "-" if mem is None or mem != mem else f"{mem / 1e6:.0f}"
        name = f"*{r['method']}*" if r["baseline"] else r["method"]
        lines.append(
            f"| {r['input']} | {name} | {r['params']} | {r['ratio']:.1f} | {100 * r['rel_l2_error']:.3g}% | "
            f"{r['bias']:+.1e} | {r['throughput_gbps']:.2f} | {r['throughput_median_gbps']:.2f} | "
            f"{1e3 * r['encode_s']:.0f} | "
            f"{1e3 * r['decode_s']:.0f} | {mem_s} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m lowbw.bench.compressors", description=__doc__.splitlines()[0])
    ap.add_argument("--numel", type=int, default=25_000_000)
    ap.add_argument("--methods", nargs="+", help="compressor names (default: all)")
    ap.add_argument("--inputs", nargs="+", choices=INPUTS)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--threads", type=int, help="torch threads (default: torch's)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--no-memory", action="store_true", help="skip the peak-memory pass (profiler)")
    ap.add_argument("--no-baselines", action="store_true")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="runs/bench/compressors.json")

    add_strict_flag(ap)
    a = ap.parse_args(argv)
    df = run_benchmark(a.numel, a.methods, a.inputs, a.reps, not a.no_memory, not a.no_baselines, a.seed,
                       a.threads, a.device, a.out, log=lambda s: print(s, file=sys.stderr, flush=True),
                       strict=a.strict)
    if a.strict and df.attrs["conditions"].busy:
        return 1  # run_benchmark printed why and wrote nothing
    print(table(df))
    print(json.dumps(df.attrs["targets"], indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
