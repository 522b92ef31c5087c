"""The alpha-beta cost model on unequal links: every worker its own uplink and downlink.

The network is :mod:`lowbw.net.costmodel`'s star, but worker ``i`` has its own uplink bandwidth ``U_i`` and
downlink bandwidth ``D_i`` (bits/s) and one-way latencies ``a_i`` (uplink) and ``d_i`` (downlink), as the
testbed builds with ``--rates``/``--up``/``--down``/``--delay``. A message of ``m`` bytes from ``i`` to ``j``
crosses ``i``'s uplink and ``j``'s downlink::

    t(i -> j, m) = a_i + d_j + 8 m / min(U_i, D_j)

Flows that share a link share its bandwidth; ``k`` flows of ``m`` bytes into (out of) one link, each also
capped by its other end, all end after ``max(8 k m / capacity, max over flows of 8 m / cap)`` (fluid
max-min sharing; each flow is either capped by its other end or gets an equal share of what is left).

* ring (reduce-scatter + all-gather, ``2 (N-1)`` synchronous steps of ``M/N`` from each rank to the next):
  every step lasts as long as its slowest hop, so the ring is bounded by its slowest link:
  ``2 (N-1) max_i t(i -> i+1, M/N)``;
* parameter server at ``root``: gather (every worker's ``M`` into the root's downlink), then broadcast (the
  root's uplink sends ``M`` to each): where the root sits matters (:func:`best_root`);
* any other algorithm: :func:`lowbw.net.costmodel.allreduce_time` on the slowest link (the smallest
  bandwidth and the largest latency of all), an upper bound.

Which algorithm is timed how is its module's ``SPEC.links`` (:mod:`lowbw.comm.registry`; ``None``: the
slowest-link bound); the message primitives are :mod:`lowbw.collective.spec`'s.

All-gather and broadcast (:func:`allgather_time`, :func:`broadcast_time`) and a sequence of recorded calls
(:func:`calls_time`, the sim's virtual clock) follow the same rules: a ring or chain hop ``i -> j`` carries
its bytes at ``min(U_i, D_j)``, a star's centre shares its link, a tree is timed on the slowest link.

With equal links these are exactly :mod:`lowbw.net.costmodel`'s times with ``alpha = a + d``.
Sizes in bytes, times in seconds.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from lowbw.collective.spec import message_time, shared_time
from lowbw.comm.registry import COLLECTIVES
from lowbw.net.costmodel import LinkParams, allreduce_time, broadcast_pattern, gather_pattern
from lowbw.net.link import LinkSpec

__all__ = ["WorkerLink", "message_time", "ring_time", "ps_time", "best_root", "links_allreduce_time",
           "slowest_link", "allgather_time", "broadcast_time", "collective_time", "calls_time"]


@dataclass(frozen=True)
class WorkerLink:
    """One worker's link: bandwidth (bits/s) and one-way latency (s) of each direction."""

    up_bps: float  # worker -> switch
    down_bps: float  # switch -> worker
    up_alpha_s: float = 0.0  # latency added on the way out (propagation, the sender's software)
    down_alpha_s: float = 0.0  # latency added on the way in

    def __post_init__(self) -> None:
        if not (self.up_bps > 0 and self.down_bps > 0 and self.up_alpha_s >= 0 and self.down_alpha_s >= 0):
            raise ValueError(f"invalid worker link {self}")

    @classmethod
    def symmetric(cls, link: LinkParams) -> WorkerLink:
        """``link``'s bandwidth each way and its whole alpha on the uplink."""
        return cls(link.bandwidth_bps, link.bandwidth_bps, link.alpha_s, 0.0)

    @classmethod
    def from_spec(cls, spec: LinkSpec, alpha_s: float = 0.0) -> WorkerLink:
        """From a testbed link (both rates set); ``alpha_s``: software latency per message, added to the
        uplink's delay."""
        if spec.up_bps is None or spec.down_bps is None:
            raise ValueError("the cost model needs a rate in both directions of every link")
        return cls(spec.up_bps, spec.down_bps, spec.delay_s + alpha_s, spec.down_delay_s)


def _check(nbytes: float, links: Sequence[WorkerLink]) -> None:
    if nbytes < 0:
        raise ValueError(f"nbytes must be >= 0, got {nbytes}")
    if not links:
        raise ValueError("no links")


