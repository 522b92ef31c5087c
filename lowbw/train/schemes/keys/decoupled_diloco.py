"""Decoupled DiLoCo's keys and rules (:mod:`lowbw.train.schemes.decoupled_diloco`, ``sync: decoupled_diloco``):
the synchroniser's quorum and the weights of the learners' Deltas (Douillard et al. 2026)."""

from __future__ import annotations

from dataclasses import dataclass

from lowbw.train.config_key import ConfigError, key
from lowbw.train.faults import most_absent, parse_faults
from lowbw.train.schemes.keys.async_outer import AsyncEngine, check_engine
from lowbw.train.schemes.keys.diloco import OuterOptimizer, OuterStep
from lowbw.train.schemes.keys.synchronous import WorldPeriod
from lowbw.train.schemes.spec import SchemeSpec

__all__ = ["DecoupledKeys", "SPEC"]


@dataclass(frozen=True)
class DecoupledKeys:
    """The quorum K and the token weighting."""

    decoupled_quorum: int = key(0, "decoupled_diloco: K, the fewest learners' Deltas the synchroniser merges "
                                "(Douillard et al. 2026); 0: all workers (equal learners: DiLoCo)", unit="learners",
                                minimum=0, group="sync")
    decoupled_weighting: str = key("tokens", "decoupled_diloco: weight of a learner's Delta in a merge: tokens = "
                                   "its round's samples x samples per inner step (the paper's token weighting); "
                                   "uniform = the plain mean", enum=["tokens", "uniform"], group="sync")


def check(cfg) -> None:
    """A quorum that the learners present can meet; the engine's rules."""
    M = cfg.workers
    churn = parse_faults(cfg.faults, M)  # already checked by the rules across schemes
    if churn and (cfg.decoupled_quorum or M) > M - most_absent(churn):
        raise ConfigError("decoupled_quorum", f"{cfg.decoupled_quorum or M} learners can not meet while "
                                              f"{most_absent(churn)} of {M} are away (faults): set it lower")
    check_engine(cfg)
    if cfg.decoupled_quorum > M:
        raise ConfigError("decoupled_quorum", f"{cfg.decoupled_quorum} is above workers={M}")


SPEC = SchemeSpec("lowbw.train.schemes.decoupled_diloco:DecoupledDiLoCo",
                  keys=(WorldPeriod, OuterOptimizer, OuterStep, AsyncEngine, DecoupledKeys), check=check,
                  tolerates_churn=True)
