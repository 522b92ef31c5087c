"""The slow-down of a worker's compute when N workers share one machine's cores, from E8's probe's samples
(:mod:`lowbw.bench.e2e_probe`: each rank's compute times of the N at once, and rank 0's alone). E8's clock
calibration (:mod:`lowbw.bench.e8.calibration`) and ``lowbw advise --validate`` (:mod:`lowbw.advise.validate`)
both read it."""

from __future__ import annotations

import statistics
from typing import Any

__all__ = ["compute_scale_over"]


def compute_scale_over(samples: list[dict[str, Any]], period: int) -> float | None:
    """The compute factor of N workers that wait for each other once every ``period`` steps (a synchronous
    step: 1; DiLoCo or local SGD: H), from the probes' per-rank times of the N at once
    (``compute_together_by_rank_s``, ``[ranks][reps]``) and rank 0's alone:

        scale(H) = mean over windows w of H consecutive reps (cyclic) of max_i sum_{k in w} t_i,k / H
                   / mean(alone)

    Between synchronisations each worker runs on at its own pace, so a worker's slow step delays the others
    only by what its window's sum exceeds theirs; at H = 1 this is the mean of each rep's slowest worker, the
    synchronous step's factor. None where a probe has no per-rank times (files before them)."""
    if period < 1:
        raise ValueError(f"period {period}: must be >= 1")
    windows: list[float] = []
    alone: list[float] = []
    for s in samples:
        by_rank = s.get("compute_together_by_rank_s")
        if not by_rank:
            return None
        reps = len(by_rank[0])
        for start in range(reps):
            windows.append(max(sum(t[(start + k) % reps] for k in range(period)) for t in by_rank) / period)
        alone.extend(s["compute_alone_s"])
    return statistics.fmean(windows) / statistics.fmean(alone) if windows and alone else None
