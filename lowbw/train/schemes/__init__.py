"""Sync schemes: one class per scheme behind one interface (:class:`lowbw.train.schemes.base.Scheme`, whose
module docstring says how to add one), and the registry of ``cfg.sync`` names.

- :mod:`.registry`: ``cfg.sync`` name -> its declaration (:mod:`.spec`, declared in :mod:`.keys`: the class
  that runs it, its config keys and its rules; torch-free: the run config reads it);
- :mod:`.base`: the interface, :class:`~.base.StepContext` (what a step gets) and :class:`~.base.LocalStep`;
- :mod:`.synchronous`: local step, then communicate (sync, local, post_local, hierarchical, desloc, sparta), with
  the add-ons (:mod:`.addons`) that synchronise after its own step: :mod:`.desloc` (Adam's moments) and
  :mod:`.sparta` (a sparse average);
- :mod:`.diloco`: the DiLoCo family (outer steps, fragments, overlapped exchanges; Streaming DiLoCo's fragments
  and the clock of an exchange in flight: :mod:`.streaming`);
- :mod:`.noloco`: NoLoCo (pairwise outer steps with one peer, no collective);
- :mod:`.parameter_server`: ssp and async (an event simulation on the virtual clock, sim only);
- :mod:`.async_outer`: the event engine of outer steps no worker waits for, and its server policies
  :mod:`.async_diloco` (Delayed Nesterov, DyLU), :mod:`.decoupled_diloco` (quorum, grace window, token
  weights) and :mod:`.halos` (regional and global servers);
- :mod:`.charge`: what a synchronous step charges to the run's clock and records.

Importing this package loads only the registry; a scheme's module is imported when :func:`scheme_class`
resolves its name.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from lowbw.train.schemes.registry import SCHEMES

if TYPE_CHECKING:
    from lowbw.train.schemes.base import Scheme

__all__ = ["SCHEMES", "make_scheme", "scheme_class"]


def scheme_class(name: str) -> type[Scheme]:
    """The class registered for ``cfg.sync`` value ``name``; ValueError naming an unknown one."""
    if name not in SCHEMES:
        raise ValueError(f"sync={name!r}: not a registered scheme (one of {', '.join(SCHEMES)})")
    module, _, cls = SCHEMES[name].runs.partition(":")
    # lazy: the registry names classes by path so that the run config can read the names without torch
    return getattr(importlib.import_module(module), cls)


def make_scheme(cfg, world, rep, opt, batches) -> Scheme:
    """The run's scheme (``cfg.sync``) over the replicas ``rep`` with optimiser ``opt``, the ``world`` and
    the batch streams ``batches(i, b)``."""
    return scheme_class(cfg.sync)(cfg, world, rep, opt, batches)
