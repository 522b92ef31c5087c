"""The keys and rules of the event engine that the asynchronous outer schemes share
(:mod:`lowbw.train.schemes.async_outer`: ``async_diloco``, ``decoupled_diloco``, ``halos``); each of those
declares its server policy's own keys in its module here."""

from __future__ import annotations

from dataclasses import dataclass

from lowbw.train.config_key import ConfigError, key

__all__ = ["AsyncEngine", "check_engine"]


@dataclass(frozen=True)
class AsyncEngine:
    """The workers' rounds (DyLU) and the server's grace window."""

    async_dylu: bool = key(True, "async_diloco, decoupled_diloco, halos: Dynamic Local Updates (Liu et al. 2024): "
                           "worker i takes H_i = max(1, floor(H x min_j speed_j / speed_i)) inner steps per round "
                           "(worker_speeds), so a slow worker does fewer; false: H = world_period for all",
                           group="sync")
    async_grace_s: float = key(0.0, "async_diloco, halos: seconds a server waits after the first Delta of a batch "
                               "before sending the batch's workers its model (the asyncdiloco toy code's "
                               "max_wait_time); decoupled_diloco: the grace window after the quorum; 0: only "
                               "Deltas arriving at the same virtual instant", unit="s", minimum=0, group="sync")


def check_engine(cfg) -> None:
    """One event schedule on every process (clock=model off sim), dense Deltas, a fixed batch size."""
    s = cfg.sync
    if cfg.backend != "sim" and cfg.clock != "model":
        raise ConfigError("clock", f"sync={s} on {cfg.backend} needs clock=model (every process replays one event "
                                   "schedule)")
    if cfg.compressor != "none":
        raise ConfigError("compressor", f"sync={s} pushes dense Deltas to its server (got {cfg.compressor!r})")
    if cfg.dynamic_batch != "off":
        raise ConfigError("dynamic_batch", f"not supported with sync={s}")
