"""The advisor's compression charge on this CPU against compression measured at the user's size.

For a model of ``--params`` parameters (the advisor's transformer shapes, :func:`lowbw.advise.workload.
transformer_shapes`) and a method preset (default ``topk1``), every distinct tensor shape is timed here (fastest
of ``--reps`` after a warm-up, summed over the model's tensors): ``torch.topk`` of its magnitudes at the preset's
ratio (the textbook top-k a user would write) and the preset's own compressor (compress + decompress, error
feedback included: what lowbw's training pays). Both are set beside the advisor's ``--device cpu`` charge
(:func:`lowbw.advise.device.compress_time`, from the stored measurement of this CPU) and the ratios printed;
the JSON (provenance and the machine's conditions included) goes to ``runs/bench/advise_compress.json``.

    python -m lowbw.bench.advise_compress [--params 1.5e8] [--method topk1] [--reps 3] [--threads 1]
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections import Counter
from typing import Any

import torch

from lowbw.advise.candidates import candidates, compressor_of
from lowbw.advise.device import DEVICES, compress_time
from lowbw.advise.workload import transformer_shapes
from lowbw.measure import conditions
from lowbw.measure.compress_time import time_setting
from lowbw.runs.io import atomic_write_json, provenance

__all__ = ["torch_topk_s", "run", "main"]


def torch_topk_s(shape: tuple[int, ...], ratio: float, reps: int) -> float:
    """Fastest of ``reps`` calls (after a warm-up) of ``torch.topk`` on the magnitudes of one tensor: CPU
    seconds of the calling thread with one torch thread (as :func:`lowbw.measure.compress_time.time_setting`),
    else wall seconds."""
    x = torch.randn(shape, generator=torch.Generator().manual_seed(0)).flatten()
    k = max(1, math.ceil(ratio * x.numel()))
    best = math.inf
    for i in range(reps + 1):
        t = time.thread_time() if torch.get_num_threads() == 1 else time.perf_counter()
        x.abs().topk(k, sorted=False)
        dt = (time.thread_time() if torch.get_num_threads() == 1 else time.perf_counter()) - t
        if i:
            best = min(best, dt)
    return best


def run(params: float, method: str = "topk1", reps: int = 3, threads: int | None = None) -> dict[str, Any]:
    if threads:
        torch.set_num_threads(threads)
    c = next((x for x in candidates() if x.name == method), None)
    if c is None or c.compressor == "none":
        raise ValueError(f"--method {method!r}: not a compressed candidate of the advisor")
    shapes = transformer_shapes(params)
    counts = Counter(s for _, s in shapes)
    ratio = dict(c.compressor_args).get("ratio")
    rec = conditions.record().start()
    comp = compressor_of(c)
    own = sum(k * time_setting(comp, s, torch.device("cpu"), reps, budget_s=0.0)[0] for s, k in counts.items())
    ref = sum(k * torch_topk_s(s, ratio, reps) for s, k in counts.items()) if ratio else None
    cond = rec.stop()
    conditions.check(cond, "lowbw bench advise_compress")
    charged = compress_time(c, shapes, DEVICES["cpu"])
    return {"params": sum(math.prod(s) for _, s in shapes), "method": method, "distinct_shapes": len(counts),
            "tensors": len(shapes), "threads": torch.get_num_threads(), "reps": reps,
            "advisor_cpu_s": charged.seconds, "advisor_basis": charged.basis, "advisor_detail": charged.detail,
            "compressor_measured_s": own, "torch_topk_s": ref,
            "advisor_over_compressor": charged.seconds / own,
            "advisor_over_torch_topk": charged.seconds / ref if ref else None,
            "conditions": cond.to_json(), "provenance": provenance()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m lowbw.bench.advise_compress", description=__doc__.splitlines()[0])
    ap.add_argument("--params", type=float, default=1.5e8)
    ap.add_argument("--method", default="topk1")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1, help="torch threads (default 1, as the stored CPU file)")
    ap.add_argument("--out", default="runs/bench/advise_compress.json")
    a = ap.parse_args(argv)
    try:
        out = run(a.params, a.method, a.reps, a.threads)
    except ValueError as e:
        print(f"lowbw.bench.advise_compress: {e}", file=sys.stderr)
        return 2
    atomic_write_json(a.out, out)
    print(f"{out['method']} on {out['params']:,} parameters ({out['tensors']} tensors), {out['threads']} thread(s), "
          f"{conditions.describe(out['conditions'])}")
    print(f"  advisor --device cpu   {out['advisor_cpu_s']:8.3f} s  ({out['advisor_basis']}: {out['advisor_detail']})")
    print(f"  compressor measured    {out['compressor_measured_s']:8.3f} s  advisor / measured "
          f"{out['advisor_over_compressor']:.2f}")
    if out["torch_topk_s"] is not None:
        print(f"  torch.topk measured    {out['torch_topk_s']:8.3f} s  advisor / torch.topk "
              f"{out['advisor_over_torch_topk']:.2f}")
    print(a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
