"""One collective call per round of a bucket: the payloads of a bucket's tensors packed into one buffer.

A compressor's exchange of one tensor is a generator of requests (:mod:`lowbw.compress.rounds`).
:func:`drive` runs the exchanges of a bucket's tensors on a :class:`~lowbw.compress.protocol.Collective`
(one rank) or a :class:`~lowbw.compress.base.BatchCollective` (all ranks' rows, ``sim``):

* ``packed=False`` (``granularity: layer``): tensor after tensor, each requested tensor its own call, as
  ``Compressor.aggregate`` has always made them;
* ``packed=True`` (``granularity: bucket``): the exchanges advance together, round by round; in each round
  every tensor to all-gather (top-k's indices *and* values, of every tensor) travels in **one** all-gather
  of bytes, and the tensors to all-reduce in one all-reduce per dtype (PowerSGD: every P of the bucket in
  one call, then every Q, as PyTorch's ``powerSGD_hook`` does per DDP bucket); the results are unpacked and
  handed back, so each tensor's arithmetic is the one it has alone.

Layouts on the wire:

* all-gather: one rank's buffer is the lengths of its k parts (k int64, the header ``Payload.nbytes``
  always counted) followed by the parts' bytes; a receiver cuts a peer's buffer by those lengths and reads
  each part in its own dtype (the same on every rank: one compressor). Variable lengths (thresholding) pass.
  Where every tensor's compressor has payloads of fixed lengths (``Compressor.fixed_size``: top-k)
  the buffer is the parts' bytes alone and the all-gather skips lowbw.comm's size exchange (``same_size``),
  as ``torch.distributed.all_gather_into_tensor`` takes equal sizes: half the latency steps of a call.
* all-reduce: the sum must be the one each tensor gets alone. A ring all-reduce sums element e of a tensor
  in the order ``((x_j + x_{j+1}) + ...)`` of its segment j = the segment of ``split(numel, N)`` holding e,
  so over a ring (``CollectiveSpec.segment_order``) the buffer is laid out *segment-major*: packed segment j
  holds segment j of every tensor, padded with zeros to the longest segment (x + 0 = x exactly), so that
  every element keeps its segment and its order of additions. Other algorithms get the plain concatenation
  (their order does not move with an element's position: tree, parameter server, direct; butterfly's does,
  and is not made identical).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from lowbw.collective.partition import split
from lowbw.comm.registry import COLLECTIVES
from lowbw.compress.rounds import Request, Rounds, run_alone

__all__ = ["drive", "all_reduce_packed", "all_gather_packed"]


def drive(gens: Sequence[Rounds], coll, packed: bool, rows: bool = False) -> list[Tensor]:
    """Run the exchanges ``gens`` on ``coll`` (``rows``: a BatchCollective of all ranks' rows) and return each
    one's result; ``packed``: one call per round and op (module docstring), else one call per tensor."""
    out: list[Any] = [None] * len(gens)
    if not packed:
        for i, g in enumerate(gens):
            out[i] = run_alone(g, coll)
        return out
    live: dict[int, Request] = {}
    for i, g in enumerate(gens):
        _advance(i, g, None, live, out, first=True)
    while live:
        order = sorted(live)
        results = _packed_round([live[i] for i in order], coll, rows)
        for i, res in zip(order, results, strict=True):
            _advance(i, gens[i], res, live, out)
    return out


def _advance(i: int, g: Rounds, res, live: dict, out: list, first: bool = False) -> None:
    try:
        live[i] = next(g) if first else g.send(res)
    except StopIteration as stop:
        live.pop(i, None)
        out[i] = stop.value


def _packed_round(reqs: list[Request], coll, rows: bool) -> list[tuple]:
    """One round: every requested tensor's result, from one all-gather and one all-reduce per dtype."""
    results: list[list] = [[None] * len(r.tensors) for r in reqs]
    gathers = [(i, j, t) for i, r in enumerate(reqs) if r.op == "all_gather" for j, t in enumerate(r.tensors)]
    reduces: dict[torch.dtype, list] = {}
    for i, r in enumerate(reqs):
        if r.op == "all_reduce":
            for j, t in enumerate(r.tensors):
                reduces.setdefault(t.dtype, []).append((i, j, t))
        elif r.op != "all_gather":
            raise ValueError(f"packing: request op {r.op!r}; allowed: all_reduce, all_gather")
    for items in reduces.values():
        for (i, j, _), s in zip(items, all_reduce_packed(coll, [t for _, _, t in items], rows), strict=True):
            results[i][j] = s
    if gathers:
        known = all(r.sizes_known for r in reqs if r.op == "all_gather")
        for (i, j, _), g in zip(gathers, all_gather_packed(coll, [t for _, _, t in gathers], rows, known),
                                strict=True):
            results[i][j] = g
    return [tuple(r) for r in results]


# ------------------------------------------------------------------------------------------------ all-reduce
def _ring(coll) -> bool:
    """Whether ``coll`` sums an element in an order set by its segment, as the ring does (its algorithm's
    ``CollectiveSpec.segment_order``): the innermost collective's ``algorithm`` (through wrappers' ``inner``,
    as :func:`lowbw.train.adaptive` finds it); False for a collective without one."""
    while not hasattr(coll, "algorithm") and hasattr(coll, "inner"):
        coll = coll.inner
    spec = COLLECTIVES.get(getattr(coll, "algorithm", None) or "")
    return spec is not None and spec.segment_order


def _pieces(numels: list[int], N: int, ring: bool) -> tuple[list[list[tuple[int, int, int]]], int]:
    """Per tensor its pieces (start in the tensor, end, start in the buffer), and the buffer's length."""
    if not ring or N == 1:
        pos, out = 0, []
        for n in numels:
            out.append([(0, n, pos)])
            pos += n
        return out, pos
    segs = [split(n, N) for n in numels]
    width = max(sum(s[j][1] - s[j][0] for s in segs) for j in range(N)) if numels else 0
    out = [[] for _ in numels]
    for j in range(N):
        pos = j * width
        for t, s in enumerate(segs):
            a, b = s[j]
            out[t].append((a, b, pos))
            pos += b - a
    return out, N * width


def all_reduce_packed(coll, tensors: list[Tensor], rows: bool = False) -> list[Tensor]:
    """The sums of ``tensors`` (one dtype) from one all-reduce of a buffer laid out as the module says (rows:
    each tensor's one sum, without the leading N, as a BatchCollective's all-reduce gives it)."""
    lead = 1 if rows else 0
    flats = [t.reshape(*t.shape[:lead], -1) for t in tensors]
    pieces, length = _pieces([f.shape[-1] for f in flats], coll.world_size, _ring(coll))
    ref = flats[0]
    buf = ref.new_zeros(*ref.shape[:lead], length)
    for f, ps in zip(flats, pieces, strict=True):
        for a, b, p in ps:
            buf[..., p: p + b - a] = f[..., a:b]
    summed = coll.all_reduce(buf)  # rows: the one sum every rank receives, [length]
    out = []
    for t, f, ps in zip(tensors, flats, pieces, strict=True):
        s = f.new_empty(f.shape[-1])
        for a, b, p in ps:
            s[a:b] = summed[p: p + b - a]
        out.append(s.view(t.shape[lead:]))
    return out


# ------------------------------------------------------------------------------------------------ all-gather
def _bytes(t: Tensor) -> Tensor:
    """``t``'s bytes along its last dimension (uint8)."""
    t = t.contiguous()
    return t.view(torch.uint8) if t.dim() else t.reshape(1).view(torch.uint8)


def _pack(parts: list[Tensor], lead: tuple[int, ...], header: bool = True) -> Tensor:
    """Lengths header (int64 per part; none where every rank knows them) + the parts' bytes, along the last
    dimension."""
    body = [_bytes(p.reshape(*lead, -1)) for p in parts]
    if not header:
        return torch.cat(body, dim=-1)
    lengths = torch.tensor([p.shape[-1] if p.dim() else 1 for p in parts], dtype=torch.int64,
                           device=parts[0].device)
    head = _bytes(lengths).expand(*lead, -1) if lead else _bytes(lengths)
    return torch.cat([head] + body, dim=-1)


def _unpack(block: Tensor, like: list[Tensor], header: bool = True) -> list[Tensor]:
    """A peer's 1-D buffer cut into parts, each read in the dtype of the local part at its position (its
    length from the header, or the local part's where every rank's lengths are known)."""
    k = len(like)
    if header:
        lengths, pos = block[: 8 * k].clone().view(torch.int64).tolist(), 8 * k
    else:
        lengths, pos = [t.reshape(-1).shape[0] for t in like], 0
    out = []
    for n, t in zip(lengths, like, strict=True):
        nb = n * t.element_size()
        out.append(block[pos: pos + nb].clone().view(t.dtype))
        pos += nb
    return out


def all_gather_packed(coll, tensors: list[Tensor], rows: bool = False, sizes_known: bool = False) -> list:
    """Every rank's ``tensors`` (any dtypes, 1-D) from one all-gather of bytes: per tensor, a list over ranks
    (Collective) or the ``[N, L]`` rows (``rows``: a BatchCollective), as an all-gather of it alone gives.
    ``sizes_known``: every rank's tensors have these lengths, so the buffer carries no lengths and the
    all-gather exchanges no sizes first (``same_size``: one pass of N-1 message steps, not two)."""
    head = not sizes_known
    kw = {"same_size": True} if sizes_known else {}
    if rows:
        N = tensors[0].shape[0]
        got = coll.all_gather(_pack(list(tensors), (N,), head), **kw)
        cut = [_unpack(got[r], [t[0] for t in tensors], head) for r in range(N)]
        return [torch.stack([cut[r][j] for r in range(N)]) for j in range(len(tensors))]
    got = coll.all_gather(_pack(list(tensors), (), head), **kw)
    cut = [_unpack(b.reshape(-1), list(tensors), head) for b in got]
    return [[cut[r][j] for r in range(len(got))] for j in range(len(tensors))]
