"""``sync: qsr``: local SGD whose rounds follow the Quadratic Synchronization Rule (Gu, Lyu, Arora, Zhang & Huang,
"A Quadratic Synchronization Rule for Distributed Deep Learning", ICLR 2024).

Local SGD averages the workers' models every H steps; QSR sets each round's H from the learning rate at the
round's start, growing as the rate decays, ``H = max(H_base, floor((alpha / lr)^2))`` (their eq. 2), so that
the late, small-rate phase of a run talks less and, by their analysis, generalises better. Per step t (from 1):

1. if t starts a round (the step after the last round's end), the round ends at step
   ``t - 1 + H(lr_t)``, with ``lr_t`` this step's learning rate, ``H_base = world_period`` and
   ``alpha = qsr_alpha``; a rate of 0 never ends the round (the run's final synchronisation does);
2. every worker takes a local step;
3. at the round's last step the models are averaged over the world (local SGD's average).

``qsr_alpha = 0`` is local SGD with ``world_period`` (the twin the tests hold it to).
"""

from __future__ import annotations

import math

from lowbw.train.schemes.base import StepContext
from lowbw.train.schemes.synchronous import Action, Synchronous

__all__ = ["QSR", "period"]


def period(lr: float, base: int, alpha: float) -> float:
    """Steps in a round that starts at learning rate ``lr``: ``max(base, floor((alpha / lr)^2))``; ``base``
    where ``alpha`` is 0, unbounded (``inf``) where ``lr`` is 0."""
    if alpha == 0:
        return base
    if lr <= 0:
        return math.inf
    return max(base, math.floor((alpha / lr) ** 2))


class QSR(Synchronous):
    """Local steps; the models averaged at the end of each round, whose length QSR sets at its start."""

    def __init__(self, cfg, world, rep, opt=None, batches=None):
        super().__init__(cfg, world, rep, opt, batches)
        self.round_end: float = 0  # the step that ends the current round (0: none started; inf: never)
        self.lr = 0.0  # the learning rate of the step being taken (the StepContext's)

    def step(self, ctx: StepContext) -> None:
        self.lr = ctx.lr
        super().step(ctx)

    def action(self, step: int, progress: float) -> Action:
        if step > self.round_end:  # step 1: this step starts a round
            self.round_end = step - 1 + period(self.lr, self.cfg.world_period, self.cfg.qsr_alpha)
        return Action(None, "world" if step == self.round_end else None)  # step 3

    def state_dict(self) -> dict:
        """Synchronous's, and where the current round ends (a resumed run keeps its rounds)."""
        return {**super().state_dict(), "qsr_round_end": self.round_end}

    def load_state_dict(self, s: dict) -> None:
        super().load_state_dict(s)
        self.round_end = s["qsr_round_end"]
