"""The parameter server's keys and rules (:mod:`lowbw.train.schemes.parameter_server`, ``sync: ssp`` and
``sync: async``): an event simulation on the virtual clock, so sim only, dense pushes, a fixed batch size and
the optimisers the server applies."""

from __future__ import annotations

from dataclasses import dataclass

from lowbw.train.config_key import ConfigError, key
from lowbw.train.schemes.keys.synchronous import dense_only
from lowbw.train.schemes.spec import SchemeSpec

__all__ = ["Staleness", "SSP", "ASYNC"]


@dataclass(frozen=True)
class Staleness:
    """The stale-synchronous bound."""

    staleness: int = key(2, "ssp: staleness bound s (a worker may be s clocks ahead of the slowest)",
                         unit="clocks", minimum=0, group="sync")


def check(cfg) -> None:
    """Sim only; no muon on the server, no dynamic batch size, no compressor."""
    s = cfg.sync
    if cfg.optimizer == "muon":
        raise ConfigError("optimizer", f"muon is not wired into the parameter server (sync={s})")
    if cfg.backend != "sim":
        raise ConfigError("backend", f"sync={s} runs on the sim backend only")
    if cfg.dynamic_batch != "off":
        raise ConfigError("dynamic_batch", f"not supported with sync={s}")
    dense_only(cfg)


SSP = SchemeSpec("lowbw.train.schemes.parameter_server:ParameterServer", keys=(Staleness,), check=check)
ASYNC = SchemeSpec("lowbw.train.schemes.parameter_server:ParameterServer", check=check)