def _links_spec(algorithm: str):
    """``algorithm``'s ``SPEC.links`` from :mod:`lowbw.comm.registry`, or None."""
    spec = COLLECTIVES.get(algorithm)
    return spec.links if spec is not None else None


def ring_time(nbytes: float, links: Sequence[WorkerLink]) -> float:
    """Ring all-reduce in rank order: ``2 (N-1) max_i t(i -> i+1 mod N, M/N)`` (:func:`lowbw.comm.ring.links_time`)."""
    _check(nbytes, links)
    return _links_spec("ring")(nbytes, links, 0)


def ps_time(nbytes: float, links: Sequence[WorkerLink], root: int = 0) -> float:
    """Parameter-server all-reduce at ``root`` (:func:`lowbw.comm.ps.links_time`): gather every worker's
    vector into the root, then broadcast the result from it."""
    _check(nbytes, links)
    return _links_spec("ps")(nbytes, links, root)


def best_root(nbytes: float, links: Sequence[WorkerLink]) -> tuple[int, float]:
    """The parameter server's best placement: (rank, its all-reduce time); the lowest rank among equals."""
    times = [ps_time(nbytes, links, r) for r in range(len(links))]
    best = min(range(len(links)), key=lambda r: (times[r], r))
    return best, times[best]


def links_allreduce_time(algorithm: str, nbytes: float, links: Sequence[WorkerLink], root: int = 0) -> float:
    """All-reduce time on per-worker links: the algorithm's ``SPEC.links`` where it has one (ring and gloo's
    ``native`` ring; ``ps`` at ``root``), else the closed form on the slowest link throughout (an upper bound)."""
    _check(nbytes, links)
    per_link = _links_spec(algorithm)
    if per_link is not None:
        return per_link(nbytes, links, root)
    return allreduce_time(algorithm, nbytes, len(links), slowest_link(links))


def slowest_link(links: Sequence[WorkerLink]) -> LinkParams:
    """The equal-link bound of ``links``: the largest latency each way, the smallest bandwidth either way."""
    return LinkParams(alpha_s=max(w.up_alpha_s for w in links) + max(w.down_alpha_s for w in links),
                      bandwidth_bps=min(min(w.up_bps, w.down_bps) for w in links))


def _hops(links: Sequence[WorkerLink]) -> list[tuple[WorkerLink, WorkerLink]]:
    """The ring's hops in rank order: ``(i, i+1 mod N)``."""
    n = len(links)
    return [(links[i], links[(i + 1) % n]) for i in range(n)]


def allgather_time(sizes: float | Sequence[float], links: Sequence[WorkerLink], algorithm: str = "ring") -> float:
    """All-gather of each rank's ``sizes[i]`` bytes (a number: equal contributions).

    ``ring``: N-1 steps, each as long as its slowest hop's latency; hop ``i -> i+1`` forwards everything but
    what ``i+1`` contributed: ``(N-1) max_i (a_i + d_{i+1}) + max_i 8 (S - m_{i+1}) / min(U_i, D_{i+1})``
    with ``S`` the sum of all contributions. ``direct`` (everyone to everyone at once):
    ``max_i a_i + max_j d_j + max(max_j 8 (S - m_j) / D_j, max_i 8 (N-1) m_i / U_i)`` (each downlink
    receives the others' bytes, each uplink sends its own N-1 times)."""
    n = len(links)
    if not links:
        raise ValueError("no links")
    sizes = [float(sizes)] * n if isinstance(sizes, int | float) else [float(x) for x in sizes]
    if len(sizes) != n:
        raise ValueError(f"{len(sizes)} sizes for {n} links")
    if min(sizes) < 0:
        raise ValueError(f"sizes must be >= 0, got {min(sizes)}")
    if n == 1:
        return 0.0
    total = sum(sizes)
    if algorithm == "ring":
        alpha = max(s.up_alpha_s + d.down_alpha_s for s, d in _hops(links))
        beta = max(8.0 * (total - sizes[(i + 1) % n]) / min(s.up_bps, d.down_bps)
                   for i, (s, d) in enumerate(_hops(links)))
        return (n - 1) * alpha + beta
    if algorithm == "direct":
        alpha = max(w.up_alpha_s for w in links) + max(w.down_alpha_s for w in links)
        recv = max(8.0 * (total - m) / w.down_bps for w, m in zip(links, sizes))
        send = max(8.0 * (n - 1) * m / w.up_bps for w, m in zip(links, sizes))
        return alpha + max(recv, send)
    raise ValueError(f"unknown all-gather algorithm {algorithm!r} (ring | direct)")


