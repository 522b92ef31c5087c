"""Decoupled DiLoCo (``sync: decoupled_diloco``): learners that never wait for each other, a synchroniser
that merges their outer updates with a minimum quorum, a grace window and per-token weights.

Douillard, Rush, Donchev et al. 2026, "Decoupled DiLoCo for Resilient Distributed Pre-training",
arXiv:2604.21428 (no public code). On the event engine of :mod:`.async_outer` (rounds, links, clock) with one
synchroniser:

1. learner i takes H_i inner steps from the synchroniser's model (H, or DyLU's H_i with ``async_dylu``) and
   pushes Delta_i = start_i - theta_i with its token count n_i (samples of the round) and steps s_i;
2. the synchroniser holds the Deltas that arrive; once it holds K = ``decoupled_quorum`` of them (0: all M
   learners) it opens the grace window: every Delta arriving up to ``async_grace_s`` seconds later joins;
3. at the window's end it merges the set S it holds: Delta = sum_{i in S} w_i Delta_i with w_i proportional
   to n_i x (n_i / s_i), tokens times tokens per step (``decoupled_weighting: tokens``; ``uniform``: w_i =
   1 / |S|); equal weights are summed in arrival order and divided by |S|, as DiLoCo's mean;
4. theta <- OuterOpt(theta, Delta): DiLoCo's outer optimiser (``outer_optimizer``, ``outer_lr``,
   ``outer_momentum``; :class:`lowbw.train.optim.FlatOptimizer`, the object DiLoCo steps); every learner of
   S is sent theta and starts its next round from it. Learners outside S go on with their rounds; their
   Deltas, taken from an older theta, join a later merge.

Reduction (``tests/train/test_async_outer.py``): equal learners on equal links with K = M and DyLU off
arrive together at every round; step 3 is the mean and step 4 DiLoCo's outer step, so the run's training
metrics are DiLoCo's, identical; its clock and bytes differ by design (a synchroniser's star, not the run's
collective).

Variants (named): the paper merges per fragment (Streaming DiLoCo's) on a schedule of every H steps, and
adapts its grace window; here the whole model is one fragment, a merge is triggered by the quorum, and the
grace window is fixed. The weight n_i (n_i / s_i) is our reading of "tokens processed times tokens-per-step
efficiency"; with one batch size it is proportional to the tokens of the round. The paper's
radial-directional averaging of the merged update is not reproduced.
"""

from __future__ import annotations

import torch

from lowbw.train.optim import FlatOptimizer
from lowbw.train.schemes.async_outer import AsyncOuter, ServerPort, uses_worker_links
from lowbw.train.schemes.parameter_server import server_link

__all__ = ["DecoupledDiLoCo", "merge_deltas"]


def merge_deltas(deltas: list[torch.Tensor], scores: list[float]) -> torch.Tensor:
    """Step 3: sum_i w_i Delta_i with w_i = scores_i / sum(scores); equal scores: the sum in order / n."""
    if len(set(scores)) == 1:
        acc = deltas[0].clone()
        for d in deltas[1:]:
            acc.add_(d)
        if len(deltas) > 1:
            acc.div_(len(deltas))
        return acc
    total = sum(scores)
    acc = deltas[0] * (scores[0] / total)
    for d, s in zip(deltas[1:], scores[1:]):
        acc.add_(d, alpha=s / total)
    return acc


class DecoupledDiLoCo(AsyncOuter):
    """A synchroniser merging at a quorum after a grace window (module docstring)."""

    SERVER_STATE = ("theta", "held", "window_open")
    SERVER_OPTIMIZERS = ("outer",)

    def __init__(self, cfg, world, rep, opt=None, batches=None):
        super().__init__(cfg, world, rep, opt, batches)
        self.port = ServerPort(cfg, lambda t: server_link(cfg, t), uses_worker_links(cfg, server_link(cfg)))
        self.theta = rep.params[0: 1].clone()  # the synchroniser's model, [1, P] (FlatOptimizer's rows)
        self.outer = FlatOptimizer("sgd", (1, rep.P), rep.device, momentum=cfg.outer_momentum,
                                   nesterov=cfg.outer_optimizer == "nesterov", weight_decay=0.0)
        self.quorum = cfg.decoupled_quorum or self.M
        self.held: list[tuple[int, torch.Tensor, float]] = []  # (learner, Delta_i, its weight score)
        self.window_open = False

    def port_of(self, i: int) -> ServerPort:
        return self.port

    def ports(self) -> list[ServerPort]:
        return [self.port]

    def model_for(self, server: int) -> torch.Tensor:
        return self.theta[0]

    @property
    def global_row(self) -> torch.Tensor:
        return self.theta[0]

    def arrive(self, i: int, delta: torch.Tensor, t: float) -> None:
        """Step 2: hold Delta_i; at the quorum, open the grace window."""
        w = self.workers[i]
        score = 1.0 if self.cfg.decoupled_weighting == "uniform" else w.samples * (w.samples / max(w.steps, 1))
        self.held.append((i, delta, score))
        if not self.window_open and len(self.held) >= self.quorum:
            self.window_open = True
            self.push_event(t + self.grace_s(), "close", -1, 0)

    def close_batch(self, server: int, t: float) -> None:
        """Steps 3-4 at the window's end."""
        self.window_open = False
        self.merge(t)

    def merge(self, t: float) -> None:
        if not self.held:
            return
        who = [i for i, _, _ in self.held]
        delta = merge_deltas([d for _, d, _ in self.held], [s for _, _, s in self.held])
        self.held = []
        self.outer.step(self.theta, delta.unsqueeze(0), self.cfg.outer_lr)
        self.version += 1
        self.release(0, who, t)

    def flush(self, t: float) -> None:
        """The run's end: merge what is held, quorum or not."""
        self.merge(t)
