"""Sync schemes: one class per scheme behind one interface (:class:`lowbw.train.schemes.base.Scheme`, whose
module docstring says how to add one), and the registry of ``cfg.sync`` names.

- :mod:`.base`: the interface, :class:`~.base.StepContext` (what a step gets) and :class:`~.base.LocalStep`;
- :mod:`.synchronous`: local step, then communicate (sync, local, post_local, hierarchical, desloc, sparta);
- :mod:`.diloco`: the DiLoCo family (outer steps, fragments, overlapped exchanges);
- :mod:`.noloco`: NoLoCo (pairwise outer steps with one peer, no collective);
- :mod:`.parameter_server`: ssp and async (an event simulation on the virtual clock, sim only);
- :mod:`.charge`: what a synchronous step charges to the run's clock and records.
"""

from __future__ import annotations

from lowbw.train.schemes.base import Scheme
from lowbw.train.schemes.diloco import DiLoCo
from lowbw.train.schemes.noloco import NoLoCo
from lowbw.train.schemes.parameter_server import ParameterServer
from lowbw.train.schemes.synchronous import Hierarchical, LocalOnly, LocalSGD, PostLocalSGD, SyncSGD

__all__ = ["SCHEMES", "make_scheme"]

# cfg.sync -> its scheme class, built as cls(cfg, world, rep, opt, batches); one line per scheme
SCHEMES: dict[str, type[Scheme]] = {
    "sync": SyncSGD,
    "local": LocalSGD,
    "post_local": PostLocalSGD,
    "hierarchical": Hierarchical,
    "ssp": ParameterServer,
    "async": ParameterServer,
    "diloco": DiLoCo,
    "desloc": LocalSGD,  # + the DesLoc add-on (lowbw.train.desloc) on the moments
    "sparta": LocalOnly,  # + the Sparta add-on (lowbw.train.sparta)
    "noloco": NoLoCo,
}


def make_scheme(cfg, world, rep, opt, batches) -> Scheme:
    """The run's scheme (``cfg.sync``) over the replicas ``rep`` with optimiser ``opt``, the ``world`` and
    the batch streams ``batches(i, b)``."""
    return SCHEMES[cfg.sync](cfg, world, rep, opt, batches)
