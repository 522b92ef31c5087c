"""The sync scheme registry: every ``cfg.sync`` name and its declaration, one line per scheme.

A declaration (:class:`~lowbw.train.schemes.spec.SchemeSpec`, in the scheme's keys module
:mod:`lowbw.train.schemes.keys`) names its class by import path (``"module:Class"``), so this table imports no
scheme and no torch: the run config reads the names (the choices of ``sync``,
:data:`lowbw.train.config_fields.SYNC_SCHEMES`), the key sets it is assembled from and the schemes' rules, and
:func:`lowbw.train.schemes.scheme_class` imports a scheme's module when a run builds it. Every class is built
as ``cls(cfg, world, rep, opt, batches)``.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

from lowbw.train.schemes.spec import SchemeSpec, key_names

__all__ = ["SCHEMES", "spec_of", "key_sets", "users_of", "reads", "advised", "family_of"]

# one line per scheme: its name and its declaration (the keys module's SPEC, or the named spec of a module that
# declares several)
SCHEMES: dict[str, SchemeSpec] = {
    "sync": importlib.import_module("lowbw.train.schemes.keys.synchronous").SYNC,
    "local": importlib.import_module("lowbw.train.schemes.keys.synchronous").LOCAL,
    "post_local": importlib.import_module("lowbw.train.schemes.keys.synchronous").POST_LOCAL,
    "hierarchical": importlib.import_module("lowbw.train.schemes.keys.synchronous").HIERARCHICAL,
    "ssp": importlib.import_module("lowbw.train.schemes.keys.parameter_server").SSP,
    "async": importlib.import_module("lowbw.train.schemes.keys.parameter_server").ASYNC,
    "diloco": importlib.import_module("lowbw.train.schemes.keys.diloco").SPEC,
    "desloc": importlib.import_module("lowbw.train.schemes.keys.desloc").SPEC,
    "sparta": importlib.import_module("lowbw.train.schemes.keys.sparta").SPEC,
    "noloco": importlib.import_module("lowbw.train.schemes.keys.noloco").SPEC,
    "async_diloco": importlib.import_module("lowbw.train.schemes.keys.async_diloco").SPEC,
    "decoupled_diloco": importlib.import_module("lowbw.train.schemes.keys.decoupled_diloco").SPEC,
    "halos": importlib.import_module("lowbw.train.schemes.keys.halos").SPEC,
    "qsr": importlib.import_module("lowbw.train.schemes.keys.qsr").SPEC,
}


def spec_of(name: str) -> SchemeSpec:
    """The declaration of ``cfg.sync`` value ``name`` (KeyError for an unknown one: the config's enum names it
    first)."""
    return SCHEMES[name]


def key_sets() -> list[type]:
    """Every key set some registered scheme reads, once each, in registry order."""
    out: list[type] = []
    for spec in SCHEMES.values():
        out += [ks for ks in spec.keys if ks not in out]
    return out


def users_of(key: str) -> list[str]:
    """The schemes that read config key ``key`` (a key of a scheme's key set), in registry order."""
    return [name for name, spec in SCHEMES.items() if key in key_names(spec)]



def reads(name: str, key: str) -> bool:
    """Whether scheme ``name`` reads config key ``key`` (one of its key sets' keys): a scheme's properties that
    follow from its keys (periodic: ``world_period``; an outer step: ``outer_lr``) are asked this way."""
    return key in key_names(SCHEMES[name])


def advised() -> tuple[str, ...]:
    """The schemes whose step time the advisor models (``SchemeSpec.advised``), in registry order."""
    return tuple(name for name, spec in SCHEMES.items() if spec.advised)


def family_of(name: str, settings: Mapping[str, Any]) -> str | None:
    """The advisor's family of a run of scheme ``name`` with ``settings`` (a run config or a method preset, as a
    mapping): its declaration's (``SchemeSpec.family``), else its name; None for a scheme whose every step is a
    world gradient average (``ddp_hook``): the family is then its compressor's."""
    spec = SCHEMES[name]
    if spec.ddp_hook:
        return None
    return spec.family(settings) if spec.family is not None else name
