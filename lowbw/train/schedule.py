"""Learning-rate schedules (step, cosine, warm-up, linear scaling), the dynamic batch size, and the thesis'
household effective batch size.

Everything is a function of *samples processed* (over all workers), not of steps, so that a schedule means
the same thing when the batch size changes during the run (dynamic batch size) or differs between runs.
"""

from __future__ import annotations

import math

__all__ = ["LRSchedule", "dynamic_factor", "dynamic_batch", "household_local_batch", "household_effective_batch"]


class LRSchedule:
    """``lr(samples)``: warm-up, then step decay / cosine / constant over the run's total samples."""

    def __init__(self, cfg, n_train: int, total_samples: int):
        self.kind = cfg.lr_schedule
        self.target = cfg.lr_target()
        self.milestones = [m * total_samples for m in cfg.lr_milestones]
        self.gamma = cfg.lr_gamma
        self.total = max(1, total_samples)
        self.warm = cfg.warmup_steps * cfg.global_batch if cfg.warmup_steps else cfg.warmup_epochs * n_train
        self.floor = cfg.lr_min
        if cfg.warmup_from >= 0:
            self.start = cfg.warmup_from
        elif cfg.lr_scaling in ("linear", "sqrt") and self.target > cfg.lr:
            self.start = cfg.lr  # Goyal et al.: from the unscaled lr to the scaled one
        else:
            self.start = self.target / 10

    def __call__(self, samples: float) -> float:
        if self.warm and samples < self.warm:
            return self.start + (self.target - self.start) * samples / self.warm
        if self.kind == "constant":
            return self.target
        if self.kind == "step":
            return self.target * self.gamma ** sum(samples >= m for m in self.milestones)
        if self.kind == "cosine":
            w = self.warm
            p = min(1.0, max(0.0, (samples - w) / max(1.0, self.total - w)))
            return self.floor + (self.target - self.floor) * 0.5 * (1 + math.cos(math.pi * p))
        raise ValueError(self.kind)


def dynamic_factor(e0: float, ee: float, rule: str = "text") -> int:
    """Batch multiplier from the initial error E0 and the current error Ee (draft paper, 2.5/2.5.1).

    ``text`` (default): 2^floor(log2(E0/Ee)) — double when the error has halved, double again when it has
    quartered, as the draft's prose says. ``literal``: max(1, 2^(floor(E0/Ee) - 1)), the printed formula,
    which disagrees with the prose (E0/Ee = 3 gives 4, E0/Ee = 4 gives 8). Never below 1.
    """
    if not (e0 > 0 and ee > 0) or not math.isfinite(e0 / ee):
        return 1
    r = e0 / ee
    if rule == "text":
        return 2 ** max(0, math.floor(math.log2(r) + 1e-12)) if r >= 1 else 1
    if rule == "literal":
        return max(1, 2 ** (math.floor(r + 1e-12) - 1)) if r >= 1 else 1
    raise ValueError(f"dynamic batch rule {rule!r} is unknown")


def dynamic_batch(b0: int, e0: float, ee: float, beta: int, rule: str = "text", workers: int = 1) -> int:
    """B_k = min(beta, b0 x factor), rounded down to a multiple of ``workers`` (every worker gets B/M)."""
    b = min(beta, b0 * dynamic_factor(e0, ee, rule))
    return max(workers, b - b % workers)


def household_local_batch(effective: float, workers: int, households: int, world_period: int) -> int:
    """Thesis eq. (A.3): B_l = B_e L_W H / (M (H + L_W - 1)), rounded to the nearest integer (>= 1)."""
    H, LW, M = households, world_period, workers
    return max(1, round(effective * LW * H / (M * (H + LW - 1))))


def household_effective_batch(local: float, workers: int, households: int, world_period: int) -> float:
    """Thesis eq. (A.2) rearranged: B_e = B_l M (H + L_W - 1) / (H L_W)."""
    H, LW, M = households, world_period, workers
    return local * M * (H + LW - 1) / (H * LW)
