"""The ``sim`` backend's batched compressed exchange: all replicas' gradients aggregated together.

The threaded path (:meth:`lowbw.train.world.SimWorld.exchange`) runs ``aggregate_rank`` once per replica,
each in its own thread, with per-layer collective calls that meet across the threads: R x layers x
(compress + meeting + decode) steps of Python per exchange. Here each layer of all replicas of a group is
one ``[n, ...]`` tensor handed to the compressor's batched path (:meth:`lowbw.compress.base.Compressor.
aggregate_batch`), and the group's collective calls are made once, by :class:`RowCollective`, which gives
every rank exactly what the threaded collective gives it:

* ``all_reduce``: the ring algorithm's arithmetic (segment j of the tensor, ``split(numel, N)``, is summed
  in the order ``((x_j + x_{j+1}) + x_{j+2}) + ...``, indices mod N; fp16/bf16 widened to fp32 for each
  addition and rounded to the input dtype after it, as :class:`lowbw.comm.numerics.Reducer` does);
* ``all_gather``: the rows themselves (a copy has no arithmetic);

and records per rank the same :class:`~lowbw.compress.protocol.CallRecord` and the same bytes sent as the
threaded collective's byte meter (ring all-reduce: the segments it forwards in 2(N-1) steps; all-gather:
the shape headers and the N-1 blocks it forwards). So outputs, call records, bytes and the virtual clock
are those of the threaded path, bit for bit; tests hold the two paths to that.

Used for a compressor with ``batched = True``, the ``ring`` collective and ``sim``; everything else keeps
the threaded path, and so does a run with ``sim_compress: threads``.

Dense averaging (no compressor) takes this path with ``sim_dense: collective``: the ring's sums, one call per
bucket, tensor or row as :func:`lowbw.train.aggregate.aggregate_rank` and ``average_rank`` make them, so
``sim`` computes what ``procs`` computes, bit for bit, without the threads. ``sim_dense: direct`` instead sums
each group's rows in rank order, ``((x_0 + x_1) + x_2) + x_3``, where the ring sums segment j from rank j on,
``((x_j + x_{j+1}) + x_{j+2}) + x_{j+3}``: with two workers the same sum (addition commutes), with more the
same to the last bit of float32 only where rounding happens to agree.
"""

from __future__ import annotations

import time

import torch
from torch import Tensor

from lowbw.collective.partition import split
from lowbw.comm.engine import MAX_DIMS
from lowbw.comm.packing import all_reduce_packed, drive
from lowbw.compress.protocol import CallRecord
from lowbw.train.aggregate import buckets_of, group_of
from lowbw.train.world import Exchange, comm_cost, link_for

__all__ = ["RowCollective", "ring_sum", "applies", "exchange", "mean_rows"]

ALGORITHMS = ("ring",)  # whose arithmetic RowCollective reproduces
_HALF = (torch.float16, torch.bfloat16)


def applies(world, cfg, comp) -> bool:
    """Whether an exchange of ``comp`` (None: dense averaging) in ``world`` takes the batched path."""
    if world.kind != "sim" or cfg.collective not in ALGORITHMS:
        return False
    if comp is None:
        return cfg.sim_dense == "collective"
    return bool(getattr(comp, "batched", False)) and cfg.sim_compress == "batched"


def ring_sum(rows: Tensor) -> Tensor:
    """The ring all-reduce's sum of ``rows`` ``[N, n]`` (its order and roundings, see the module docstring):
    segment by segment, N - 1 additions of contiguous slices each."""
    N, n = rows.shape
    if N == 1 or n == 0:
        return rows[0].clone()
    widen = rows.dtype in _HALF
    out = torch.empty(n, dtype=rows.dtype, device=rows.device)
    for j, (a, b) in enumerate(split(n, N)):
        if a == b:
            continue
        acc = out[a:b]
        acc.copy_(rows[j, a:b])
        for k in range(1, N):
            x = rows[(j + k) % N, a:b]
            if widen:
                acc.copy_(acc.float().add_(x.float()))  # fp32 addition, one rounding to the wire dtype
            else:
                acc.add_(x)
    return out


