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

With equal links these are exactly :func:`lowbw.net.costmodel.allreduce_time` with ``alpha = a + d``.
Sizes in bytes, times in seconds.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from lowbw.net.costmodel import LinkParams, allreduce_time
from lowbw.net.link import LinkSpec

__all__ = ["WorkerLink", "message_time", "ring_time", "ps_time", "best_root", "links_allreduce_time"]


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


def message_time(src: WorkerLink, dst: WorkerLink, nbytes: float) -> float:
    """``a_src + d_dst + 8 m / min(U_src, D_dst)``."""
    return src.up_alpha_s + dst.down_alpha_s + 8.0 * nbytes / min(src.up_bps, dst.down_bps)


def _shared(nbytes: float, capacity_bps: float, caps_bps: Sequence[float]) -> float:
    """Seconds until flows of ``nbytes`` each, sharing one link of ``capacity_bps``, each capped by
    ``caps_bps`` at its other end, have all arrived."""
    if not caps_bps:
        return 0.0
    return max(8.0 * nbytes * len(caps_bps) / capacity_bps, 8.0 * nbytes / min(caps_bps))


def _check(nbytes: float, links: Sequence[WorkerLink]) -> None:
    if nbytes < 0:
        raise ValueError(f"nbytes must be >= 0, got {nbytes}")
    if not links:
        raise ValueError("no links")


def ring_time(nbytes: float, links: Sequence[WorkerLink]) -> float:
    """Ring all-reduce in rank order: ``2 (N-1) max_i t(i -> i+1 mod N, M/N)``."""
    _check(nbytes, links)
    n = len(links)
    if n == 1:
        return 0.0
    step = max(message_time(links[i], links[(i + 1) % n], nbytes / n) for i in range(n))
    return 2 * (n - 1) * step


def ps_time(nbytes: float, links: Sequence[WorkerLink], root: int = 0) -> float:
    """Parameter-server all-reduce at ``root``:

    1. gather: ``max_i (a_i) + d_root + shared(M, D_root, {U_i})`` -- every worker's vector into the root;
    2. broadcast: ``a_root + max_i (d_i) + shared(M, U_root, {D_i})`` -- the result out to every worker.
    """
    _check(nbytes, links)
    if not 0 <= root < len(links):
        raise ValueError(f"root {root} is not a rank of {len(links)} workers")
    others = [w for i, w in enumerate(links) if i != root]
    if not others:
        return 0.0
    r = links[root]
    gather = max(w.up_alpha_s for w in others) + r.down_alpha_s + _shared(nbytes, r.down_bps,
                                                                          [w.up_bps for w in others])
    bcast = r.up_alpha_s + max(w.down_alpha_s for w in others) + _shared(nbytes, r.up_bps,
                                                                         [w.down_bps for w in others])
    return gather + bcast


def best_root(nbytes: float, links: Sequence[WorkerLink]) -> tuple[int, float]:
    """The parameter server's best placement: (rank, its all-reduce time); the lowest rank among equals."""
    times = [ps_time(nbytes, links, r) for r in range(len(links))]
    best = min(range(len(links)), key=lambda r: (times[r], r))
    return best, times[best]


def links_allreduce_time(algorithm: str, nbytes: float, links: Sequence[WorkerLink], root: int = 0) -> float:
    """All-reduce time on per-worker links: ring (and gloo's ``native`` ring) and ``ps`` (at ``root``)
    per link as above; every other algorithm on the slowest link throughout (an upper bound)."""
    _check(nbytes, links)
    if algorithm in ("ring", "native"):
        return ring_time(nbytes, links)
    if algorithm == "ps":
        return ps_time(nbytes, links, root)
    slowest = LinkParams(alpha_s=max(w.up_alpha_s for w in links) + max(w.down_alpha_s for w in links),
                         bandwidth_bps=min(min(w.up_bps, w.down_bps) for w in links))
    return allreduce_time(algorithm, nbytes, len(links), slowest)
