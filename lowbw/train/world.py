"""Where the workers live: :class:`SimWorld` (M replicas in one process, threads for the collectives) and
:class:`DistWorld` (one replica per process, torch.distributed). The training loop talks only to this API.

``exchange(level, fn)`` runs ``fn(i, coll)`` for every replica ``i`` held here with the collective of its
group at ``level`` (world / neighbourhood / household) and returns what each call returned plus, per
replica: its own compute seconds inside ``fn`` (compression, decompression), the seconds inside collective
calls, the bytes it sent (from the byte meter) and the call records; and, for the whole world, the
cost-model time of those calls on the level's link (groups at one level run in parallel: the slowest counts).

Links: one :class:`~lowbw.net.costmodel.LinkParams` per level (``bandwidth_mbit``, ``latency_ms``, the
household's own), or, when a per-worker key (``worker_bandwidth_mbit``, ``worker_uplink_mbit``,
``worker_latency_ms``) or a ``bandwidth_trace`` is set, every worker its own link (:func:`worker_links`) and
each group's calls timed on its members' links by :mod:`lowbw.net.costlinks` (a ring is bounded by its
slowest hop, the parameter server sits at rank 0, other algorithms on the group's slowest link). Households
with their own ``household_bandwidth_mbit`` (or latency) stay on that LAN link; else they share the workers'
links.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from lowbw.comm.distributed import DistCollective
from lowbw.comm.meter import Meter, native_volume
from lowbw.comm.registry import expected
from lowbw.comm.threads import ThreadCollective, run_threads
from lowbw.compress.protocol import CallRecord
from lowbw.train.aggregate import TimedCollective, group_of
from lowbw.train.links import (  # noqa: F401  (re-exported: the world's API names its links)
    ShapedLink,
    WorkerLinks,
    bandwidth_at,
    comm_cost,
    has_worker_links,
    level_cost,
    link_for,
    links_for,
    worker_links,
)

__all__ = ["Exchange", "messages_of", "SimWorld", "DistWorld", "WorkerLinks", "ShapedLink", "link_for", "links_for",
           "worker_links", "has_worker_links", "bandwidth_at", "bytes_sent_of", "comm_cost", "default_threads"]


@dataclass
class Exchange:
    outputs: list[Any]
    busy_s: list[float]  # per local replica
    comm_s: list[float]
    bytes_sent: list[int]
    v_comm: float = 0.0  # cost-model seconds of this exchange (same value on every process)
    calls: list[list] = field(default_factory=list)
    # the same time as alpha-beta coefficients, so a run can be re-timed at any link:
    # v_comm = v_alpha * alpha_s + v_beta_bytes * 8 / bandwidth_bps (latency terms, critical-path bytes).
    # On per-worker links they are still the equal-link coefficients (latency terms and critical-path bytes
    # of the same calls on equal links): re-timed at one link L they give the time had every worker had L, at
    # the slowest link (largest latency, smallest rate) an upper bound of v_comm; v_comm itself is the time on
    # the unequal links, and only it says what the run took.
    v_alpha: float = 0.0
    v_beta_bytes: float = 0.0
    meta_s: float = 0.0  # seconds of bookkeeping exchanges between processes (call records), not training
    # collective calls per worker, where ``calls`` is no longer held (an exchange restored from a checkpoint);
    # None: count ``calls`` (:func:`messages_of`)
    messages: int | None = None


def messages_of(ex: Exchange) -> int:
    """Collective calls one worker made in exchange ``ex``: each pays the link's latency per step of its
    algorithm (one per bucket and round with ``granularity: bucket``)."""
    if ex.messages is not None:
        return ex.messages
    return max((len(c) for c in ex.calls if c is not None), default=0)


def bytes_sent_of(stats) -> int:
    """Bytes a rank sent in these metered calls (opaque ``native`` calls: the textbook volume)."""
    total = 0
    for c in stats:
        if c.measured:
            total += c.bytes_sent
        elif c.op == "all_reduce":
            total += native_volume(c.op, c.nbytes, c.world_size, c.rank)[0]  # gloo's ring
        elif c.op == "all_gather":
            total += (c.world_size - 1) * c.nbytes
        else:
            total += c.nbytes if c.rank == 0 else 0
    return total


def _expected_sent(algorithm: str, nbytes: int, n: int, rank: int) -> int:
    """Bytes ``rank`` sends in one all-reduce of ``nbytes`` among ``n``: the collective's textbook volume."""
    return expected(algorithm, nbytes, n, rank)[0] if n > 1 else 0


