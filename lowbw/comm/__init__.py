"""lowbw.comm: collectives over torch.distributed point-to-point, a byte meter, and DDP hooks.

* :func:`allreduce` (``ALGORITHMS``: ring, tree, ps, butterfly, alltoall, roundrobin, allgather, native),
  :func:`allgather` (variable sizes), :func:`broadcast` — in place, like ``torch.distributed``'s.
* :class:`DistCollective` / :class:`ThreadCollective`: the ``lowbw.compress.collective.Collective``
  protocol over real processes / over threads of one process (bit-identical numbers), ``run_threads``.
* :class:`Meter`, :func:`metering`: bytes and messages per rank per call.
* :func:`aggregate`: a compressor's aggregation over a collective; :mod:`lowbw.comm.hooks`: DDP hooks.
* :class:`DiLoCo` (:mod:`lowbw.comm.diloco`): DiLoCo's outer loop around a user's model and optimiser.
* :mod:`lowbw.comm.testing`: ``run_procs`` spawns N gloo processes on 127.0.0.1 (for tests).
"""

from __future__ import annotations

import importlib
from typing import Any

# the function shadows its module's name on purpose: lowbw.comm.aggregate(...) is the function
from lowbw.comm.aggregate import aggregate, aggregate_many
from lowbw.comm.collectives import (
    ALGORITHMS,
    BROADCAST_FOR,
    BROADCASTS,
    DEFAULT_CHUNK_BYTES,
    allgather,
    allreduce,
    broadcast,
)
from lowbw.comm.errors import CommError, GroupAbortedError, PeerFailedError, PeerTimeoutError
from lowbw.comm.meter import CallStats, Meter, metering
from lowbw.comm.numerics import OPS

__all__ = [
    "ALGORITHMS",
    "BROADCASTS",
    "BROADCAST_FOR",
    "DEFAULT_CHUNK_BYTES",
    "OPS",
    "allreduce",
    "allgather",
    "broadcast",
    "CommError",
    "PeerTimeoutError",
    "PeerFailedError",
    "GroupAbortedError",
    "Meter",
    "CallStats",
    "metering",
    "DistCollective",
    "ThreadCollective",
    "run_threads",
    "aggregate",
    "aggregate_many",
    "make_hook",
    "compressor_hook",
    "DiLoCo",
]

_LAZY = {
    "DistCollective": "lowbw.comm.distributed",
    "ThreadCollective": "lowbw.comm.threads",
    "run_threads": "lowbw.comm.threads",
    "make_hook": "lowbw.comm.hooks",
    "compressor_hook": "lowbw.comm.hooks",
    "DiLoCo": "lowbw.comm.diloco",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'lowbw.comm' has no attribute {name!r}")
