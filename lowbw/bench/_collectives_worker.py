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
from lowbw.bench.collectives import FULL_WARMUP_MAX_S
from lowbw.comm.engine import DEFAULT_CHUNK_BYTES
from lowbw.net.ratelimit import install_from_env

LATE_START_S = 1e-3  # a rank that sees the common start instant more than this late counts as a late start

__all__ = ["main"]


def main(plan_path: str) -> int:
    """Run the plan in ``plan_path`` as one rank (rank 0 writes the results to the plan's ``out``)."""
    spec = json.loads(Path(plan_path).read_text())
    limiter = install_from_env()  # loopback-ratelimit only; the kernel shapes netns-tc links
    dist.init_process_group("gloo", timeout=timedelta(seconds=600))
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
    for item in spec["plan"]:
        alg, nb = item["algorithm"], item["nbytes"]
        numel = nb // 4
        entry = {k: item[k] for k in ("size_mb", "nbytes", "algorithm", "predicted_s")}
        def call(x: torch.Tensor, alg: str = alg) -> None:
            if alg == "native":
                dist.all_reduce(x)  # gloo's own all-reduce, synchronous (padded under loopback emulation)
            else:
                comm.allreduce(x, algorithm=alg, **kw)

        x = torch.full((numel,), float(rank + 1), dtype=torch.float32)
        try:
            warm = torch.ones(1024)
            call(warm)  # warm-up on a small tensor: connections, code paths
            # and, where it is cheap, one untimed call at full size (as nccl-tests warm up every size): the TCP
            # state (congestion window) a previous algorithm left on these connections would otherwise show
            # up in the first timed calls
            full_warmup = float(item["predicted_s"]) <= FULL_WARMUP_MAX_S
            if full_warmup:
                call(x)
            times = []
            late_starts = 0  # calls this rank began late: the broadcast of the start came after its instant
            dist.barrier()  # after the warm-ups: every rank is here before the first announcement
            for _ in range(int(item["reps"])):
                x.fill_(float(rank + 1))
                start = common_start()
                late_starts += time.monotonic() > start + LATE_START_S
                while (wait := start - time.monotonic()) > 0:
                    time.sleep(wait)
                call(x)
                times.append(slowest(time.monotonic() - start))
            want = n * (n + 1) / 2
            ok = bool(x[0].item() == want and x[-1].item() == want and x[numel // 2].item() == want)
            entry.update(ok=ok, times_s=times, time_s=statistics.median(times), full_warmup=full_warmup,
                         start="aligned", lead_s=lead, late_starts=int(slowest(float(late_starts))),
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
                                                 "gamma_s_per_byte": gamma,
                                                 "limiter": limiter is not None, "chunk_bytes": chunk_bytes}))
    dist.barrier()
    dist.destroy_process_group()
    return 0
