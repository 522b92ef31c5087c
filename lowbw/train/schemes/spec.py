"""What a sync scheme declares about itself (:class:`SchemeSpec`): the class that runs it, the config keys it
reads beyond the engine's, its own rules, and the properties the rules across schemes ask about.

A scheme's keys come in *key sets*: small frozen dataclasses whose fields are config keys
(:func:`lowbw.train.config_key.key`: default, unit, help, range). A key set is declared once, by the scheme
that introduced it, and listed by every scheme that reads it (``world_period`` by every periodic scheme; the
outer step's rate and momentum by DiLoCo, NoLoCo and the asynchronous outer schemes).
:class:`~lowbw.train.config_fields.RunConfig` is assembled from the engine's keys and every registered
scheme's key sets, so that the same flat keys work in ``run.yaml``, ``--set``, the workflow's grid and
papermill; a key a scheme does not list keeps its default under that scheme (the rule across schemes in
:mod:`lowbw.train.config_rules` names it otherwise).

Torch-free: specs are read when a config is read.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import Any

__all__ = ["SchemeSpec", "key_names"]


def _world(cfg) -> list[str]:
    return ["world"]


@dataclass(frozen=True)
class SchemeSpec:
    """One sync scheme's declaration (one entry of :data:`lowbw.train.schemes.registry.SCHEMES`)."""

    runs: str  # "module:Class": the class that runs it, imported when a run builds it
    keys: tuple[type, ...] = ()  # the key sets it reads beyond the engine's keys (its own and shared ones)
    check: Callable[[Any], None] | None = None  # its own rules on a config with this sync (ConfigError naming the key)
    groups: Callable[[Any], list[str]] = _world  # the collective groups a run of it needs (procs create them first)
    ddp_hook: bool = False  # every step is a world gradient average, which DDP's communication hook can run
    compress_updates: bool = False  # compress_target: update may replace its every-step gradient average
    tolerates_churn: bool = False  # workers may leave and rejoin (faults: churn): nothing waits for all of them
    pseudo_gradient: bool = False  # it aggregates a pseudo-gradient (granularity auto: bucket even when dense)
    advised: bool = False  # the advisor models its step time (lowbw.advise.steptime): its runs can be candidates
    # the advisor's family of a run of it, from the run's (or preset's) settings; None: the scheme's own name
    # (a scheme whose every step is a world gradient average, ddp_hook, takes its compressor's family instead)
    family: Callable[[Mapping[str, Any]], str] | None = None


def key_names(spec: SchemeSpec) -> list[str]:
    """The config keys of every key set of ``spec``, in order."""
    return [f.name for ks in spec.keys for f in fields(ks)]
