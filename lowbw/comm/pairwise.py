"""Pairwise exchange: each worker swaps a tensor with one peer, no collective (NoLoCo's communication).

Three pieces:

- :func:`pair_partners`: the pairs of an exchange round, drawn from a seeded permutation: round r's
  permutation pi_r of the ranks 0..N-1 is ``torch.randperm(N)`` from a generator seeded with
  ``seed * 1_000_003 + r``, and the pairs are (pi_r(0), pi_r(1)), (pi_r(2), pi_r(3)), ... (every rank draws
  the same permutation, so nobody has to agree on anything over the network). N must be even (as in the
  NoLoCo authors' code, which asserts that the world divides into groups of its size).
- :func:`swap`: send this rank's tensor to its peer and receive the peer's over ``torch.distributed``
  (``isend``/``irecv``, so neither side blocks the other), each wait bounded by ``timeout`` seconds; the
  bytes go into a :class:`~lowbw.comm.meter.Meter` as one call ``op="pairwise"``.
- :func:`pairwise_time`: the alpha-beta time of one round: each pair sends one message each way; on
  full-duplex links both directions run at once, so a pair takes max(alpha_ab + B / r_ab, alpha_ba + B /
  r_ba) (B bytes, alpha the per-message latency, r the sender's rate in bytes/s); the pairs run at once
  and the round is done when its slowest pair is. Half-duplex (``duplex=False``): the two directions add.

This is the first communication pattern in lowbw that is not a collective: the cost model's collective
registry (``lowbw.net.costmodel``) does not cover it; :func:`pairwise_time` is the function to register
there. The engine's ``sync: noloco`` (:mod:`lowbw.train.schemes.noloco`) charges its rounds with it.
"""

from __future__ import annotations

import time

import torch
import torch.distributed as dist
from torch import Tensor

from lowbw.comm.engine import as_seconds, wait_native
from lowbw.comm.meter import Meter

__all__ = ["pair_partners", "swap", "pairwise_time"]


def pair_partners(world_size: int, seed: int, round_: int) -> list[int]:
    """``partner[r]`` for every rank r in exchange round ``round_`` (module doc); raises ValueError for an odd
    or empty world."""
    if world_size < 2 or world_size % 2:
        raise ValueError(f"pairwise exchange needs an even number of workers >= 2, got {world_size}")
    g = torch.Generator().manual_seed(int(seed) * 1_000_003 + int(round_))
    perm = torch.randperm(world_size, generator=g).tolist()
    partner = [0] * world_size
    for a, b in zip(perm[0::2], perm[1::2]):
        partner[a], partner[b] = b, a
    return partner


def swap(tensor: Tensor, peer: int, group=None, timeout=None, meter: Meter | None = None) -> Tensor:
    """Send ``tensor`` to group rank ``peer`` and return the peer's tensor of the same shape and dtype (both
    sides call it with each other's rank). Each of the two waits times out after ``timeout`` seconds (None:
    lowbw's default), raising :class:`~lowbw.comm.errors.PeerTimeoutError` naming this rank."""
    to = as_seconds(timeout)
    rank = dist.get_rank(group)
    if peer == rank:
        raise ValueError(f"rank {rank} cannot swap with itself")
    dst = peer if group is None else dist.get_global_rank(group, peer)
    send = tensor.detach().contiguous()
    recv = torch.empty_like(send)
    t0 = time.perf_counter()
    reqs = [dist.isend(send, dst, group=group), dist.irecv(recv, dst, group=group)]
    for w, what in zip(reqs, (f"pairwise send to {peer}", f"pairwise recv from {peer}")):
        wait_native(w, to, rank, what)
    if meter is not None:
        n = send.numel() * send.element_size()
        st = meter.start(op="pairwise", algorithm="pairwise", rank=rank, world_size=dist.get_world_size(group),
                         nbytes=n, dtype=str(send.dtype), bytes_sent=n, bytes_recv=n, msgs_sent=1, msgs_recv=1)
        st.sent_to[peer] += n
        st.recv_from[peer] += n
        st.seconds = time.perf_counter() - t0
    return recv


def pairwise_time(nbytes: float, pairs: list[tuple[tuple[float, float], tuple[float, float]]],
                  duplex: bool = True) -> float:
    """Seconds of one pairwise round (module doc): ``pairs`` holds per pair the (alpha_s, bandwidth in
    bits/s) of each direction, ((a->b), (b->a)); ``nbytes`` is what each side sends (the full model, fp32:
    4 P). The round's time is the slowest pair's."""
    if not pairs:
        raise ValueError("pairwise_time needs at least one pair")
    worst = 0.0
    for (a1, r1), (a2, r2) in pairs:
        t1, t2 = a1 + 8.0 * nbytes / r1, a2 + 8.0 * nbytes / r2
        worst = max(worst, max(t1, t2) if duplex else t1 + t2)
    return worst
