"""E8's probe of the host: what the virtual clock needs to know about *this machine* and nothing about a
training run, measured on a testbed like a cell's: the software stack's per-message cost after each CPU gap,
in the cell's own sequence of calls, and in its exchange made in situ (a per-layer compressor's real work
between tiny real messages), Hockney's alpha (ping-pong, recorded), and the slow-down of the cell's compute and
compression when its N workers share the cores (each rank's times kept). What the measurements
mean for a cell is :mod:`lowbw.bench.e8.calibration`'s; the method is the paper's E8 section.

    python -m lowbw bench e2e_probe --workers 2 --rate 100mbit [--gaps 0 0.5 1 2] [--calls 9] [--ddp] \\
        [--method topk1 [--compute-ms 5]] [--realtime [PRIO]] [--strict]   # root
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel

from lowbw.bench import bench_provenance
from lowbw.bench.e8.calibration import probe_summary
from lowbw.bench.e8.calls import (
    InSituCollective,
    RecordingCollective,
    call_sequence,
    exchange_parts,
    probe_batch,
    probe_model,
)
from lowbw.bench.e8.grid import add_realtime_flag, check_realtime
from lowbw.comm.distributed import DistCollective
from lowbw.comm.hooks import make_hook, timed_hook
from lowbw.launch.rendezvous import init_process_group
from lowbw.measure import conditions
from lowbw.measure.presets import load_methods
from lowbw.net.testbed import Testbed
from lowbw.net.units import rate_mbit_arg
from lowbw.runs.io import atomic_write_json
from lowbw.train.aggregate import aggregate_rank, make_compressor
from lowbw.train.allocator import steady_allocator
from lowbw.train.assign import seed_for
from lowbw.train.config import RunConfig
from lowbw.train.launch import free_port
from lowbw.train.optim import FlatOptimizer
from lowbw.train.replicas import Replicas

__all__ = ["probe", "PROBE_GAPS_MS", "PROBE_MAX_GAP_MS", "main"]

PROBE_REPS = 40  # repetitions of a burst of PROBE_BURST tiny all-gathers, per gap
PROBE_BURST = 10
PROBE_GAPS_MS = (0.0, 0.25, 0.5, 1.0, 2.0)  # CPU work before each probed call (ms): 0 = back to back
PROBE_PINGPONG = 200  # round trips of one float between ranks 0 and 1
PROBE_COMPUTE_REPS = 40  # compute steps alone and together (alternately)
PROBE_MAX_GAP_MS = 10.0  # the longest CPU gap a probe spins for (a call after more work costs about the same)


def _busy(cpu_seconds: float) -> None:
    """Spin until this thread has used ``cpu_seconds`` of CPU (work, not a sleep; on shared cores it takes
    longer in wall time, as the cell's compression does, which the clock's compute factor already covers)."""
    t0 = time.thread_time()
    while time.thread_time() - t0 < cpu_seconds:
        pass


def _gather_all(t):
    """Every rank's ``t`` stacked in rank order (a leading dimension of the world size)."""
    every = [torch.zeros_like(t) for _ in range(dist.get_world_size())]
    dist.all_gather(every, t)
    return torch.stack(every)


