"""NoLoCo's rules (:mod:`lowbw.train.schemes.noloco`, ``sync: noloco``): it reads ``world_period`` and the outer
step's rate and momentum (DiLoCo's key sets) and declares no keys of its own."""

from __future__ import annotations

from lowbw.train.config_key import ConfigError
from lowbw.train.schemes.keys.diloco import OuterStep
from lowbw.train.schemes.keys.synchronous import WorldPeriod, dense_only
from lowbw.train.schemes.spec import SchemeSpec

__all__ = ["SPEC"]


def check(cfg) -> None:
    """Pairs of workers (an even number), and no compressor (the pairs swap dense models)."""
    M = cfg.workers
    if M < 2 or M % 2:
        raise ConfigError("workers", f"noloco pairs the workers: needs an even number >= 2, got {M}")
    dense_only(cfg)


SPEC = SchemeSpec("lowbw.train.schemes.noloco:NoLoCo", keys=(WorldPeriod, OuterStep), check=check)
