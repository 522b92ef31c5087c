"""What a collective is, torch-free: its :class:`CollectiveSpec`, its alpha-beta :class:`Cost`, and the
per-link message primitives both cost models time messages with.

Each all-reduce algorithm is one module of :mod:`lowbw.comm` (``ring.py``, ``tree.py``, ``ps.py``,
``butterfly.py``, ``alltoall.py``, ``direct.py`` (roundrobin), ``gather.py`` (allgather), ``native.py``)
that defines
``SPEC = CollectiveSpec(...)``: the algorithm over a transport, its cost and the broadcast it pairs with.
:mod:`lowbw.comm.registry` lists the modules once; the engine (:func:`lowbw.comm.engine.run_allreduce`), the
uniform-link model (:mod:`lowbw.net.costmodel`), the per-worker-link model (:mod:`lowbw.net.costlinks`), the
config check and the benchmarks read that table.

The cost of an all-reduce of M bytes per rank on N workers, on a star of equal full-duplex links of latency
``alpha`` and ``beta`` seconds per byte, is :class:`Cost` ``(steps, link_bytes, reduced)``::

    t = steps alpha + link_bytes M beta + reduced M gamma

``steps``: sequential message steps on the critical path; ``link_bytes``: the largest number of bytes (in
units of M) one link carries in one direction on the critical path; ``reduced``: bytes one rank sums (in
units of M, charged at ``gamma`` s/byte). On unequal links (worker i with uplink ``U_i``, downlink ``D_i``
bits/s and one-way latencies ``a_i`` out, ``d_i`` in) a spec may give ``links``: the time from the message
primitives below; without it the per-link model times the closed form on the slowest link (an upper bound).
With equal links ``links`` equals the closed form with ``alpha = a + d`` (each collective's test checks).

This module imports nothing of lowbw, so the cost models and the collective modules can both read it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

__all__ = ["Cost", "CollectiveSpec", "message_time", "shared_time"]


class Cost(NamedTuple):
    """Alpha-beta terms of one all-reduce: ``t = steps alpha + link_bytes M beta + reduced M gamma``."""

    steps: float  # sequential message steps on the critical path (latency terms)
    link_bytes: float  # bytes (units of M) the busiest link carries in one direction on the critical path
    reduced: float  # bytes (units of M) one rank sums


@dataclass(frozen=True)
class CollectiveSpec:
    """One all-reduce algorithm, everything the rest of lowbw needs to know about it.

    * ``name``: what configs, benchmarks and results call it;
    * ``run(flat, tp, red, chunk, window, root)``: the algorithm on a contiguous 1-D tensor over a
      ``lowbw.comm.transport.Transport``, in place (chunk: elements per message); ``None`` for ``native``
      (``torch.distributed.all_reduce``, run by :mod:`lowbw.comm.api`);
    * ``cost(N) -> Cost``: the closed form on equal links (N >= 2; one worker costs nothing);
    * ``broadcast``: the broadcast with the same communication pattern (a name of
      ``lowbw.comm.algorithms.BROADCASTS``), which a collective uses for its broadcasts and the cost models charge;
    * ``links(M, links, root) -> seconds``: the time on per-worker links (``lowbw.net.costlinks.WorkerLink``),
      or ``None``: the closed form on the slowest link;
    * ``idle_starts``: how often the busiest link starts sending after having idled (each start gets a
      token-bucket shaper's burst free): 2 where the root's downlink fills, then its uplink; else 1;
    * ``talk(N) -> (steps, link_bytes)``: the talk's textbook (store-and-forward) formula, if it gives one;
    * ``fill(N, M, chunk_bytes) -> (count, chunk)``: pipeline fill on the critical path, ``count`` chunks of
      ``chunk`` bytes more on the link (the heap tree's broadcast); ``None``: none;
    * ``gather``: the all-gather pattern of the same shape (``ring`` | ``direct``);
    * ``volume(N, M, rank, root) -> (bytes_sent, bytes_recv)``: the textbook bytes one ``rank`` sends and
      receives in one all-reduce of M bytes on N >= 2 workers (what :func:`lowbw.comm.registry.expected` holds
      the meter to; an opaque collective's estimate of the pattern it runs);
    * ``duplex``: its busiest links carry data in both directions at once (the calibrated testbed model then
      takes the simultaneous exchange's beta, else the ping-pong's);
    * ``handshake(N) -> int``: steps on its critical path whose receive is posted no earlier than the matching
      send (each waits one more one-way time for gloo's receiver-ready notice); ``None``: not worked out;
    * ``handshake_every_step``: every step of ``step_messages`` waits for that notice (partners post receive
      and send together), so the idle gap between steps, in which a shaper's bucket refills, includes it;
    * ``step_messages(M, N, chunk_bytes) -> [(bytes, link), ...] | None``: the bytes a rank sends in each
      step of the critical path that waits for the peer's data, and the shaped uplink it leaves by (steps
      on one link share its token bucket); ``None`` (or no function): the links stream without such gaps;
    * ``segment_order``: the order in which it sums an element depends on the element's segment of
      ``lowbw.collective.partition.split(numel, N)`` (the ring: segment j's sum starts at rank j), so a packed
      buffer must be laid out segment by segment to give each tensor the sums it gets alone
      (:mod:`lowbw.comm.packing`);
    * ``heap_chain``: a binary heap tree of chunks capped at ``lowbw.comm.tree.HEAP_TREE_MAX_CHUNK_BYTES``
      with a receive window, whose one-chunk messages hop through a chain of shaped links (the testbed
      model's chain and window terms, :mod:`lowbw.net.calibrated`, apply).
    """

    name: str
    run: Callable[..., None] | None
    cost: Callable[[int], Cost]
    broadcast: str
    links: Callable[[float, Sequence[Any], int], float] | None = None
    idle_starts: int = 1
    talk: Callable[[int], tuple[float, float]] | None = None
    fill: Callable[[int, float, float], tuple[int, float]] | None = None
    gather: str = "ring"
    volume: Callable[[int, int, int, int], tuple[int, int]] | None = None
    duplex: bool = False
    handshake: Callable[[int], int | None] | None = None
    handshake_every_step: bool = False
    step_messages: Callable[[float, int, float], list[tuple[float, str]] | None] | None = None
    heap_chain: bool = False
    segment_order: bool = False

    @property
    def opaque(self) -> bool:
        """torch.distributed's own collective (no ``run`` of ours): its messages pass no transport of ours, so
        the meter cannot count them and its costs are those of the pattern it runs."""
        return self.run is None


def message_time(src: Any, dst: Any, nbytes: float) -> float:
    """One message of ``nbytes`` from worker link ``src`` to ``dst``: ``a_src + d_dst + 8 m / min(U_src, D_dst)``."""
    return src.up_alpha_s + dst.down_alpha_s + 8.0 * nbytes / min(src.up_bps, dst.down_bps)


def shared_time(nbytes: float, capacity_bps: float, caps_bps: Sequence[float]) -> float:
    """Seconds until flows of ``nbytes`` each, sharing one link of ``capacity_bps``, each capped by
    ``caps_bps`` at its other end, have all arrived (fluid max-min sharing):
    ``max(8 k m / capacity, max over flows of 8 m / cap)`` for k flows."""
    if not caps_bps:
        return 0.0
    return max(8.0 * nbytes * len(caps_bps) / capacity_bps, 8.0 * nbytes / min(caps_bps))