def _probe_worker(spec_path: str) -> int:
    """One testbed worker of the probe (see the module docstring); rank 0 writes the result."""

    spec = json.loads(Path(spec_path).read_text())
    cfg = RunConfig.from_dict(spec["config"])
    steady_allocator()  # as the cell's workers and sim do
    torch.set_num_threads(int(os.environ.get("LOWBW_THREADS", "1")))
    init_process_group("gloo", _dt.timedelta(seconds=120))  # its store listens on MASTER_ADDR only
    rank = dist.get_rank()
    coll = DistCollective(cfg.collective, timeout=120)
    one = torch.zeros(1)
    gathers: dict[str, list[float]] = {}
    for gap_ms in spec.get("gaps_ms", PROBE_GAPS_MS):
        gap = gap_ms / 1e3
        t_in = torch.zeros(PROBE_REPS, PROBE_BURST, dtype=torch.float64)
        for i in range(PROBE_REPS + 2):
            # every call after `gap` of CPU work on every rank, as a step's calls follow its backward pass or
            # the previous layer's compression, timed inside the call
            dist.barrier()
            for j in range(PROBE_BURST):
                _busy(gap)
                t0 = time.perf_counter()
                coll.all_gather(one)
                if i >= 2:
                    t_in[i - 2, j] = time.perf_counter() - t0
        # per call the rank that came last into it (it waited for no peer still at work: that skew is the
        # clock's compute term, the slowest worker's, not communication)
        gathers[f"{gap_ms:g}"] = _gather_all(t_in).min(dim=0).values.mean(dim=1).tolist()
    # the cell's sequence of calls, each after its CPU work, timed on every rank: the work's wall time before
    # each call and the time inside it
    sequence = spec.get("sequence") or []
    tiny = {"all_gather": one, "all_reduce": torch.zeros(dist.get_world_size()), "broadcast": one}
    t_work = torch.zeros(PROBE_REPS, max(len(sequence), 1), dtype=torch.float64)
    t_call = torch.zeros_like(t_work)
    for i in range(PROBE_REPS + 2 if sequence else 0):
        dist.barrier()
        for j, (op, gap_ms) in enumerate(sequence):
            t0 = time.perf_counter()
            _busy(min(gap_ms, PROBE_MAX_GAP_MS) / 1e3)
            t1 = time.perf_counter()
            if op == "broadcast":
                coll.broadcast(tiny[op], 0)
            else:
                getattr(coll, op)(tiny[op])
            if i >= 2:
                t_work[i - 2, j], t_call[i - 2, j] = t1 - t0, time.perf_counter() - t1
    work = _gather_all(t_work)  # [ranks, reps, calls]
    calls = _gather_all(t_call)
    # per rep the rank whose work took longest: the clock charges the slowest worker's work of a step, and
    # beyond it what that worker's calls took, waits for a peer that came later into one of them included
    slowest = work.sum(dim=2).argmax(dim=0)
    in_calls = calls[slowest, torch.arange(calls.shape[1])]  # [reps, calls]
    last_in = calls.min(dim=0).values  # per call the rank that came last into it: the call alone
    # ping-pong of one float between ranks 0 and 1 (the others wait): one-way = round trip / 2, Hockney's
    # alpha, as E1 calibrates it
    pingpong = []
    dist.barrier()
    if rank < 2:
        buf = torch.zeros(1)
        for i in range(PROBE_PINGPONG + 10):
            t0 = time.perf_counter()
            if rank == 0:
                dist.send(buf, 1)
                dist.recv(buf, 1)
            else:
                dist.recv(buf, 0)
                dist.send(buf, 0)
            if i >= 10:
                pingpong.append((time.perf_counter() - t0) / 2)
    dist.barrier()
    # compute: rank 0 alone (the others wait in a barrier), then every rank at once
    data_shape = (spec["input_shape"], spec["num_classes"])
    torch.manual_seed(0)
    rep = Replicas(probe_model(cfg.model, data_shape), 1)
    opt = FlatOptimizer(cfg.optimizer, (1, rep.P), "cpu", momentum=cfg.momentum, weight_decay=cfg.weight_decay)
    x, y = probe_batch(data_shape, cfg.local_batch)

    def step() -> float:
        t0 = time.perf_counter()
        rep.forward_backward([x], [y])
        opt.step(rep.params, rep.grads, 1e-3)
        return time.perf_counter() - t0

    cell_step = _ddp_step(cfg, spec, x, y) if spec.get("ddp") else step
    calls = int(round(spec.get("calls_per_step", 0.0)))
    alone: list[float] = []
    together: list[float] = []
    mine: list[float] = []  # this rank's own times of the N at once
    step()
    cell_step()
    exchange = _in_situ_exchange(spec, rep, coll, tiny, calls)
    in_situ: list[tuple[float, float]] = []  # this rank's (work, time inside the calls) per exchange
    for _ in range(spec["compute_reps"]):  # alternate, so that background load hits both alike
        dist.barrier()
        if rank == 0:
            alone.append(step())
        dist.barrier()
        if exchange is None:  # the cell's calls of a step, then its compute
            for _ in range(calls):
                coll.all_gather(one)
        else:  # the cell's exchange in situ, then its compute; the exchange starts on every worker together
            # (after the barrier): a worker's late compute is the clock's compute term, not the calls'
            in_situ.append(exchange())
        mine.append(cell_step())
        t = torch.tensor([mine[-1]], dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)  # a synchronous step waits for the slowest worker
        together.append(float(t))
    # every rank's own times: workers that synchronise every H steps wait only for the slowest H-step sum
    by_rank = _gather_all(torch.tensor(mine, dtype=torch.float64)).tolist()
    close = getattr(cell_step, "close", None)
    if close is not None:
        close()
    c_alone, c_together = _compress_reps(spec, rep, rank)
    ex_work: list[float] = []
    ex_calls: list[float] = []
    if exchange is not None:
        ex = _gather_all(torch.tensor(in_situ, dtype=torch.float64))  # [ranks, reps, (work, calls)]
        # per rep the worker whose work took longest, and the time inside its calls (waits for later peers
        # included), as for the replayed sequence above
        slow = ex[:, :, 0].argmax(dim=0)
        picked = ex[slow, torch.arange(ex.shape[1])]
        ex_work, ex_calls = picked[:, 0].tolist(), picked[:, 1].tolist()
    if rank == 0:
        Path(spec["out"]).write_text(json.dumps({"allgather_by_gap_s": gathers, "pingpong_s": pingpong,
                                                 "sequence": sequence,
                                                 "sequence_s": in_calls.mean(dim=1).tolist() if sequence else [],
                                                 "sequence_by_call_s": in_calls.mean(dim=0).tolist() if sequence
                                                 else [],
                                                 "sequence_last_in_s": last_in.mean(dim=1).tolist() if sequence
                                                 else [],
                                                 "sequence_work_s": work.sum(dim=2).max(dim=0).values.tolist()
                                                 if sequence else [],
                                                 "compute_alone_s": alone, "compute_together_s": together,
                                                 "compute_together_by_rank_s": by_rank,
                                                 "compress_alone_s": c_alone, "compress_together_s": c_together,
                                                 "exchange_work_s": ex_work, "exchange_calls_s": ex_calls,
                                                 "exchange_calls": calls if exchange is not None else 0,
                                                 "calls_per_step": calls, "ddp": bool(spec.get("ddp")),
                                                 "ddp_cell_hook": bool(spec.get("hook_method"))}))
    dist.destroy_process_group()
    return 0


