"""HALoS's keys and rules (:mod:`lowbw.train.schemes.halos`, ``sync: halos``): regions with their local servers,
the local servers' Delayed Nesterov, their sends to the global server and the links inside a region (Kim et al.
2025)."""

from __future__ import annotations

from dataclasses import dataclass

from lowbw.train.config_key import ConfigError, key
from lowbw.train.schemes.keys.async_outer import AsyncEngine, check_engine
from lowbw.train.schemes.keys.diloco import OuterStep
from lowbw.train.schemes.keys.synchronous import WorldPeriod
from lowbw.train.schemes.spec import SchemeSpec

__all__ = ["HalosKeys", "SPEC"]


@dataclass(frozen=True)
class HalosKeys:
    """Regions, local servers, their merge of the global model, the links inside a region."""

    halos_regions: int = key(1, "halos: R regions of workers/R consecutive workers, each with its local "
                             "parameter server (Kim et al. 2025); the global server sits with region 0's",
                             minimum=1, group="sync")
    halos_local_lr: float = key(0.7, "halos: a local server's Delayed Nesterov rate eta_l on its workers' Deltas "
                                "(their script: 0.2 x buffer 16)", exclusive_minimum=0, group="sync")
    halos_local_momentum: float = key(0.9, "halos: a local server's momentum beta_l", minimum=0,
                                      maximum=0.999999, group="sync")
    halos_local_buffer: int = key(0, "halos: a local server's Delayed Nesterov buffer (0: workers per region)",
                                  unit="Deltas", minimum=0, group="sync")
    halos_global_buffer: int = key(0, "halos: the global server's Delayed Nesterov buffer (0: regions); its rate "
                                   "and momentum are outer_lr, outer_momentum", minimum=0, group="sync")
    halos_accumulation: int = key(0, "halos: K, updates a local server applies between its sends to the global "
                                  "server (0: workers per region)", minimum=0, group="sync")
    halos_merge_weight: float = key(0.25, "halos: alpha, a local server's model after the global model arrives: "
                                    "(1 - alpha) local + alpha global (their model_merge_weight; their script "
                                    "0.25)", exclusive_minimum=0, maximum=1, group="sync")
    halos_region_mbit: float = key(0.0, "halos: bandwidth (Mbit/s) of a local server's port inside its region "
                                   "(0: bandwidth_mbit); the global link is bandwidth_mbit", minimum=0,
                                   unit="Mbit/s", group="sync")
    halos_region_latency_ms: float = key(-1.0, "halos: one-way latency (ms) inside a region (-1: latency_ms)",
                                         unit="ms", group="sync")


def check(cfg) -> None:
    """The engine's rules; regions that divide the workers; a region latency >= 0 or -1."""
    check_engine(cfg)
    if cfg.workers % cfg.halos_regions:
        raise ConfigError("halos_regions", f"{cfg.halos_regions} does not divide workers={cfg.workers}")
    if cfg.halos_region_latency_ms < 0 and cfg.halos_region_latency_ms != -1:
        raise ConfigError("halos_region_latency_ms", f"{cfg.halos_region_latency_ms}: >= 0, or -1 (latency_ms)")


SPEC = SchemeSpec("lowbw.train.schemes.halos:HALoS", keys=(WorldPeriod, OuterStep, AsyncEngine, HalosKeys),
                  check=check, tolerates_churn=True)
