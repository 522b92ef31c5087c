"""SPARTA's keys and rules (:mod:`lowbw.train.schemes.sparta`, ``sync: sparta``; DiLoCo composes with it)."""

from __future__ import annotations

from dataclasses import dataclass

from lowbw.train.config_key import ConfigError, key
from lowbw.train.schemes.keys.synchronous import dense_only
from lowbw.train.schemes.spec import SchemeSpec

__all__ = ["SpartaKeys", "SPEC"]


@dataclass(frozen=True)
class SpartaKeys:
    """The fraction of the parameters averaged after every step (Beton et al. 2025)."""

    sparta_density: float = key(0.0, "SPARTA (Beton et al. 2025): fraction p of the parameters averaged over the "
                                "world after every step (the same random indices on every worker, from the seed); "
                                "needs sync=sparta (alone) or sync=diloco (composed); their runs: 0.0005-0.005; "
                                "0: off", unit="fraction of the parameters", minimum=0, maximum=1, group="sync")


def check(cfg) -> None:
    """A density to average at, and no compressor (the average is dense)."""
    if cfg.sparta_density <= 0:
        raise ConfigError("sparta_density", "sync=sparta needs a density p in (0, 1] (e.g. 0.001)")
    dense_only(cfg)


# local steps only; its add-on (lowbw.train.schemes.sparta.Sparta) is the communication
SPEC = SchemeSpec("lowbw.train.schemes.synchronous:LocalOnly", keys=(SpartaKeys,), check=check)