def _in_situ_exchange(spec: dict[str, Any], rep, coll, tiny: dict[str, torch.Tensor], calls: int):
    """The cell's exchange in situ, or None where there is none to make: a function that runs one exchange of
    the cell's compressor (``spec["twin"]``) on this rank's last gradient through an
    :class:`~lowbw.bench.e8.calls.InSituCollective` on ``coll`` and returns (seconds of work, seconds inside
    the calls). Made for a synchronous cell with a compressor outside DDP (its ``calls`` per step are one
    exchange's); a dense cell's one all-reduce has no work around it, and a cell that exchanges every H steps
    is replayed by the sequence and gaps alone."""
    if spec.get("ddp") or not spec.get("twin") or calls <= 0:
        return None
    parts = exchange_parts(RunConfig.from_dict(spec["twin"]), rep)
    if parts is None or calls != len(spec.get("sequence") or []):
        return None
    comp, chunks, state, bucket_mb = parts
    grad = rep.grads[0].clone()

    def once() -> tuple[float, float]:
        situ = InSituCollective(coll, tiny)
        t0 = time.perf_counter()
        aggregate_rank(grad, chunks, situ, comp, state, bucket_mb)
        elapsed = time.perf_counter() - t0
        return elapsed - situ.calls_s, situ.calls_s

    once()
    return once


