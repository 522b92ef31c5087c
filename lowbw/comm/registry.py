"""The one table of all-reduce algorithms: name -> :class:`lowbw.collective.CollectiveSpec`.

Each line is one collective's module (its ``SPEC``: the algorithm, its alpha-beta cost, its broadcast). The
engine (:func:`lowbw.comm.engine.run_allreduce`), the cost models (:mod:`lowbw.net.costmodel`,
:mod:`lowbw.net.costlinks`), the ``lowbw.algorithms`` (config check, benchmarks, report) read it.
The order is the order configs list and reports plot. Adding a collective: README, "Add a collective".
"""

from __future__ import annotations

import importlib

from lowbw.collective import CollectiveSpec

__all__ = ["COLLECTIVES", "get"]

# one line per collective: its module, whose SPEC says everything about it
COLLECTIVES: dict[str, CollectiveSpec] = {spec.name: spec for spec in (
    importlib.import_module("lowbw.comm.ring").SPEC,
    importlib.import_module("lowbw.comm.tree").SPEC,
    importlib.import_module("lowbw.comm.ps").SPEC,
    importlib.import_module("lowbw.comm.butterfly").SPEC,
    importlib.import_module("lowbw.comm.alltoall").SPEC,
    importlib.import_module("lowbw.comm.direct").SPEC,  # roundrobin
    importlib.import_module("lowbw.comm.gather").SPEC,  # allgather
    importlib.import_module("lowbw.comm.native").SPEC,
)}


def get(algorithm: str) -> CollectiveSpec:
    """The spec of ``algorithm``; a ValueError naming it and the known ones if there is none."""
    try:
        return COLLECTIVES[algorithm]
    except KeyError:
        raise ValueError(f"algorithm={algorithm!r} is not known; allowed: {', '.join(COLLECTIVES)}") from None