class SimWorld:
    """All M workers in this process; collectives are lowbw.comm ThreadCollectives, one thread per worker."""

    def __init__(self, cfg, serialize: bool = True):
        self.cfg = cfg
        self.now = 0.0  # virtual time, set by the loop each step (bandwidth_schedule)
        self.M = cfg.workers
        self.ranks = list(range(self.M))
        self.is_main = True
        self.kind = "sim"
        self._colls: dict[str, list] = {}
        self._meters: dict[str, list] = {}
        self.lock = threading.Lock() if serialize else None

    def _cost(self, per_group: dict[int, list[list]], level: str) -> dict[str, float]:
        return level_cost(self.cfg, per_group, level, self.now)

    def _group(self, level: str):
        if level not in self._colls:
            colls: list = [None] * self.M
            meters: list = [None] * self.M
            groups: dict[int, list[int]] = {}
            for w in self.ranks:
                g, _, _ = group_of(level, w, self.cfg)
                groups.setdefault(g, []).append(w)
            for _, members in sorted(groups.items()):
                ms = [Meter() for _ in members]
                cs = ThreadCollective.group(len(members), self.cfg.collective, timeout=600.0, meters=ms)
                for w, c, m in zip(members, cs, ms):
                    colls[w], meters[w] = c, m
            self._colls[level] = colls
            self._meters[level] = meters
        return self._colls[level], self._meters[level]

    def exchange(self, level: str, fn) -> Exchange:
        colls, meters = self._group(level)
        n0 = [len(c.calls) for c in colls]
        m0 = [len(m.calls) for m in meters]
        lock = self.lock
        timing: list = [None] * self.M

        def body(i, coll):
            if lock is not None:
                lock.acquire()
            t0 = time.perf_counter()
            tc = TimedCollective(coll, lock)
            try:
                out = fn(i, tc)
            finally:
                timing[i] = (time.perf_counter() - t0 - tc.comm_s, tc.comm_s)
                if lock is not None:
                    lock.release()
            return out

        if self.M == 1:
            outs = [body(0, colls[0])]
        else:
            outs = run_threads(body, colls)
        calls = [list(c.calls[k:]) for c, k in zip(colls, n0)]
        sent = [bytes_sent_of(m.calls[k:]) for m, k in zip(meters, m0)]
        for c, m in zip(colls, meters):  # records grow with every step: keep only this exchange's
            c.calls.clear()
            m.calls.clear()
        per_group: dict[int, list[list]] = {}
        for w in self.ranks:
            g, _, _ = group_of(level, w, self.cfg)
            per_group.setdefault(g, []).append(calls[w])
        return Exchange(
            outputs=outs,
            busy_s=[t[0] for t in timing],
            comm_s=[t[1] for t in timing],
            bytes_sent=sent,
            calls=calls,
            **self._cost(per_group, level),
        )

    def dense_mean(self, level: str, rows: list[torch.Tensor], sizes: list[int] | None = None) -> Exchange:
        """Average of each group's rows, summed in rank order in this thread (no collective threads).

        The call records (one all-reduce of the row per member) and the bytes each member would send with the
        configured algorithm are synthesised, so the virtual clock and byte counts are those of the collective.
        ``sizes``: the byte sizes of the separate all-reduce calls the row stands for (default: one call).
        """
        t0 = time.perf_counter()
        groups: dict[int, list[int]] = {}
        for w in self.ranks:
            g, _, _ = group_of(level, w, self.cfg)
            groups.setdefault(g, []).append(w)
        outs: list = [None] * self.M
        alg = self.cfg.collective
        sent = [0] * self.M
        calls: list = [None] * self.M
        per_group: dict[int, list[list]] = {}
        for g, members in groups.items():
            acc = rows[members[0]].clone()
            for w in members[1:]:
                acc.add_(rows[w])
            n = len(members)
            if n > 1:
                acc.div_(n)
            nbytes = rows[members[0]].numel() * rows[members[0]].element_size()
            recs = [CallRecord("all_reduce", s, alg, n) for s in (sizes or [nbytes])]
            per_group[g] = [list(recs) for _ in members]
            for k, w in enumerate(members):
                outs[w] = acc
                sent[w] = sum(_expected_sent(alg, r.nbytes, n, k) for r in recs)
                calls[w] = list(recs)
        dt = (time.perf_counter() - t0) / self.M
        return Exchange(outs, [0.0] * self.M, [dt] * self.M, sent, calls=calls,
                        **self._cost(per_group, level))

    def allgather_rows(self, rows: torch.Tensor) -> torch.Tensor:
        return rows

    def broadcast_obj(self, obj):
        return obj

    def barrier(self) -> None:
        pass

    def close(self) -> None:
        pass