def broadcast_time(nbytes: float, links: Sequence[WorkerLink], algorithm: str = "tree", root: int = 0) -> float:
    """Broadcast of ``nbytes`` from ``root``: ``pipeline`` (chunked chain in rank order from the root):
    ``(N-1) max_hop (a_i + d_j) + 8 M / min_hop min(U_i, D_j)``; ``flat`` (the root sends N-1 copies):
    ``a_root + max_j d_j + shared(M, U_root, {D_j})``; ``tree`` (binomial): on the slowest link, an upper
    bound."""
    _check(nbytes, links)
    n = len(links)
    if not 0 <= root < n:
        raise ValueError(f"root {root} is not a rank of {n} workers")
    if n == 1:
        return 0.0
    if algorithm == "pipeline":
        chain = [links[(root + k) % n] for k in range(n)]
        hops = list(zip(chain, chain[1:]))
        return ((n - 1) * max(s.up_alpha_s + d.down_alpha_s for s, d in hops)
                + 8.0 * nbytes / min(min(s.up_bps, d.down_bps) for s, d in hops))
    if algorithm == "flat":
        r = links[root]
        others = [w for i, w in enumerate(links) if i != root]
        return r.up_alpha_s + max(w.down_alpha_s for w in others) + shared_time(nbytes, r.up_bps,
                                                                            [w.down_bps for w in others])
    if algorithm == "tree":
        slow = slowest_link(links)
        return max(0, math.ceil(math.log2(n))) * (slow.alpha_s + nbytes * slow.beta)
    raise ValueError(f"unknown broadcast algorithm {algorithm!r} (tree | flat | pipeline)")


def collective_time(op: str, algorithm: str, nbytes: float, links: Sequence[WorkerLink], **kw: Any) -> float:
    """:func:`lowbw.net.costmodel.collective_time` on per-worker links: the same ops (``all_reduce`` |
    ``all_gather`` | ``broadcast`` | ``art_topk``), the same mapping of algorithm names and the same
    size-exchange header before an all-gather (``exchange_sizes``); ``sizes=`` per-rank contributions."""
    op = op.replace("-", "_").lower()
    if op in ("all_reduce", "allreduce"):
        return links_allreduce_time(algorithm, nbytes, links)
    if op in ("all_gather", "allgather"):
        how = gather_pattern(algorithm)
        header = allgather_time(0.0, links, how) if kw.get("exchange_sizes", True) else 0.0
        return header + allgather_time(kw.get("sizes", nbytes), links, how)
    if op == "broadcast":
        return broadcast_time(nbytes, links, broadcast_pattern(algorithm))
    if op in ("art_topk", "ar_topk"):
        density = kw["density"]
        if not 0 <= density <= 1:
            raise ValueError(f"density must be in [0, 1], got {density}")
        mc = nbytes * density
        return broadcast_time(mc, links, "tree") + links_allreduce_time(algorithm, mc, links)
    raise ValueError(f"unknown collective op {op!r}")


def calls_time(calls: Iterable[Any], links: Sequence[WorkerLink]) -> float:
    """:func:`lowbw.net.costmodel.calls_time` on per-worker links ``links`` (one per rank of the group, in
    rank order): a sequence of one rank's ``CallRecord`` s, or a list of per-rank lists (zipped; all_gather
    then uses every rank's own contribution)."""
    calls = list(calls)
    if calls and isinstance(calls[0], list | tuple) and not hasattr(calls[0], "op"):
        total = 0.0
        for recs in zip(*calls):
            r = recs[0]
            if r.op.replace("-", "_") in ("all_gather", "allgather"):
                total += collective_time(r.op, r.algorithm, r.nbytes, links, sizes=[c.nbytes for c in recs],
                                         exchange_sizes=not getattr(r, "sizes_known", False))
            else:
                total += collective_time(r.op, r.algorithm, max(c.nbytes for c in recs), links)
        return total
    return sum(collective_time(c.op, c.algorithm, c.nbytes, links, exchange_sizes=not getattr(c, "sizes_known", False))
               for c in calls)
