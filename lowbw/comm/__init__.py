"""lowbw.comm: collectives over torch.distributed point-to-point, a byte meter, and DDP hooks.

* :func:`allreduce` (``ALGORITHMS``: ring, tree, ps, butterfly, alltoall, roundrobin, allgather, native),
  :func:`allgather` (variable sizes), :func:`broadcast` — in place, like ``torch.distributed``'s.
* :class:`DistCollective` / :class:`ThreadCollective`: the ``lowbw.compress.protocol.Collective``
  protocol over real processes / over threads of one process (bit-identical numbers), ``run_threads``.
* :class:`Meter`, :func:`metering`: bytes and messages per rank per call.
* :func:`aggregate` (:mod:`lowbw.comm.aggregation`): a compressor's aggregation over a collective;
  :mod:`lowbw.comm.hooks`: DDP hooks.
* :class:`DiLoCo` (:mod:`lowbw.comm.diloco`): DiLoCo's outer loop around a user's model and optimiser.
* :mod:`lowbw.comm.testing`: ``run_procs`` spawns N gloo processes on 127.0.0.1 (for tests).
"""

from __future__ import annotations

import importlib
from typing import Any

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

# every export is resolved on first use: importing one collective's module for its cost formula (the
# registry, read by `lowbw advise` and the Snakefile's config check) must not import torch
_LAZY = {
    "aggregate": "lowbw.comm.aggregation",
    "aggregate_many": "lowbw.comm.aggregation",
    "ALGORITHMS": "lowbw.comm.api",
    "BROADCAST_FOR": "lowbw.comm.api",
    "BROADCASTS": "lowbw.comm.api",
    "DEFAULT_CHUNK_BYTES": "lowbw.comm.api",
    "allgather": "lowbw.comm.api",
    "allreduce": "lowbw.comm.api",
    "broadcast": "lowbw.comm.api",
    "CommError": "lowbw.comm.errors",
    "GroupAbortedError": "lowbw.comm.errors",
    "PeerFailedError": "lowbw.comm.errors",
    "PeerTimeoutError": "lowbw.comm.errors",
    "CallStats": "lowbw.comm.meter",
    "Meter": "lowbw.comm.meter",
    "metering": "lowbw.comm.meter",
    "OPS": "lowbw.comm.numerics",
    "DistCollective": "lowbw.comm.distributed",
    "ThreadCollective": "lowbw.comm.threads",
    "run_threads": "lowbw.comm.threads",
    "make_hook": "lowbw.comm.hooks",
    "compressor_hook": "lowbw.comm.hooks",
    "DiLoCo": "lowbw.comm.diloco",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = globals()[name] = getattr(importlib.import_module(_LAZY[name]), name)
        return value
    raise AttributeError(f"module 'lowbw.comm' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
