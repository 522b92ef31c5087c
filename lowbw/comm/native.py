"""``native``: ``torch.distributed.all_reduce`` itself, the baseline (run by :mod:`lowbw.comm.api`).

gloo's CPU all-reduce is a ring (reduce-scatter + all-gather), so its cost is the ring's
(:func:`lowbw.comm.ring.cost`, on per-worker links :func:`lowbw.comm.ring.links_time`); its broadcast is
``torch.distributed.broadcast`` (a binomial tree in gloo, which the cost models charge as ``tree``).
The meter estimates native calls' bytes from :func:`lowbw.comm.meter.native_volume`; its textbook volume
(``SPEC.volume``) is the ring's.
"""

from __future__ import annotations

from lowbw.collective.spec import CollectiveSpec
from lowbw.comm.ring import cost, links_time, volume

__all__ = ["SPEC"]

# gloo's ring streams both ways at once (duplex) like ours; its handshakes and steps are not worked out
SPEC = CollectiveSpec(name="native", run=None, cost=cost, broadcast="native", links=links_time, volume=volume,
                      duplex=True)
