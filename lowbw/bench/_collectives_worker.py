"""One rank of the E1 collectives benchmark (:mod:`lowbw.bench.collectives` starts one per namespace).

It reads a plan (JSON), then: (1) ping-pong and simultaneous exchanges between ranks 0 and 1 at several
sizes (the alpha-beta calibration); (2) gamma, seconds per byte of a local fp32 sum; (3) every planned
(algorithm, size): a warm-up, then ``reps`` timed calls, each started on idle links by every rank at one
instant of the host's monotonic clock (announced by rank 0), its time being from that instant to the last
rank's return; the result is checked. Rank 0 writes everything to the plan's ``out``.

    python -m lowbw.bench.collectives --worker PLAN.json     (under the testbed; RANK, WORLD_SIZE, MASTER_*)
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist

import lowbw.comm as comm
from lowbw.bench.collectives_plan import FULL_WARMUP_MAX_S
from lowbw.comm.engine import DEFAULT_CHUNK_BYTES, DEFAULT_WINDOW, chunk_elems, run_allreduce
from lowbw.comm.numerics import Reducer
from lowbw.comm.registry import get as collective_spec
from lowbw.comm.transport import DistTransport
from lowbw.launch.rendezvous import init_process_group
from lowbw.net.ratelimit import install_from_env

LATE_START_S = 1e-3  # a rank that sees the common start instant more than this late counts as a late start

__all__ = ["main"]


def main(plan_path: str) -> int:
    """Run the plan in ``plan_path`` as one rank (rank 0 writes the results to the plan's ``out``)."""
    spec = json.loads(Path(plan_path).read_text())
    limiter = install_from_env()  # loopback-ratelimit only; the kernel shapes netns-tc links
    init_process_group("gloo", timedelta(seconds=600))  # its store listens on MASTER_ADDR only
    rank, n = dist.get_rank(), dist.get_world_size()
    torch.set_num_threads(1)

    def slowest(dt: float) -> float:
        t = torch.tensor([dt], dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return float(t.item())

    # ping-pong between ranks 0 and 1 (everyone else waits at the barrier)
    pingpong = []
    for nb in spec["pingpong_sizes"]:
        buf = torch.zeros(max(1, nb // 4), dtype=torch.float32)
        times = []
        dist.barrier()
        for i in range(6):
            if rank == 0:
                t0 = time.perf_counter()
                dist.send(buf, 1)
                dist.recv(buf, 1)
                if i:  # the first exchange warms up
                    times.append((time.perf_counter() - t0) / 2)
            elif rank == 1:
                dist.recv(buf, 0)
                dist.send(buf, 0)
        # exchange: both send at once (receive posted first), one direction's time = the whole exchange
        other = torch.zeros_like(buf)
        xtimes = []
        for i in range(4):
            if rank in (0, 1):
                peer = 1 - rank
                sync = torch.zeros(1)
                if rank == 0:  # align the start with a tiny ping
                    dist.send(sync, 1)
                    dist.recv(sync, 1)
                else:
                    dist.recv(sync, 0)
                    dist.send(sync, 0)
                t0 = time.perf_counter()
                wr = dist.irecv(other, peer)
                ws = dist.isend(buf, peer)
                wr.wait()
                ws.wait()
                if i:
                    xtimes.append(time.perf_counter() - t0)
        if rank == 0:
            pingpong.append({"nbytes": buf.numel() * 4, "one_way_s": statistics.median(times), "samples_s": times,
                             "exchange_s": statistics.median(xtimes), "exchange_samples_s": xtimes})
    # gamma (alpha-beta-gamma model, Thakur et al. 2005): seconds per byte summed locally, on one thread as
    # the algorithms run here; it charges the reductions that are not hidden behind the transfers
    gamma = None
    if rank == 0:
        a, b = torch.ones(4 << 20), torch.ones(4 << 20)
        gts = []
        for _ in range(6):
            t0 = time.perf_counter()
            a.add_(b)
            gts.append(time.perf_counter() - t0)
        gamma = statistics.median(gts[1:]) / (a.numel() * a.element_size())
        del a, b
    dist.barrier()

    measurements = []
    idle_s = float(spec.get("idle_s") or 0.0)
    # every timed call starts on all ranks at one instant of the host's CLOCK_MONOTONIC (the namespaces share
    # it): a barrier's ranks leave it up to a one-way delay apart, and with 50 ms links that skew, not the
    # collective, would dominate a small call's time. Rank 0 broadcasts the instant ``lead`` seconds ahead:
    # the links' idle time plus room for the broadcast to reach everyone: the ranks leave the previous call's
    # all-reduce up to N one-way times apart, and gloo's send then waits for the receiver's ready notice (up
    # to 2 one-way times more): 2 (N + 1) one-way times of a small message, and 5 ms (the controller switches
    # off TCP's restart after idle, so that the wait does not cost the next call round trips)
    alpha0 = torch.tensor([min(p["one_way_s"] for p in pingpong) if rank == 0 else 0.0], dtype=torch.float64)
    dist.broadcast(alpha0, 0)
    lead = idle_s + 2 * (n + 1) * float(alpha0.item()) + 0.005

    def common_start() -> float:
        t = torch.tensor([time.monotonic() + lead if rank == 0 else 0.0], dtype=torch.float64)
        dist.broadcast(t, 0)
        return float(t.item())

    kw = {"chunk_bytes": spec["chunk_bytes"]} if spec.get("chunk_bytes") else {}
    chunk_bytes = spec.get("chunk_bytes") or DEFAULT_CHUNK_BYTES

    def call(x: torch.Tensor, alg: str) -> None:
        if collective_spec(alg).opaque:
            dist.all_reduce(x)  # gloo's own all-reduce, synchronous (padded under loopback emulation)
        else:
            comm.allreduce(x, algorithm=alg, **kw)

    def timed(alg: str, x: torch.Tensor, reps: int, run=None, starts: list | None = None) -> tuple[list[float], int]:
        """``reps`` calls (``run(x, alg)``, default :func:`call`), each started by every rank at one common
        instant (appended to ``starts``); (the slowest rank's times, calls some rank began late)."""
        times, late = [], 0
        dist.barrier()  # after the warm-ups: every rank is here before the first announcement
        for _ in range(reps):
            x.fill_(float(rank + 1))
            start = common_start()
            if starts is not None:
                starts.append(start)
            late += time.monotonic() > start + LATE_START_S
            while (wait := start - time.monotonic()) > 0:
                time.sleep(wait)
            (run or call)(x, alg)
            times.append(slowest(time.monotonic() - start))
        return times, int(slowest(float(late)))

    # each algorithm's software cost per step: tiny calls (no bytes to speak of) before the grid
    software = {}
    sw = spec.get("software") or {}
    for alg in sw.get("algorithms", []):
        x = torch.zeros(max(1, int(sw["nbytes"]) // 4))
        call(x, alg)
        call(x, alg)  # warm-up: connections, code paths
        times, late = timed(alg, x, int(sw["reps"][alg]))
        software[alg] = {"nbytes": x.numel() * 4, "times_s": times, "late_starts": late}
        # the per-call start lag: the same tiny calls traced, each rank's first message's posting time
        traced = _trace({"algorithm": alg, "nbytes": x.numel() * 4, "reps": int(sw["reps"][alg])},
                        timed, rank, n, chunk_bytes)
        if traced is not None:
            software[alg]["start_lags_s"] = [[min((e["posted"] for e in r), default=None) for r in c["ranks"]]
                                             for c in traced]
    trace = [{"plan": t, "calls": _trace(t, timed, rank, n, chunk_bytes)} for t in spec.get("trace") or []]

    for item in spec["plan"]:
        alg, nb = item["algorithm"], item["nbytes"]
        numel = nb // 4
        entry = {k: item[k] for k in ("size_mb", "nbytes", "algorithm", "predicted_s")}
        x = torch.full((numel,), float(rank + 1), dtype=torch.float32)
        try:
            call(torch.ones(1024), alg)  # warm-up on a small tensor: connections, code paths
            # and, where it is cheap, one untimed call at full size (as nccl-tests warm up every size): the TCP
            # state (congestion window) a previous algorithm left on these connections would otherwise show
            # up in the first timed calls
            full_warmup = float(item["predicted_s"]) <= FULL_WARMUP_MAX_S
            if full_warmup:
                call(x, alg)
            times, late_starts = timed(alg, x, int(item["reps"]))
            want = n * (n + 1) / 2
            ok = bool(x[0].item() == want and x[-1].item() == want and x[numel // 2].item() == want)
            entry.update(ok=ok, times_s=times, time_s=statistics.median(times), full_warmup=full_warmup,
                         start="aligned", lead_s=lead, late_starts=late_starts,
                         error=None if ok else f"wrong result {x[0].item()} != {want}")
        except Exception as e:  # a broken algorithm must not hide the others
            entry.update(ok=False, time_s=None, error=f"{type(e).__name__}: {str(e)[:300]}")
            if rank == 0:
                print(f"[worker] {alg} {nb} failed: {e}", file=sys.stderr)
            measurements.append(entry)
            break  # the group state is unknown after a failure
        measurements.append(entry)
        if rank == 0:
            print(f"[worker] N={n} {alg:10s} {nb / 1e6:7.1f} MB {entry['time_s']:.3f} s", file=sys.stderr, flush=True)
    if rank == 0:
        Path(spec["out"]).write_text(json.dumps({"pingpong": pingpong, "measurements": measurements,
                                                 "gamma_s_per_byte": gamma, "software": software,
                                                 "trace": trace if rank == 0 and trace else None,
                                                 "limiter": limiter is not None, "chunk_bytes": chunk_bytes}))
    dist.barrier()
    dist.destroy_process_group()
    return 0


class _TracedTransport(DistTransport):
    """A DistTransport that logs every message: when it was posted and when its wait returned (seconds of
    CLOCK_MONOTONIC), and whether it had completed before the wait began (then the wait's return is
    later than its completion: an upper bound)."""

    def __init__(self, log: list, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.log = log

    def post(self, ops):
        hs = super().post(ops)
        now = time.monotonic()
        for h in hs:
            self.log.append({"kind": h.kind, "peer": h.peer, "nbytes": h.nbytes, "posted": now, "done": None,
                             "handle": id(h)})
        return hs

    def wait(self, h):
        done_before = bool(h.work is not None and h.work.is_completed()) if not h.done else True
        out = super().wait(h)
        now = time.monotonic()
        for e in reversed(self.log):
            if e["handle"] == id(h) and e["done"] is None:
                e.update(done=now, done_before_wait=done_before)
                break
        return out


def _trace(spec: dict, timed, rank: int, n: int, chunk_bytes: int) -> list | None:
    """Per-message timings of ``spec["reps"]`` calls of ``spec["algorithm"]`` on ``spec["nbytes"]``, started as
    the grid's calls are: rank 0 gets, per call, every rank's messages with their posting and completion
    times in seconds from the call's start (the others None)."""
    alg, reps = spec["algorithm"], int(spec["reps"])
    calls: list[list] = []
    starts: list[float] = []

    def run(x: torch.Tensor, alg: str) -> None:
        log: list = []
        t0 = starts[-1] if starts else time.monotonic()  # the common start instant (the warm-up: now)
        tp = _TracedTransport(log, None, 600.0, None, context=f"{alg} trace")
        run_allreduce(x, tp, alg, Reducer("sum", x.dtype, n), chunk_elems(chunk_bytes, 4), DEFAULT_WINDOW)
        calls.append([{**{k: v for k, v in e.items() if k != "handle"}, "posted": e["posted"] - t0,
                       "done": None if e["done"] is None else e["done"] - t0} for e in log])

    x = torch.zeros(max(1, int(spec["nbytes"]) // 4))
    run(x, alg)
    calls.clear()  # the warm-up
    times, _ = timed(alg, x, reps, run, starts)
    gathered = [None] * n if rank == 0 else None
    dist.gather_object(calls, gathered, dst=0)
    if rank != 0:
        return None
    return [{"time_s": times[i], "ranks": [g[i] for g in gathered]} for i in range(reps)]
