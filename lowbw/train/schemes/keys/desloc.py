"""DES-LOC's keys and rules (:mod:`lowbw.train.schemes.desloc`, ``sync: desloc``): the periods of Adam's moments'
averages, on top of local SGD's ``world_period``."""

from __future__ import annotations

from dataclasses import dataclass

from lowbw.train.config_key import ConfigError, key
from lowbw.train.schemes.keys.synchronous import WorldPeriod, dense_only
from lowbw.train.schemes.spec import SchemeSpec

__all__ = ["DesLocKeys", "SPEC"]


@dataclass(frozen=True)
class DesLocKeys:
    """K_u and K_v (Iacob et al. 2025)."""

    desloc_m1_period: int = key(0, "desloc: K_u, steps between averages of Adam's first moment (DES-LOC, Iacob et "
                                "al. 2025); 0: 3 x world_period (their recommendation)", unit="steps", minimum=0,
                                group="sync")
    desloc_m2_period: int = key(0, "desloc: K_v, steps between averages of Adam's second moment; 0: 6 x "
                                "world_period (their recommendation)", unit="steps", minimum=0, group="sync")


def check(cfg) -> None:
    """Adam's moments to average (adam or adamw), and no compressor (the averages are dense)."""
    if cfg.optimizer not in ("adam", "adamw"):
        raise ConfigError("optimizer", f"desloc averages Adam's moments: needs adam or adamw, got {cfg.optimizer!r}")
    dense_only(cfg)


# local SGD's class; its add-on (lowbw.train.schemes.desloc.DesLoc) averages the moments
SPEC = SchemeSpec("lowbw.train.schemes.synchronous:LocalSGD", keys=(WorldPeriod, DesLocKeys), check=check)
