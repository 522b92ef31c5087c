"""Parameter-server all-reduce (``ps``): gather every rank's tensor to ``root``, reduce, broadcast back.

The algorithm is :func:`lowbw.comm.tree.tree_allreduce` on a star (``shape="flat"``): every worker sends its
whole tensor to the root, which reduces ``own + others in rank order`` and sends the result to each. The root
carries 2(N-1) M bytes, every other rank 2 M. Schedule (one call):

1. gather: every rank but the root sends its M bytes to the root (the root's downlink carries (N-1) M);
2. the root sums the N vectors in rank order;
3. broadcast: the root sends the M-byte result to each rank (its uplink carries (N-1) M).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from lowbw.collective.spec import CollectiveSpec, Cost, shared_time
from lowbw.comm.tree import tree_allreduce

__all__ = ["cost", "talk", "links_time", "volume", "SPEC"]


def cost(n: int) -> Cost:
    """Two latency steps (gather, broadcast); the root's downlink then uplink carry (N-1) M each:
    ``2 a + 2(N-1) M b`` (the talk's formula); the root sums (N-1) M."""
    return Cost(2.0, 2.0 * (n - 1), float(n - 1))


def talk(n: int) -> tuple[float, float]:
    """The talk's parameter server: ``2 a + 2(N-1) M b``."""
    return 2.0, 2.0 * (n - 1)


def links_time(nbytes: float, links: Sequence[Any], root: int = 0) -> float:
    """On per-worker links, the root at rank ``root``:

    1. gather: ``max_i (a_i) + d_root + shared(M, D_root, {U_i})`` -- every worker's vector into the root;
    2. broadcast: ``a_root + max_i (d_i) + shared(M, U_root, {D_i})`` -- the result out to every worker.
    """
    if not 0 <= root < len(links):
        raise ValueError(f"root {root} is not a rank of {len(links)} workers")
    others = [w for i, w in enumerate(links) if i != root]
    if not others:
        return 0.0
    r = links[root]
    gather = max(w.up_alpha_s for w in others) + r.down_alpha_s + shared_time(nbytes, r.down_bps,
                                                                              [w.up_bps for w in others])
    bcast = r.up_alpha_s + max(w.down_alpha_s for w in others) + shared_time(nbytes, r.up_bps,
                                                                             [w.down_bps for w in others])
    return gather + bcast


def volume(n: int, nbytes: int, rank: int, root: int = 0) -> tuple[int, int]:
    """Bytes (sent, received): the root ``(N-1) M`` each way, every other rank M each way."""
    return ((n - 1) * nbytes, (n - 1) * nbytes) if rank == root else (nbytes, nbytes)


SPEC = CollectiveSpec(
    name="ps", run=lambda flat, tp, red, chunk, window, root=0: tree_allreduce(flat, tp, red, chunk, window,
                                                                               shape="flat", root=root),
    cost=cost, broadcast="flat", links=links_time, idle_starts=2, talk=talk, volume=volume,
    handshake=lambda n: 1)  # the leaves' first sends up
