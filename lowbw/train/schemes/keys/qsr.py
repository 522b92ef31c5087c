"""The Quadratic Synchronization Rule's key and rules (:mod:`lowbw.train.schemes.qsr`, ``sync: qsr``): the growth
coefficient alpha; the base period is ``world_period`` (the periodic schemes' shared key)."""

from __future__ import annotations

from dataclasses import dataclass

from lowbw.train.config_key import key
from lowbw.train.schemes.keys.synchronous import WorldPeriod, dense_only
from lowbw.train.schemes.spec import SchemeSpec

__all__ = ["QSRKeys", "SPEC"]


@dataclass(frozen=True)
class QSRKeys:
    """QSR's growth coefficient (Gu et al. 2024)."""

    qsr_alpha: float = key(0.0, "qsr: alpha of the quadratic synchronization rule: a round of local steps lasts "
                           "H = max(world_period, floor((alpha / lr)^2)) steps, lr the round's first step's "
                           "(Gu, Lyu, Arora, Zhang & Huang 2024); 0: local SGD's fixed H = world_period",
                           minimum=0, group="sync")


# models averaged over the world at the end of each round: dense, as local SGD
SPEC = SchemeSpec("lowbw.train.schemes.qsr:QSR", keys=(WorldPeriod, QSRKeys), check=dense_only)
