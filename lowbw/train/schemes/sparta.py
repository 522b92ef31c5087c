"""SPARTA, sparse parameter averaging (Beton, Baioumy, van der Ouderaa, Reed, Howes, Cheema & Vrabie 2025,
"SPARTA: Distributed Training with Sparse Parameter Averaging", ICLR 2025 workshop; exo labs): after every
step each worker averages a small random part of its parameters with every other worker.

With P parameters and density p = ``sparta_density``, after each step t (from 1):

1. I_t = the first k = max(1, round(p P)) entries of a random permutation of {0, ..., P-1} drawn from the
   run's seed and t (the same on every worker: no indices are sent), sorted;
2. theta^m[I_t] <- (1/M) sum_m theta^m[I_t]   (one all-reduce of k fp32 values per worker).

The paper's runs average p = 0.05%-0.5% of the parameters per step (0.1% sends 1000x less than per-step
averaging) and end with one full average; ``sync: sparta`` does the same (the engine's final
synchronisation), and is evaluated meanwhile on worker 0's model (its replicas never agree; the paper
reports a node's model). At p = 1 it is model averaging after every step (``sync: local`` with
``world_period: 1``), bit for bit. With ``sync: diloco`` it composes with DiLoCo's outer steps (the paper's
SPARTA + DiLoCo): the sparse averages run between them.

Variant (named, not the reference's draw): EXO Gym (exo-explore/gym, ``exogym/strategy/sparta.py``,
``RandomIndexSelector``), the authors' code, draws a Bernoulli(p) mask per parameter tensor on rank 0 and
broadcasts it (a random number of entries, about p P, and a broadcast of the mask each step); ours takes
exactly k = round(p P) entries of the flat parameter vector from a seed every worker shares (nothing
broadcast; the bytes are the same each step). The averaging itself matches the reference to rounding.
"""

from __future__ import annotations

import torch

from lowbw.train.assign import seed_for
from lowbw.train.schemes.addons import AddOnResult, mean_rows

__all__ = ["Sparta", "indices"]


def indices(seed: int, step: int, P: int, k: int) -> torch.Tensor:
    """Step 1 of the module docstring: I_t, sorted (CPU, int64)."""
    g = torch.Generator().manual_seed(seed_for(seed, "sparta", step))
    return torch.randperm(P, generator=g)[:k].sort().values


class Sparta:
    """Steps 1-2 of the module docstring after every step."""

    def __init__(self, cfg, world, rep, opt, direct: bool):
        self.world, self.rep, self.direct, self.seed = world, rep, direct, cfg.seed
        self.k = max(1, round(cfg.sparta_density * rep.P))
        self.evaluate_replica0 = cfg.sync == "sparta"

    @staticmethod
    def applies(cfg) -> bool:
        return cfg.sparta_density > 0

    def after_step(self, step: int) -> AddOnResult:
        P = self.rep.P
        idx = indices(self.seed, step, P, self.k).to(self.rep.params.device)
        rows = self.rep.params[:, idx]  # [R, k], a copy
        ex = mean_rows(self.world, list(rows), self.direct)
        for i, v in enumerate(ex.outputs):
            self.rep.params[i, idx] = v
        return AddOnResult([ex], self.k == P)

    def state_dict(self) -> dict:
        return {}  # I_t comes from (seed, t)

    def load_state_dict(self, s: dict) -> None:
        pass
