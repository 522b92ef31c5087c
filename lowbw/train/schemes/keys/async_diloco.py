"""Asynchronous DiLoCo's keys and rules (:mod:`lowbw.train.schemes.async_diloco`, ``sync: async_diloco``):
Delayed Nesterov's buffer and momentum activation (Liu et al. 2024)."""

from __future__ import annotations

from dataclasses import dataclass

from lowbw.train.config_key import ConfigError, key
from lowbw.train.schemes.keys.async_outer import AsyncEngine, check_engine
from lowbw.train.schemes.keys.diloco import OuterStep
from lowbw.train.schemes.keys.synchronous import WorldPeriod
from lowbw.train.schemes.spec import SchemeSpec

__all__ = ["AsyncDiLoCoKeys", "SPEC"]


@dataclass(frozen=True)
class AsyncDiLoCoKeys:
    """Delayed Nesterov (Liu et al. 2024, Algorithm 3)."""

    async_buffer: int = key(0, "async_diloco: N, Delayed Nesterov's buffer: the outer momentum is updated with "
                            "the mean of every N Deltas, each Delta applied at once at outer_lr / N (Liu et al. "
                            "2024, Algorithm 3); 0: N = workers; 1: Nesterov on every Delta", unit="Deltas",
                            minimum=0, group="sync")
    async_momentum_activation: float = key(0.0, "async_diloco: c, Delayed Nesterov's momentum activation (the "
                                           "fraction of the momentum applied between its updates); 0: the "
                                           "paper's", minimum=0, maximum=1, group="sync")


def check(cfg) -> None:
    """The engine's rules, and a buffer that the momentum activation acts within."""
    check_engine(cfg)
    if cfg.async_momentum_activation and (cfg.async_buffer or cfg.workers) == 1:
        raise ConfigError("async_momentum_activation", "needs a buffer async_buffer > 1 (with N = 1 c does nothing)")


SPEC = SchemeSpec("lowbw.train.schemes.async_diloco:AsyncDiLoCo",
                  keys=(WorldPeriod, OuterStep, AsyncEngine, AsyncDiLoCoKeys), check=check, tolerates_churn=True)
