"""The names of the collective algorithms: one definition, torch-free.

The collectives (:mod:`lowbw.comm`), the cost model (:mod:`lowbw.net.costmodel`), the training config,
the benchmarks and the report all name algorithms; they take the names from here, so that a new
algorithm is added in one place and a misspelt one is rejected everywhere alike.
"""

from __future__ import annotations

__all__ = ["ALLREDUCE_ALGORITHMS", "BROADCASTS", "BROADCAST_ALIASES", "BROADCAST_FOR", "OUTER_OPTIMIZERS",
           "check_algorithm"]

# every all-reduce: ours over point-to-point messages, and "native" = torch.distributed.all_reduce
ALLREDUCE_ALGORITHMS = ("ring", "tree", "ps", "butterfly", "alltoall", "roundrobin", "allgather", "native")

# broadcasts: "pipeline" = chunked chain (bandwidth-optimal), "tree" = binomial tree (log2 N rounds),
# "flat" = the source sends to every rank, "native" = torch.distributed.broadcast
BROADCASTS = ("pipeline", "tree", "flat", "native")
BROADCAST_ALIASES = {"chain": "pipeline", "binomial": "tree"}

# the broadcast a collective pairs with each all-reduce algorithm (the same communication pattern)
BROADCAST_FOR = {
    "ring": "pipeline",
    "allgather": "pipeline",
    "tree": "tree",
    "butterfly": "tree",
    "ps": "flat",
    "alltoall": "flat",
    "roundrobin": "flat",
    "native": "native",
}

# DiLoCo's outer optimisers (lowbw.comm.diloco and the engine's sync: diloco): SGD with Nesterov momentum, or plain
OUTER_OPTIMIZERS = ("nesterov", "sgd")


def check_algorithm(algorithm: str, allowed=ALLREDUCE_ALGORITHMS) -> str:
    """``algorithm`` if it is one of ``allowed``, else a one-line ValueError naming it and the choices."""
    if algorithm not in allowed:
        raise ValueError(f"algorithm={algorithm!r} is not known; allowed: {', '.join(allowed)}")
    return algorithm
