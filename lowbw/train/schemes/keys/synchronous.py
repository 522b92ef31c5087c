"""The synchronous schemes' keys and rules (:mod:`lowbw.train.schemes.synchronous`): ``sync``, ``local``,
``post_local`` and ``hierarchical``, and the key that every periodic scheme shares (``world_period``)."""

from __future__ import annotations

from dataclasses import dataclass

from lowbw.train.config_key import ConfigError, key
from lowbw.train.schemes.spec import SchemeSpec

__all__ = ["WorldPeriod", "PostLocal", "Households", "dense_only", "SYNC", "LOCAL", "POST_LOCAL", "HIERARCHICAL"]

_MODULE = "lowbw.train.schemes.synchronous"


@dataclass(frozen=True)
class WorldPeriod:
    """Steps between world synchronisations (every periodic scheme's)."""

    world_period: int = key(1, "L_W: steps between world synchronisations (local, post_local, hierarchical; "
                            "diloco, noloco, async_diloco, decoupled_diloco, halos: H, inner steps per outer step)",
                            unit="steps", minimum=1, group="sync")


@dataclass(frozen=True)
class PostLocal:
    """Post-local SGD's switch (Lin et al. 2020)."""

    local_start: float = key(0.5, "post_local: fraction of training after which local SGD starts (Lin et al.: at "
                             "the first lr decay)", unit="fraction of the run's samples", minimum=0, maximum=1,
                             group="sync")


@dataclass(frozen=True)
class Households:
    """The hierarchy of households and neighbourhoods (thesis ch. 4.2), its data shards and its batch rule."""

    households: int = key(0, "H: households (divides workers); hierarchical only", minimum=0, group="sync")
    household_period: int = key(1, "L_H: steps between household synchronisations (1: gradient averaging in "
                                "the household every step)", unit="steps", minimum=1, group="sync")
    neighbourhoods: int = key(0, "NB: neighbourhoods (divides households; 0: none)", minimum=0, group="sync")
    neighbourhood_period: int = key(0, "L_N: steps between neighbourhood synchronisations", unit="steps",
                                    minimum=0, group="sync")
    household_shards: int = key(0, "hierarchical: household shards S_H (divides households; 0: = households, "
                                "i.e. disjoint)", minimum=0, group="data")
    effective_batch_size: int = key(0, "hierarchical: target effective batch size B_e; the local batch is "
                                    "B_e L_W H / (M (H + L_W - 1)) rounded (thesis Appendix A); 0: off",
                                    unit="samples", minimum=0, group="optim")


def dense_only(cfg) -> None:
    """A scheme that averages models (or pushes to a server) densely takes no compressor."""
    if cfg.compressor != "none":
        raise ConfigError("compressor", f"sync={cfg.sync} averages models / pushes to a parameter server densely; "
                                        "compressors apply to gradient synchronisation (sync, post_local, "
                                        "hierarchical with household_period=1)")


def check_hierarchical(cfg) -> None:
    """Households dividing the workers, neighbourhoods dividing the households, L_H <= L_N <= L_W, the household
    shards, one way to give the batch, and compression only of the per-step household gradient."""
    M, a, H = cfg.workers, cfg.assignment, cfg.households
    if H < 1 or M % H:
        raise ConfigError("households", f"hierarchical needs households H dividing workers={M} (got {H})")
    if a not in ("disjoint", "household"):
        raise ConfigError("assignment", "hierarchical uses household shards: assignment must be disjoint or household")
    SH = cfg.household_shards or H
    if H % SH:
        raise ConfigError("household_shards", f"S_H={SH} must divide households={H}")
    if a == "disjoint" and SH != H:
        raise ConfigError("household_shards", "S_H < H overlaps households: use assignment=household")
    NB = cfg.neighbourhoods
    if NB:
        if H % NB or NB >= H:
            raise ConfigError("neighbourhoods", f"NB={NB} must divide households={H} and be smaller")
        if not cfg.neighbourhood_period:
            raise ConfigError("neighbourhood_period", "set L_N when neighbourhoods > 0")
        if not (cfg.household_period <= cfg.neighbourhood_period <= cfg.world_period):
            raise ConfigError("neighbourhood_period", f"need L_H <= L_N <= L_W (got {cfg.household_period}, "
                                                      f"{cfg.neighbourhood_period}, {cfg.world_period})")
    elif cfg.neighbourhood_period:
        raise ConfigError("neighbourhood_period", "only used with neighbourhoods > 0")
    if cfg.household_period > cfg.world_period:
        raise ConfigError("household_period", f"L_H={cfg.household_period} > L_W={cfg.world_period}")
    if cfg.effective_batch_size and (cfg.batch_size or cfg.local_batch_size):
        raise ConfigError("effective_batch_size", "set either effective_batch_size or batch_size/local_batch_size")
    if cfg.compressor != "none" and cfg.household_period != 1:
        raise ConfigError("compressor", "hierarchical compresses the per-step household gradient average: needs "
                                        "household_period=1")


def hierarchy_groups(cfg) -> list[str]:
    """The world, the households, and the neighbourhoods where there are any."""
    return ["world", "household", *(["neighbourhood"] if cfg.neighbourhoods else [])]


SYNC = SchemeSpec(f"{_MODULE}:SyncSGD", ddp_hook=True, compress_updates=True, advised=True)
LOCAL = SchemeSpec(f"{_MODULE}:LocalSGD", keys=(WorldPeriod,), check=dense_only, advised=True)
POST_LOCAL = SchemeSpec(f"{_MODULE}:PostLocalSGD", keys=(WorldPeriod, PostLocal))
HIERARCHICAL = SchemeSpec(f"{_MODULE}:Hierarchical", keys=(WorldPeriod, Households), check=check_hierarchical,
                          groups=hierarchy_groups, advised=True)