def _ring_sent(n: int, N: int, rank: int, elem: int) -> int:
    """Bytes rank ``rank`` sends in a ring all-reduce of ``n`` elements: segment (r - g) mod N at step g."""
    if N == 1 or n == 0:
        return 0
    segs = split(n, N)
    return elem * sum(segs[(rank - g) % N][1] - segs[(rank - g) % N][0] for g in range(2 * (N - 1)))


class RowCollective:
    """The :class:`~lowbw.compress.base.BatchCollective` of one group of ``world_size`` ranks (ring).

    ``calls[i]``/``sent[i]``: rank i's call records and bytes sent; ``seconds``: time spent in its calls.
    """

    def __init__(self, world_size: int, algorithm: str = "ring"):
        if algorithm not in ALGORITHMS:
            raise ValueError(f"RowCollective: algorithm={algorithm!r}; allowed: {', '.join(ALGORITHMS)}")
        self.world_size = world_size
        self.algorithm = algorithm
        self.calls: list[list[CallRecord]] = [[] for _ in range(world_size)]
        self.sent = [0] * world_size
        self.seconds = 0.0

    def _check(self, rows: Tensor) -> None:
        if rows.dim() < 1 or rows.shape[0] != self.world_size:
            raise ValueError(f"RowCollective: rows of shape {tuple(rows.shape)}, need [{self.world_size}, ...]")

    def all_reduce(self, rows: Tensor) -> Tensor:
        self._check(rows)
        t0 = time.perf_counter()
        N, shape = self.world_size, rows.shape[1:]
        flat = rows.detach().reshape(N, -1)
        n, es = flat.shape[1], rows.element_size()
        out = ring_sum(flat).view(shape)
        for r in range(N):
            self.calls[r].append(CallRecord("all_reduce", n * es, self.algorithm, N))
            self.sent[r] += _ring_sent(n, N, r, es)
        self.seconds += time.perf_counter() - t0
        return out

    def all_gather(self, rows: Tensor, same_size: bool = False) -> Tensor:
        self._check(rows)
        N = self.world_size
        nbytes = rows[0].numel() * rows.element_size()
        header = 0 if same_size else (2 + MAX_DIMS) * 8  # the shape header per block, unless sizes are known
        per_rank = (N - 1) * (header + nbytes) if N > 1 else 0  # blocks forwarded
        for r in range(N):
            self.calls[r].append(CallRecord("all_gather", nbytes, "ring", N, same_size))
            self.sent[r] += per_rank
        return rows


def exchange(world, level: str, rows: Tensor, chunks, comp, states, bucket_mb: float | None = None) -> Exchange:
    """The batched counterpart of ``world.exchange(level, aggregate_rank per replica)``: every replica's row
    of ``rows`` ``[M, P]`` averaged over its group at ``level`` with ``comp`` (None: dense; per chunk
    ``(name, offset, numel, shape)``), with the threaded path's outputs, call records, bytes and modelled time.
    ``busy_s``: each replica's share of the (de)compression seconds; ``comm_s``: its group's seconds in
    the collective calls. ``bucket_mb``: per bucket (:func:`lowbw.train.aggregate.buckets_of`), a packing
    compressor's tensors run their rounds together, one packed call per round, as the threaded path does."""
    cfg = world.cfg
    t0 = time.perf_counter()
    groups: dict[int, list[int]] = {}
    for w in world.ranks:
        g, _, _ = group_of(level, w, cfg)
        groups.setdefault(g, []).append(w)
    out = torch.empty_like(rows)
    calls: list = [None] * len(world.ranks)
    sent = [0] * len(world.ranks)
    comm = [0.0] * len(world.ranks)
    per_group: dict[int, list[list]] = {}
    for g, members in sorted(groups.items()):
        lo, hi = members[0], members[-1] + 1
        if members != list(range(lo, hi)):
            raise ValueError(f"group {g} at level {level!r} is not a contiguous range of ranks: {members}")
        coll = RowCollective(hi - lo, cfg.collective)
        if comp is None:
            out[lo:hi] = _dense_mean(coll, rows[lo:hi], chunks, bucket_mb)
        else:
            out[lo:hi] = _compressed_mean(coll, rows[lo:hi], chunks, comp, states[lo:hi], bucket_mb)
        for j, w in enumerate(members):
            calls[w], sent[w], comm[w] = coll.calls[j], coll.sent[j], coll.seconds
        per_group[g] = coll.calls
    M = len(world.ranks)
    busy = max(0.0, time.perf_counter() - t0 - sum(comm[members[0]] for members in groups.values())) / M
    return Exchange(outputs=list(out), busy_s=[busy] * M, comm_s=comm, bytes_sent=sent, calls=calls,
                    **comm_cost(per_group, link_for(cfg, level, world.now)))


