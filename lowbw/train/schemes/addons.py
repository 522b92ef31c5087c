"""Per-step synchronisations that run after a synchronous scheme's own
(:meth:`lowbw.train.schemes.synchronous.Synchronous.model_sync`): one class per method behind one small
interface, registered in :data:`lowbw.train.schemes.synchronous.ADDONS`.

An add-on is built from ``(cfg, world, rep, opt, direct)`` (the run's config, world, replicas, optimiser, and
whether sim averages densely in one thread) and has

- ``applies(cfg) -> bool`` (a static method): whether the run uses it;
- ``after_step(step) -> AddOnResult``: its communication after step ``step`` (from 1), made at once (the
  step waits for it) and already applied to the replicas or the optimiser state;
- ``evaluate_replica0``: the replicas never agree under it, so the run is evaluated on worker 0's model;
- ``state_dict()`` / ``load_state_dict(s)``: what a checkpoint keeps of it.

Every exchange is a dense mean over the world through :func:`mean_rows`, so the byte meter and the virtual
clock charge it like any other all-reduce of the configured collective.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from lowbw.train import batched
from lowbw.train.aggregate import average_rank

__all__ = ["AddOnResult", "mean_rows"]


@dataclass(frozen=True)
class AddOnResult:
    exchanges: list = field(default_factory=list)  # the step's exchanges (lowbw.train.world.Exchange), in order
    equal: bool = False  # the replicas' parameters are equal afterwards


def mean_rows(world, rows: list[torch.Tensor], direct: bool):
    """The world's mean of each local replica's row (flat, same length everywhere): one all-reduce per worker
    (``direct``, sim: one rank-ordered sum in this thread with the collective's records; ``sim_dense:
    collective``: the collective's own sums in this thread, :mod:`lowbw.train.batched`)."""
    if direct:
        return world.dense_mean("world", rows)
    if batched.applies(world, world.cfg, None):
        return batched.mean_rows(world, "world", torch.stack(rows))
    return world.exchange("world", lambda i, coll: average_rank(rows[i], coll))
