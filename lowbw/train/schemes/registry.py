"""The sync scheme registry: every ``cfg.sync`` name and the class that runs it, one line per scheme.

Classes are named by import path (``"module:Class"``) rather than imported, so this table imports nothing:
the run config reads its names for the choices of ``sync`` (:data:`lowbw.train.config_fields.SYNC_SCHEMES`)
without loading torch or the schemes, and :func:`lowbw.train.schemes.scheme_class` imports a scheme's module
when a run builds it. Every class is built as ``cls(cfg, world, rep, opt, batches)``.
"""

from __future__ import annotations

__all__ = ["SCHEMES"]

SCHEMES: dict[str, str] = {
    "sync": "lowbw.train.schemes.synchronous:SyncSGD",
    "local": "lowbw.train.schemes.synchronous:LocalSGD",
    "post_local": "lowbw.train.schemes.synchronous:PostLocalSGD",
    "hierarchical": "lowbw.train.schemes.synchronous:Hierarchical",
    "ssp": "lowbw.train.schemes.parameter_server:ParameterServer",
    "async": "lowbw.train.schemes.parameter_server:ParameterServer",
    "diloco": "lowbw.train.schemes.diloco:DiLoCo",
    "desloc": "lowbw.train.schemes.synchronous:LocalSGD",  # + the DesLoc add-on (lowbw.train.schemes.desloc) on the moments
    "sparta": "lowbw.train.schemes.synchronous:LocalOnly",  # + the Sparta add-on (lowbw.train.schemes.sparta)
    "noloco": "lowbw.train.schemes.noloco:NoLoCo",
    "async_diloco": "lowbw.train.schemes.async_diloco:AsyncDiLoCo",
    "decoupled_diloco": "lowbw.train.schemes.decoupled_diloco:DecoupledDiLoCo",
    "halos": "lowbw.train.schemes.halos:HALoS",
}