class DistWorld:
    """One worker per process (torch.distributed already initialised); ``rank`` = worker id."""

    def __init__(self, cfg, timeout_s: float = 600.0, meta_timeout_s: float | None = None):
        """``timeout_s``: seconds any collective may wait on a peer (raises naming the rank);
        ``meta_timeout_s``: the same for the metadata group (rank 0 evaluates while the others wait there)."""
        self.cfg = cfg
        self.timeout_s = float(timeout_s)
        self.meta_timeout_s = float(meta_timeout_s or timeout_s)
        self.M = dist.get_world_size()
        if cfg.workers != self.M:
            raise RuntimeError(f"world size {self.M} != workers={cfg.workers}")
        self.rank = dist.get_rank()
        self.ranks = [self.rank]
        self.is_main = self.rank == 0
        self.kind = "dist"
        self.lock = None
        # metadata (stats, objects) go over a separate gloo group: never metered, works next to NCCL
        self.meta_group = dist.new_group(backend="gloo", timeout=timedelta(seconds=self.meta_timeout_s))
        self._colls: dict[str, Any] = {}
        self._meters: dict[str, Any] = {}
        self._groups_made: set[str] = set()
        self.now = 0.0  # virtual time, set by the loop each step

    def _cost(self, per_group: dict[int, list[list]], level: str) -> dict[str, float]:
        return level_cost(self.cfg, per_group, level, self.now)

    def _group(self, level: str):
        if level not in self._colls:
            mine = None
            if level == "world":
                pg = None
            else:  # every rank must create every group, in the same order
                groups: dict[int, list[int]] = {}
                for w in range(self.M):
                    g, _, _ = group_of(level, w, self.cfg)
                    groups.setdefault(g, []).append(w)
                for _, members in sorted(groups.items()):
                    pg = dist.new_group(members)
                    if self.rank in members:
                        mine = pg
                pg = mine
            meter = Meter()
            self._colls[level] = DistCollective(self.cfg.collective, group=pg, meter=meter, timeout=self.timeout_s)
            self._meters[level] = meter
        return self._colls[level], self._meters[level]

    def ensure_groups(self, levels) -> None:
        """Create the process groups of ``levels`` now (collective over all ranks: call on every rank)."""
        for lv in levels:
            self._group(lv)

    def exchange(self, level: str, fn) -> Exchange:
        coll, meter = self._group(level)
        n0, m0 = len(coll.calls), len(meter.calls)
        t0 = time.perf_counter()
        tc = TimedCollective(coll)
        out = fn(0, tc)
        busy = time.perf_counter() - t0 - tc.comm_s
        return self.account(level, coll, meter, n0, m0, out, busy, tc.comm_s)

    def account(self, level: str, coll, meter, n0: int, m0: int, output, busy_s: float, comm_s: float) -> Exchange:
        """The Exchange of the calls this rank made on ``coll`` (records from ``n0`` on) and ``meter`` (from
        ``m0`` on) at ``level``; consumes those records. ``busy_s``/``comm_s``: this rank's seconds of
        (de)compression and inside collective calls. Collective over the world: every rank needs every
        rank's call records for the (deterministic) modelled time."""
        calls = coll.calls[n0:]
        sent = bytes_sent_of(meter.calls[m0:])
        g, _, _ = group_of(level, self.rank, self.cfg)
        rec = [(c.op, c.nbytes, c.algorithm, c.world_size, c.sizes_known) for c in calls]
        t_meta = time.perf_counter()
        allrec = self.allgather_obj((g, rec))
        meta_s = time.perf_counter() - t_meta
        per_group: dict[int, list[list]] = {}
        for gg, rr in allrec:
            per_group.setdefault(gg, []).append([CallRecord(*x) for x in rr])
        del coll.calls[n0:], meter.calls[m0:]
        return Exchange([output], [busy_s], [comm_s], [sent], calls=[calls], meta_s=meta_s,
                        **self._cost(per_group, level))

    def allgather_rows(self, rows: torch.Tensor) -> torch.Tensor:
        rows = rows.detach().to("cpu", torch.float64).contiguous()
        out = [torch.empty_like(rows) for _ in range(self.M)]
        dist.all_gather(out, rows, group=self.meta_group)
        return torch.cat(out)

    def allgather_obj(self, obj) -> list:
        out: list = [None] * self.M
        dist.all_gather_object(out, obj, group=self.meta_group)
        return out

    def broadcast_obj(self, obj):
        box = [obj]
        dist.broadcast_object_list(box, src=0, group=self.meta_group)
        return box[0]

    def barrier(self) -> None:
        dist.barrier(group=self.meta_group)

    def set_timeout(self, timeout_s: float) -> None:
        """Change the peer timeout of every collective (e.g. once the model, hence the transfer, is known)."""
        self.timeout_s = float(timeout_s)
        for c in self._colls.values():
            c.timeout = self.timeout_s

    def close(self, clean: bool = True) -> None:
        """Leave the process group. ``clean``: meet the others first (bounded by the metadata timeout, after
        which the error names this rank); after a failure no barrier: a dead peer must not hang the exit."""
        if not dist.is_initialized():
            return
        try:
            if clean and self.M > 1:
                try:
                    dist.monitored_barrier(group=self.meta_group, timeout=timedelta(seconds=self.meta_timeout_s))
                except RuntimeError as e:
                    msg = " ".join(str(e).split())[:300]
                    raise RuntimeError(f"rank {self.rank}: the final barrier failed: {msg}") from e
        finally:
            if clean:
                dist.destroy_process_group()


def default_threads(cfg) -> int:
    if cfg.threads:
        return cfg.threads
    return max(1, (os.cpu_count() or 1) // max(1, cfg.workers))
