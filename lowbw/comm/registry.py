"""The one table of all-reduce algorithms: name -> :class:`lowbw.collective.spec.CollectiveSpec`.

Each line is one collective's module (its ``SPEC``: the algorithm, its alpha-beta cost, its broadcast). The
engine (:func:`lowbw.comm.engine.run_allreduce`), the cost models (:mod:`lowbw.net.costmodel`,
:mod:`lowbw.net.costlinks`), the ``lowbw.comm.algorithms`` (config check, benchmarks, report) read it.
The order is the order configs list and reports plot. Adding a collective: README, "Add a collective".
"""

from __future__ import annotations

import importlib

from lowbw.collective.spec import CollectiveSpec

__all__ = ["COLLECTIVES", "get", "expected"]

# one line per collective: its module, whose SPEC says everything about it
COLLECTIVES: dict[str, CollectiveSpec] = {spec.name: spec for spec in (
    importlib.import_module("lowbw.comm.ring").SPEC,
    importlib.import_module("lowbw.comm.tree").SPEC,
    importlib.import_module("lowbw.comm.ps").SPEC,
    importlib.import_module("lowbw.comm.butterfly").SPEC,
    importlib.import_module("lowbw.comm.doubling").SPEC,
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


def expected(algorithm: str, nbytes: int, world_size: int, rank: int, root: int = 0) -> tuple[int, int]:
    """Textbook (bytes_sent, bytes_recv) of one all-reduce of ``nbytes`` for ``rank``, which the byte meter
    (:mod:`lowbw.comm.meter`) is held to: the collective's ``SPEC.volume``; a ValueError naming an algorithm
    the table does not know or whose spec gives no volume.

    Exact when ``nbytes`` splits evenly into ``world_size`` parts (for ring, butterfly, roundrobin);
    butterfly for a power-of-two ``world_size`` only. ps: root = rank ``root``.
    """
    spec = get(algorithm)
    if spec.volume is None:
        raise ValueError(f"no textbook volume for algorithm={algorithm!r}: its SPEC gives none")
    if world_size == 1:
        return 0, 0
    return spec.volume(world_size, nbytes, rank, root)
