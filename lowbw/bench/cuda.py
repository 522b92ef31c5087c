"""GPU path checks: lowbw's collectives, compressed aggregation and DDP hooks on CUDA tensors.

CI has no GPU, so this is what validates the CUDA/NCCL code paths where a GPU exists. It writes
``runs/bench/cuda.json`` (with provenance, the device and the machine's conditions while it measured, also per
world: :mod:`lowbw.measure.conditions`; ``--strict`` refuses to write it when the machine was busy) and prints a
table; it exits non-zero if any check fails. ``--device cpu`` runs the same checks on host tensors (gloo worlds
only), without a GPU.

    python -m lowbw.bench.cuda [--worlds nccl:1 gloo:2 gloo:4 nccl:2] [--time-mb 64] [--out runs/bench/cuda.json]
        [--device cuda|cpu] [--strict]

For every ``backend:N`` world (N processes on this machine; rank r uses GPU ``r mod #GPUs``):

* every all-reduce algorithm on CUDA tensors of fp32/fp16/bf16 and sizes not divisible by N, against an
  fp64 reference sum of the same inputs (tolerance by dtype, or twice torch's own error, whichever is larger);
* compressed aggregation (``Compressor.aggregate`` over a :class:`~lowbw.comm.DistCollective`) of a few
  compressors against the mean of what every rank's payload decompresses to;
* a DDP model on the GPU with :func:`lowbw.comm.hooks.make_hook` (fp16 over our ring): its averaged
  gradients against a plain all-reduce mean;
* the time of a ``time_mb`` MB fp32 all-reduce per algorithm (median of 5, slowest rank; unshaped links).

NCCL needs one GPU per rank: a world with more NCCL ranks than GPUs is attempted and its error recorded
(``ok: false, expected_failure: true``), not hidden. gloo moves CUDA tensors through host memory
(:class:`lowbw.comm.transport.DistTransport` stages them).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from typing import Any

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import lowbw.comm as comm
import lowbw.compress as C
from lowbw.comm.algorithms import ALLREDUCE_ALGORITHMS
from lowbw.comm.distributed import DistCollective
from lowbw.comm.hooks import make_hook
from lowbw.comm.testing import run_procs
from lowbw.measure import conditions
from lowbw.runs.io import atomic_write_json, provenance

__all__ = ["check_world", "run", "main"]

DTYPE_TOL = {"float32": 1e-5, "float16": 2e-3, "bfloat16": 2e-2}
SIZES = (1, 1001, (1 << 18) + 3)
AGG_COMPRESSORS = (("none", {}), ("fp16", {}), ("blockwise", {"bits": 8}), ("topk", {"ratio": 0.01}),
                   ("powersgd", {"rank": 2}))


def _inputs(rank: int, n: int, seed: int = 0):
    return torch.randn(n, generator=torch.Generator().manual_seed(seed * 1_000_003 + rank * 7919 + n))


def _world_worker(rank: int, world: int, algorithms: list[str], time_mb: float, reps: int,
                  device_type: str = "cuda") -> dict[str, Any]:
    """Runs in each rank (module level: child processes import it). ``device_type="cpu"`` runs the same
    checks on host tensors (so that CI exercises this script)."""
    if device_type == "cuda":
        dev = torch.device("cuda", rank % torch.cuda.device_count())
        torch.cuda.set_device(dev)
    else:
        dev = torch.device("cpu")

    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
    out: dict[str, Any] = {"rank": rank, "device": str(dev), "allreduce": [], "aggregate": [], "ddp": None,
                           "times": {}}

    # --- correctness of every algorithm on CUDA tensors
    for dt in ("float32", "float16", "bfloat16"):
        dtype = getattr(torch, dt)
        for n in SIZES:
            xs = [_inputs(r, n).to(dtype) for r in range(world)]  # what every rank holds (same on all ranks)
            ref = torch.stack([x.double() for x in xs]).sum(0)
            scale = float(ref.abs().max()) or 1.0
            errs = {}
            for alg in algorithms:
                t = xs[rank].clone().to(dev)
                comm.allreduce(t, alg, timeout=60)
                sync()
                if t.device != dev or t.dtype != dtype:
                    raise AssertionError(f"{alg}: result moved to {t.device}/{t.dtype}")
                errs[alg] = float((t.double().cpu() - ref).abs().max()) / scale
            tol = max(DTYPE_TOL[dt], 2 * errs.get("native", 0.0))
            for alg, e in errs.items():
                out["allreduce"].append({"algorithm": alg, "dtype": dt, "numel": n, "rel_err": e, "tol": tol,
                                         "ok": e <= tol})

    # --- compressed aggregation over our ring on CUDA

    for name, kw in AGG_COMPRESSORS:
        comp = C.make(name, **kw)
        x = _inputs(rank, 40_000, seed=1).reshape(200, 200)
        # a low-rank compressor (its registered family) gets its case: a rank-2 matrix common to all ranks + 1%
        # rank-local noise; one whose exchange is rounds of its own (not one payload per rank) is checked against
        # the plain mean, the others against the mean of every rank's decoded payload
        low_rank = C.registry.entry(name).family == "lowrank"
        own_rounds = type(comp).rounds is not C.Compressor.rounds
        if low_rank:
            u, v = _inputs(0, 400, seed=2).reshape(200, 2), _inputs(0, 400, seed=3).reshape(2, 200)
            x = u @ v + 0.01 * x
        x = x.to(dev)
        coll = DistCollective("ring", timeout=60)
        agg = comp.aggregate(x.clone(), coll, "w", C.State())
        # reference: every rank's own decompressed payload, averaged with torch's all_reduce
        comp2 = C.make(name, **kw)
        mine = None if own_rounds else comp2.decompress(comp2.compress(x.clone(), "w", C.State()))
        row = {"compressor": name, "device": str(agg.device), "shape": list(agg.shape), "finite": bool(
            torch.isfinite(agg).all())}
        if mine is not None:
            ref = mine.double().clone()
            dist.all_reduce(ref)
            ref /= world
            row["rel_err"] = float((agg.double() - ref).abs().max() / (ref.abs().max() + 1e-30))
            row["ok"] = row["rel_err"] < 1e-3 and agg.device == dev and row["finite"]
        else:  # its payload needs the collective itself (PowerSGD's P and Q): close to the mean
            mean = x.double().clone()
            dist.all_reduce(mean)
            mean /= world
            row["rel_err_vs_mean"] = float((agg.double() - mean).norm() / mean.norm())
            row["ok"] = agg.device == dev and row["finite"] and row["rel_err_vs_mean"] < 0.05
        out["aggregate"].append(row)

    # --- DDP with our hook (fp16 payloads over our ring) on the GPU

    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10)).to(dev)
    ref_net = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10)).to(dev)
    ref_net.load_state_dict(net.state_dict())
    ddp = DDP(net, device_ids=[dev.index] if dev.type == "cuda" else None)
    state, hook = make_hook("fp16", algorithm="ring")
    ddp.register_comm_hook(state, hook)
    g = torch.Generator().manual_seed(100 + rank)
    x, y = torch.randn(32, 64, generator=g).to(dev), torch.randint(0, 10, (32,), generator=g).to(dev)
    torch.nn.functional.cross_entropy(ddp(x), y).backward()
    torch.nn.functional.cross_entropy(ref_net(x), y).backward()
    worst = 0.0
    for p, q in zip(net.parameters(), ref_net.parameters()):
        gq = q.grad.clone()
        dist.all_reduce(gq)
        gq /= world
        worst = max(worst, float((p.grad - gq).abs().max() / (gq.abs().max() + 1e-30)))
    out["ddp"] = {"hook": "fp16 over ring", "rel_err": worst, "bytes_sent": state.meter.bytes_sent,
                  "ok": worst < 5e-3}

    # --- time of a time_mb MB fp32 all-reduce per algorithm
    n = int(time_mb * 1e6 / 4)
    buf = torch.ones(n, device=dev)
    for alg in algorithms:
        ts = []
        for i in range(reps + 1):
            dist.barrier()
            sync()
            t0 = time.perf_counter()
            comm.allreduce(buf, alg, timeout=120)
            sync()
            if i:
                ts.append(time.perf_counter() - t0)
            buf.fill_(1.0)
        out["times"][alg] = ts
    return out


def check_world(backend: str, world: int, algorithms: list[str], time_mb: float = 64.0, reps: int = 5,
                timeout: float = 600.0, device_type: str = "cuda") -> dict[str, Any]:
    """Run the checks in ``world`` processes on ``backend``; one summary dict (``ok``, rows, times)."""
    ngpu = torch.cuda.device_count()
    t0 = time.perf_counter()
    # one torch thread per rank: with torch's default (every core) a rank forked from run_procs' forkserver can
    # deadlock in its first CPU op (seen on a 2-core machine: both ranks blocked in _inputs until killed)
    res = run_procs(_world_worker, world, algorithms, time_mb, reps, device_type, backend=backend,
                    timeout=timeout, dist_timeout=120.0, threads=1, raise_errors=False)
    summary: dict[str, Any] = {"backend": backend, "world_size": world, "gpus": ngpu, "device_type": device_type,
                               "seconds": time.perf_counter() - t0}
    bad = [r for r in res if not r.ok]
    if bad:
        summary.update(ok=False, errors={r.rank: r.error[:2000] for r in bad})
        summary["expected_failure"] = backend == "nccl" and world > ngpu
        return summary
    vals = [r.value for r in res]
    rows = [row for v in vals for row in v["allreduce"]]
    aggs = [row for v in vals for row in v["aggregate"]]
    ddps = [v["ddp"] for v in vals]
    times = {}
    for alg in algorithms:
        per_rep = [max(v["times"][alg][i] for v in vals) for i in range(reps)]
        med = statistics.median(per_rep)
        times[alg] = {"median_s": med, "all_s": per_rep, "algbw_GBps": time_mb * 1e6 / med / 1e9}
    summary.update(
        ok=all(r["ok"] for r in rows) and all(a["ok"] for a in aggs) and all(d["ok"] for d in ddps),
        allreduce_checks=len(rows), allreduce_failed=[r for r in rows if not r["ok"]],
        worst_rel_err={dt: max(r["rel_err"] for r in rows if r["dtype"] == dt) for dt in DTYPE_TOL},
        aggregate=aggs[: len(AGG_COMPRESSORS)], aggregate_failed=[a for a in aggs if not a["ok"]],
        ddp=ddps[0], ddp_failed=[d for d in ddps if not d["ok"]], time_mb=time_mb, times=times,
    )
    return summary


def run(worlds: list[tuple[str, int]], algorithms: list[str] | None = None, time_mb: float = 64.0,
        reps: int = 5, device_type: str = "cuda") -> dict[str, Any]:
    """Every world's checks (``device_type="cpu"``: on host tensors); each world's row carries the machine's
    conditions while it ran (``"conditions"``, without samples)."""
    if device_type == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("python -m lowbw.bench.cuda needs a CUDA device (torch.cuda.is_available() is False; "
                           "--device cpu runs the checks on host tensors)")
    algs = list(algorithms or ALLREDUCE_ALGORITHMS)
    gpu = device_type == "cuda"
    env = {"device_type": device_type, "device_name": torch.cuda.get_device_name(0) if gpu else "cpu (host tensors)",
           "gpus": torch.cuda.device_count(), "torch": torch.__version__, "cuda": torch.version.cuda,
           "nccl": ".".join(map(str, torch.cuda.nccl.version()))
           if gpu and torch.distributed.is_nccl_available() else None}
    results = []
    for backend, n in worlds:
        print(f"[cuda] {backend} x{n} ...", file=sys.stderr, flush=True)
        with conditions.record(interval_s=0) as cell:  # this world's own conditions: its row's mark
            row = check_world(backend, n, algs, time_mb, reps, device_type=device_type)
        results.append({**row, "conditions": cell.conditions.to_json(samples=False)})
    ok = all(r["ok"] or r.get("expected_failure") for r in results)
    return {"env": env, "worlds": results, "algorithms": algs, "ok": ok}


def table(res: dict[str, Any]) -> str:
    lines = [f"{res['env']['device_name']}  torch {res['env']['torch']}  CUDA {res['env']['cuda']}  "
             f"NCCL {res['env']['nccl']}"]
    for w in res["worlds"]:
        head = f"{w['backend']} x{w['world_size']}: "
        if not w["ok"]:
            err = next(iter(w.get("errors", {}).values()), "") or "checks failed"
            tag = "expected (one GPU per NCCL rank)" if w.get("expected_failure") else "FAILED"
            lines.append(head + f"{tag}: {str(err).splitlines()[0][:160]}")
            if "allreduce_failed" in w:
                lines.append(f"   allreduce failed: {w['allreduce_failed'][:3]}")
            continue
        lines.append(head + f"ok ({w['allreduce_checks']} all-reduce checks; worst rel err "
                     + ", ".join(f"{k} {v:.1e}" for k, v in w["worst_rel_err"].items())
                     + f"; DDP fp16 hook rel err {w['ddp']['rel_err']:.1e})")
        lines.append("   " + "  ".join(f"{a} {t['median_s'] * 1e3:.1f} ms" for a, t in w["times"].items())
                     + f"   ({w['time_mb']:g} MB)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m lowbw.bench.cuda", description=__doc__.splitlines()[0])
    ap.add_argument("--worlds", nargs="+", default=["nccl:1", "gloo:2", "gloo:4", "nccl:2"],
                    help="backend:N pairs (N processes)")
    ap.add_argument("--algorithms", nargs="+")
    ap.add_argument("--time-mb", type=float, default=64.0)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--out", default="runs/bench/cuda.json")
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                    help="cpu: the same checks on host tensors (gloo worlds only; no GPU needed)")
    conditions.add_strict_flag(ap)
    a = ap.parse_args(argv)
    worlds = []
    for w in a.worlds:
        b, _, n = w.partition(":")
        if b not in ("nccl", "gloo") or not n.isdigit() or int(n) < 1:
            ap.error(f"--worlds {w!r}: expected nccl:N or gloo:N with N >= 1")
        if a.device == "cpu" and b == "nccl":
            ap.error(f"--worlds {w}: NCCL needs GPUs; --device cpu takes gloo:N worlds")
        worlds.append((b, int(n)))
    with conditions.record() as whole:
        res = run(worlds, a.algorithms, a.time_mb, a.reps, device_type=a.device)
    res["provenance"] = provenance()
    res["conditions"] = whole.conditions.to_json()
    if not conditions.check(whole.conditions, "python -m lowbw.bench.cuda", a.out, a.strict):
        return 1
    atomic_write_json(a.out, res)
    print(table(res))
    print(f"wrote {a.out}")
    return 0 if res["ok"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