def _compress_reps(spec: dict[str, Any], rep, rank: int) -> tuple[list[float], list[float]]:
    """Seconds of one exchange's compression and decompression with the cell's compressor (``spec["twin"]``,
    its sim run's config) on this rank's last gradient, through a stand-in collective of N ranks (no
    communication): rank 0 alone, then all N at once (the slowest), alternately; empty without a compressor.
    The clock scales compression by their ratio: N workers slow each other's compression less than their
    forward and backward passes."""

    parts = exchange_parts(RunConfig.from_dict(spec["twin"]), rep) if spec.get("twin") else None
    if parts is None:
        return [], []
    comp, chunks, state, bucket_mb = parts
    coll = RecordingCollective(dist.get_world_size())
    grad = rep.grads[0].clone()

    def once() -> float:
        t0 = time.perf_counter()
        aggregate_rank(grad, chunks, coll, comp, state, bucket_mb)
        return time.perf_counter() - t0

    once()
    alone: list[float] = []
    together: list[float] = []
    for _ in range(spec["compute_reps"]):
        dist.barrier()
        if rank == 0:
            alone.append(once())
        dist.barrier()
        t = torch.tensor([once()], dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        together.append(float(t))
    return alone, together


def _ddp_step(cfg, spec: dict[str, Any], x, y):
    """A DDP cell's compute step (seconds): forward + backward through DistributedDataParallel with lowbw's
    hook, and an SGD update, less the exchange thread's busy time and the hook calls (as
    :class:`lowbw.train.ddp.DDPTrainer` splits a step). The hook is the cell's own (``spec["hook_method"]``,
    its method's keys) where given: the worker then waits for an exchange as long as the cell's, and the
    hand-offs around that wait (to the exchange thread, and back to a worker that has gone to sleep) count as
    compute in the cell's split too; otherwise a one-element top-k per bucket. Has ``close()``."""
    import warnings



    model = probe_model(cfg.model, (spec["input_shape"], spec["num_classes"]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        ddp = DistributedDataParallel(model, broadcast_buffers=False)
    method = spec.get("hook_method")
    if method:  # the cell's compressor, as DDPTrainer builds it


        rc = RunConfig.from_dict({**spec["config"], **method, "ddp_hook": False})
        comp = make_compressor(rc)
        state, hook = make_hook(comp if comp is not None else "none", algorithm=cfg.collective, module=model,
                                seed=seed_for(rc.seed, "compress", dist.get_rank()) % (2**31))
    else:
        state, hook = make_hook("topk", granularity="bucket", ratio=1e-9, module=model)
    timed, timer = timed_hook(hook)
    ddp.register_comm_hook(state, timed)
    params = list(model.parameters())

    def step() -> float:
        timer.seconds, busy0 = 0.0, state.stats.busy_s
        t0 = time.perf_counter()
        ddp.zero_grad(set_to_none=True)
        F.cross_entropy(ddp(x).flatten(0, -2), y.flatten()).backward()
        with torch.no_grad():
            torch.cat([p.grad.reshape(-1) for p in params])
            for p in params:
                p.add_(p.grad, alpha=-1e-3)
        return time.perf_counter() - t0 - (state.stats.busy_s - busy0) - timer.seconds

    step.close = state.close
    return step


def probe(cfg: dict[str, Any], workers: int, rate: float, data_shape: tuple[list[int], int],
          gaps_ms: Sequence[float] = PROBE_GAPS_MS, calls_per_step: float = 0.0, ddp: bool = False,
          sequence: Sequence[tuple[str, float]] = (), hook_method: dict[str, Any] | None = None,
          twin: dict[str, Any] | None = None, realtime: int = 0) -> dict[str, Any]:
    """Raw samples of one probe on a testbed of ``workers`` at ``rate`` Mbit/s, calls after each of ``gaps_ms`` of CPU
    work, and ``sequence`` replayed (:func:`~lowbw.bench.e8.calls.call_sequence`'s form); the compute of N at once
    after ``calls_per_step`` calls (rounded), through DDP if ``ddp``, with the hook of ``hook_method`` (a method's
    config keys) if given, and the compression of ``twin`` (a cell's sim config) alone and at once (see
    :func:`lowbw.bench.e8.calibration.probe_summary`); the workers under SCHED_RR priority ``realtime`` where
    it is not 0, as the cell's (``testbed_realtime``)."""
    root = str(Path(__file__).resolve().parents[2])
    with tempfile.TemporaryDirectory(prefix="lowbw-e2e-") as td:
        spec = Path(td) / "spec.json"
        out = Path(td) / "probe.json"
        spec.write_text(json.dumps({"config": cfg, "out": str(out), "input_shape": data_shape[0],
                                    "num_classes": data_shape[1], "compute_reps": PROBE_COMPUTE_REPS,
                                    "gaps_ms": [float(g) for g in gaps_ms],
                                    "calls_per_step": float(calls_per_step), "ddp": bool(ddp),
                                    "sequence": [[op, float(g)] for op, g in sequence],
                                    "hook_method": hook_method, "twin": twin}))
        env = dict(os.environ, OMP_NUM_THREADS="1", LOWBW_THREADS="1",
                   PYTHONPATH=root + (os.pathsep + os.environ["PYTHONPATH"] if os.environ.get("PYTHONPATH") else ""))
        with Testbed(workers=workers, rate=f"{rate}mbit", master_port=free_port(), realtime=realtime or None) as tb:
            codes = tb.run([sys.executable, "-m", "lowbw.bench.e2e_probe", "--worker", str(spec)], env=env, cwd=root,
                           timeout=600)
            emulation = tb.emulation
            # the shapers' token bucket (tc tbf's burst, wire bytes), which the sim's clock models
            burst = tb.tbf_params(rate * 1e6)["burst"] if emulation == "netns-tc" else 0
        if any(codes) or not out.exists():
            raise RuntimeError(f"e2e probe at {rate} Mbit/s, {workers} workers: worker exit codes {codes}")
        res = json.loads(out.read_text())
    res["emulation"] = emulation
    res["shaper_burst_bytes"] = burst
    res["realtime"] = realtime
    return res


def main(argv: list[str] | None = None) -> int:
    """The probe alone, on a testbed of ``--workers`` at ``--rate`` Mbit/s: the per-message cost after each
    CPU gap and the compute slow-down, as the E8 cells see them (MLP on synthetic data for the compute)."""
    import argparse


    ap = argparse.ArgumentParser(prog="python -m lowbw bench e2e_probe", description=main.__doc__.split(".")[0])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--rate", type=rate_mbit_arg("--rate"), default=100.0,
                    help="link rate with its unit, e.g. 100mbit, 1gbit (default 100 Mbit/s)")
    ap.add_argument("--gaps", type=float, nargs="+", default=list(PROBE_GAPS_MS), help="CPU gaps before calls, ms")
    ap.add_argument("--calls", type=float, default=0.0, help="a cell's calls per step, before each compute")
    ap.add_argument("--ddp", action="store_true", help="compute through DDP with lowbw's hook, as a +ddp cell")
    ap.add_argument("--method", help="also replay the calls of one exchange of this config/config.yaml preset "
                    "(the synthetic MLP's gradient), each after its compression's CPU work")
    ap.add_argument("--compute-ms", type=float, default=5.0,
                    help="with --method: CPU work before the exchange's first call (a step's compute), ms")
    add_realtime_flag(ap)
    ap.add_argument("--out", default="runs/bench/e2e_probe.json")
    conditions.add_strict_flag(ap)
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.worker:
        return _probe_worker(a.worker)
    if a.workers < 2:
        ap.error(f"--workers {a.workers}: need at least 2")
    if a.rate <= 0:
        ap.error(f"--rate {a.rate:g}: must be > 0")
    if any(g < 0 for g in a.gaps):
        ap.error(f"--gaps {min(a.gaps):g}: gaps are >= 0 ms")
    if a.calls < 0:
        ap.error(f"--calls {a.calls:g}: must be >= 0")
    if a.compute_ms < 0:
        ap.error(f"--compute-ms {a.compute_ms:g}: must be >= 0")
    check_realtime(ap, a.realtime)
    cfg = {"dataset": "synthetic", "model": "mlp", "batch_size": 64 * a.workers, "workers": a.workers,
           "bandwidth_mbit": a.rate, "optimizer": "sgd", "collective": "ring"}
    shape = ([3, 16, 16], 10)
    sequence: list[tuple[str, float]] = []
    twin: dict[str, Any] | None = None
    if a.method:
        methods = load_methods()
        if a.method not in methods:
            ap.error(f"--method {a.method}: not a preset of config/config.yaml's methods")
        twin = {**cfg, **methods[a.method]}
        sequence = call_sequence(twin, a.workers, shape)
        sequence[0] = (sequence[0][0], sequence[0][1] + a.compute_ms)
    with conditions.record() as rec:
        res = probe(cfg, a.workers, a.rate, shape, gaps_ms=a.gaps, calls_per_step=a.calls, ddp=a.ddp,
                    sequence=sequence, twin=twin, realtime=a.realtime)
    pr = probe_summary([res], a.workers)
    if not conditions.check(rec.conditions, "lowbw bench e2e_probe", a.out, a.strict):
        return 1
    atomic_write_json(Path(a.out), {"provenance": bench_provenance(), "conditions": rec.conditions.to_json(),
                                    "workers": a.workers, "rate_mbit": a.rate, "emulation": res["emulation"], **pr})
    print(f"{'gap ms':>8} {'ms/message':>11}")
    for g, o in pr["overhead_curve"]:
        print(f"{g:8.2f} {o:11.3f}")
    if sequence:
        print(f"{a.method}'s {len(sequence)} calls after their CPU work: {pr['overhead_sequence_ms']:.3f} ms/message; "
              f"its compression x{pr['compress_scale']:.2f}")
    print(f"compute x{pr['compute_scale']:.2f} ({res['emulation']}); ping-pong one-way "
          f"{pr['overhead_pingpong_ms']:.3f} ms -> {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
