"""DiLoCo's keys and rules (:mod:`lowbw.train.schemes.diloco`, ``sync: diloco``): the outer step (its rate and
momentum shared with NoLoCo and the asynchronous outer schemes, its optimiser with DecoupledDiLoCo) and
Streaming DiLoCo's fragments, delay, mixing and overlap."""

from __future__ import annotations

from dataclasses import dataclass

from lowbw.comm.algorithms import OUTER_OPTIMIZERS
from lowbw.train.config_key import ConfigError, key
from lowbw.train.schemes.keys.sparta import SpartaKeys
from lowbw.train.schemes.keys.synchronous import WorldPeriod
from lowbw.train.schemes.spec import SchemeSpec

__all__ = ["OuterStep", "OuterOptimizer", "DiLoCoKeys", "FAMILY", "STREAMING", "family", "SPEC"]

FAMILY = "diloco"  # the advisor's family of its runs with whole outer steps (E12's trends, Charles et al.'s law)
STREAMING = "streaming"  # ... and of those in fragments (Streaming DiLoCo, diloco_fragments > 1)


@dataclass(frozen=True)
class OuterStep:
    """The outer step's rate and momentum (every scheme with an outer step)."""

    outer_lr: float = key(0.7, "diloco, noloco: outer learning rate (sgd, outer_lr 1, outer_momentum 0 = local SGD)",
                          exclusive_minimum=0, group="sync")
    outer_momentum: float = key(0.9, "diloco, noloco: outer momentum", minimum=0, maximum=0.999999, group="sync")


@dataclass(frozen=True)
class OuterOptimizer:
    """Which optimiser the outer step is."""

    outer_optimizer: str = key("nesterov", "diloco: the outer optimiser on the pseudo-gradient, SGD with Nesterov "
                               "momentum (the paper's) or plain SGD with momentum", enum=list(OUTER_OPTIMIZERS),
                               group="sync")


@dataclass(frozen=True)
class DiLoCoKeys:
    """Streaming DiLoCo's fragments and overlap, and the overlapped variants of whole outer steps."""

    diloco_fragments: int = key(1, "diloco: F fragments of the model (consecutive parameter tensors of near-equal "
                                "size); fragment f has its outer step at inner steps t with t = (f + 1) H / F "
                                "(mod H), so the link carries one fragment every H/F steps, not the whole "
                                "model every H (Streaming DiLoCo, Douillard et al. 2025); 1: plain DiLoCo",
                                minimum=1, group="sync")
    diloco_delay: int = key(0, "diloco: tau, inner steps between the start of a fragment's exchange and the outer "
                            "update it brings (its communication overlaps tau steps of compute; Streaming "
                            "DiLoCo's overlap); 0: applied at once", unit="steps", minimum=0, group="sync")
    diloco_fragment_layout: str = key("contiguous", "diloco, F > 1: contiguous = F near-equal contiguous ranges "
                                      "of the flat row (tensors split at row boundaries); strided = Streaming "
                                      "DiLoCo's fragments (Douillard et al. 2025): whole layers, layer j in "
                                      "fragment j mod F", enum=["contiguous", "strided"], group="sync")
    diloco_alpha: float = key(0.0, "diloco: mixing factor alpha of a landed fragment, theta <- alpha theta_local + "
                              "(1 - alpha) theta_global (Streaming DiLoCo; torchft's fragment_update_alpha, default "
                              "0; the paper's runs 0.5); 0: replace", minimum=0, maximum=0.999999, group="sync")
    diloco_schedule: str = key("start_at_slot", "diloco with diloco_delay tau: start_at_slot = a fragment's "
                               "exchange starts after its sync step t and lands after t + tau; land_at_slot = it "
                               "starts tau steps before its sync step and lands at it (torchft's "
                               "DiLoCo(fragment_sync_delay))", enum=["start_at_slot", "land_at_slot"],
                               group="sync")
    diloco_overlap: str = key("none", "diloco: delayed = one-step-delayed outer steps (PCCL's asynchronous "
                              "DiLoCo): the exchange of boundary k runs during the next H inner steps and its outer "
                              "step lands at boundary k + 1; eager = eager updates (Kale et al. 2025): the same "
                              "overlap, each worker's own fresh pseudo-gradient replacing its stale share of the "
                              "delayed average at once; both need diloco_fragments 1, diloco_delay 0, diloco_alpha 0",
                              enum=["none", "delayed", "eager"], group="sync")


def check(cfg) -> None:
    """Fragments that divide H, a delay below H, and overlapped whole outer steps only without fragments."""
    if cfg.diloco_overlap != "none" and (cfg.diloco_fragments != 1 or cfg.diloco_delay or cfg.diloco_alpha):
        raise ConfigError("diloco_overlap", f"{cfg.diloco_overlap} overlaps whole outer steps: needs "
                                            "diloco_fragments 1, diloco_delay 0 and diloco_alpha 0")
    if cfg.world_period % cfg.diloco_fragments:
        raise ConfigError("diloco_fragments", f"{cfg.diloco_fragments} does not divide world_period="
                                              f"{cfg.world_period} (a fragment every H/F inner steps)")
    if cfg.diloco_delay >= cfg.world_period:
        raise ConfigError("diloco_delay", f"{cfg.diloco_delay}: must be below world_period={cfg.world_period} "
                                          "(a fragment's update lands before its next exchange)")


def family(settings) -> str:
    """The advisor's family of a run (or preset) with ``settings``: Streaming DiLoCo's with fragments, else
    DiLoCo's."""
    return STREAMING if int(settings.get("diloco_fragments", 1) or 1) > 1 else FAMILY


SPEC = SchemeSpec("lowbw.train.schemes.diloco:DiLoCo",
                  keys=(WorldPeriod, OuterOptimizer, OuterStep, DiLoCoKeys, SpartaKeys), check=check,
                  pseudo_gradient=True, advised=True, family=family)
