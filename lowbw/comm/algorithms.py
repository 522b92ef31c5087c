"""The names of the collective algorithms, for everyone who names one (config, benchmarks, report).

Every all-reduce algorithm is one module of :mod:`lowbw.comm` registered in :mod:`lowbw.comm.registry` (what
a collective is: :mod:`lowbw.collective.spec`); ``ALLREDUCE_ALGORITHMS`` (the names, in the registry's order) and
``BROADCAST_FOR`` (the broadcast each pairs with) and ``OWN_ALLREDUCE_ALGORITHMS`` (those run over lowbw's
own transport, not opaque like torch's ``native``) are read from that table when first used, so a new
algorithm is added in one place and a misspelt one is rejected everywhere alike. The broadcasts and DiLoCo's
outer optimisers are named here. Importing this module imports no torch; reading the two names above does.
"""

from __future__ import annotations

from typing import Any

# ALLREDUCE_ALGORITHMS and BROADCAST_FOR come from the module's __getattr__ (the registry, read when first used)
__all__ = ["ALLREDUCE_ALGORITHMS", "OWN_ALLREDUCE_ALGORITHMS", "BROADCASTS", "BROADCAST_ALIASES",  # noqa: F822
           "BROADCAST_FOR",
           "OUTER_OPTIMIZERS", "check_algorithm"]

# broadcasts: "pipeline" = chunked chain (bandwidth-optimal), "tree" = binomial tree (log2 N rounds),
# "flat" = the source sends to every rank, "native" = torch.distributed.broadcast
BROADCASTS = ("pipeline", "tree", "flat", "native")
BROADCAST_ALIASES = {"chain": "pipeline", "binomial": "tree"}

# DiLoCo's outer optimisers (lowbw.comm.diloco and the engine's sync: diloco): SGD with Nesterov momentum, or plain
OUTER_OPTIMIZERS = ("nesterov", "sgd")


def check_algorithm(algorithm: str, allowed=None) -> str:
    """``algorithm`` if it is one of ``allowed`` (default: ``ALLREDUCE_ALGORITHMS``), else a one-line
    ValueError naming it and the choices."""
    if allowed is None:
        allowed = __getattr__("ALLREDUCE_ALGORITHMS")
    if algorithm not in allowed:
        raise ValueError(f"algorithm={algorithm!r} is not known; allowed: {', '.join(allowed)}")
    return algorithm


def __getattr__(name: str) -> Any:
    """``ALLREDUCE_ALGORITHMS`` (every registered all-reduce; ``native`` = torch.distributed.all_reduce),
    ``OWN_ALLREDUCE_ALGORITHMS`` (those with steps of lowbw's own: not ``SPEC.opaque``) and ``BROADCAST_FOR``
    (algorithm -> its broadcast), from :mod:`lowbw.comm.registry`."""
    if name in ("ALLREDUCE_ALGORITHMS", "OWN_ALLREDUCE_ALGORITHMS", "BROADCAST_FOR"):
        from lowbw.comm.registry import COLLECTIVES  # lazy: keeps the Snakefile's planning free of torch

        if name == "ALLREDUCE_ALGORITHMS":
            value: Any = tuple(COLLECTIVES)
        elif name == "OWN_ALLREDUCE_ALGORITHMS":
            value = tuple(a for a, spec in COLLECTIVES.items() if not spec.opaque)
        else:
            value = {a: spec.broadcast for a, spec in COLLECTIVES.items()}
        globals()[name] = value
        return value
    raise AttributeError(f"module 'lowbw.comm.algorithms' has no attribute {name!r}")