def _compressed_mean(coll: RowCollective, rows: Tensor, chunks, comp, states, bucket_mb: float | None) -> Tensor:
    """A group's rows ``[n, P]`` averaged with ``comp``: per chunk its ``aggregate_batch``, or per bucket of a
    packing compressor its tensors' rounds driven together (one packed call per round)."""
    n = coll.world_size
    out = torch.empty_like(rows)
    for b in buckets_of(chunks, bucket_mb if getattr(comp, "packs", False) else None):
        cs = [chunks[i] for i in b]
        xs = [rows[:, off:off + k].view(n, *shape) for _, off, k, shape in cs]
        if bucket_mb is None or not getattr(comp, "packs", False):
            avgs = [comp.aggregate_batch(xs[0], coll, cs[0][0], states)]
        else:
            gens = [comp.rounds_batch(x, name, states, n) for x, (name, _, _, _) in zip(xs, cs, strict=True)]
            avgs = drive(gens, coll, packed=True, rows=True)
        for (_, off, k, _), a in zip(cs, avgs, strict=True):
            out[:, off:off + k] = a.reshape(-1)
    return out


def _dense_mean(coll: RowCollective, rows: Tensor, chunks, bucket_mb: float | None) -> Tensor:
    """The dense branch of :func:`lowbw.train.aggregate.aggregate_rank` for all of a group's rows ``[n, P]``
    at once: the same all-reduce calls (per chunk; per bucket: its contiguous slice, else the packed buffer),
    each sum then divided by the group size ``n``, as every rank of ``procs`` divides it."""
    n = coll.world_size
    out = torch.empty_like(rows)
    for b in buckets_of(chunks, bucket_mb, rows.element_size()):
        cs = [chunks[i] for i in b]
        lo, hi = cs[0][1], cs[-1][1] + cs[-1][2]
        if bucket_mb is None:
            sums = [coll.all_reduce(rows[:, lo:hi].view(n, *cs[0][3]))]
        elif hi - lo == sum(k for _, _, k, _ in cs):  # contiguous: one all-reduce of the slice
            sums = [coll.all_reduce(rows[:, lo:hi])]
            cs = [("bucket", lo, hi - lo, torch.Size([hi - lo]))]
        else:
            sums = all_reduce_packed(coll, [rows[:, off:off + k].view(n, *shape) for _, off, k, shape in cs],
                                     rows=True)
        for (_, off, k, _), s in zip(cs, sums, strict=True):
            out[:, off:off + k] = (s / n if n > 1 else s).reshape(-1)  # every rank's copy of the mean
    return out


def mean_rows(world, level: str, rows: Tensor) -> Exchange:
    """Model averaging on the batched path: every replica's whole row of ``rows`` ``[M, L]`` averaged over its
    group at ``level`` by one all-reduce, as :func:`lowbw.train.aggregate.average_rank` makes it."""
    return exchange(world, level, rows, [("row", 0, rows.shape[1], torch.Size([rows.shape[1]]))], None,
                    [None] * len(world.ranks))
