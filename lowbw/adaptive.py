"""Adaptive compression under fluctuating bandwidth: choose the top-k density and the collective per step.

Follows Tyagi & Swany (IEEE BigData 2023, "Flexible Communication for Optimal Distributed Learning over
Unpredictable Networks"): candidate densities c in a geometric grid between ``c_low`` and ``c_high``
(scaling factor 3: 0.1, 0.033, 0.011, 0.0037, 0.001); for each, the aggregation collective is the cheapest
of AR-Top-k over ring, AR-Top-k over tree, and all-gather of (values, indices) under the alpha-beta model;
the density is chosen as the optimum of the two objectives (step time, 1 / compression gain), where
gain = ||C(g_e)||^2 / ||g_e||^2 is measured during training. We scalarise them as the time per unit of
gradient energy delivered, (t_compute + t_compress(c) + t_comm(c)) / gain(c): a step that carries a fraction
gain of the gradient's energy makes about that fraction of a dense step's progress. A new choice is made when the
link's bandwidth or latency, or the gain, moves by more than ``trigger`` (10%) since the last choice.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from lowbw.net.costmodel import LinkParams, art_topk_time, compressed_allgather_time

__all__ = ["candidate_densities", "collective_for", "Choice", "AdaptiveTopK"]


def candidate_densities(c_low: float = 0.001, c_high: float = 0.1, factor: float = 3.0) -> list[float]:
    """``c_high, c_high/factor, ...`` down to ``c_low`` (inclusive), e.g. [0.1, 0.0333, 0.0111, 0.0037, 0.001]."""
    if not 0 < c_low <= c_high <= 1:
        raise ValueError(f"need 0 < c_low <= c_high <= 1, got c_low={c_low}, c_high={c_high}")
    if factor <= 1:
        raise ValueError(f"factor must be > 1, got {factor}")
    steps = int(math.floor(math.log(c_high / c_low) / math.log(factor) + 1e-9))
    if steps == 0:
        return [c_high]
    return [c_high / factor**i for i in range(steps)] + [c_low]  # the last step is clamped to c_low


def collective_for(nbytes: float, density: float, world_size: int, link: LinkParams) -> tuple[str, float]:
    """The cheapest way to aggregate top-k of an ``nbytes`` dense fp32 gradient at ``density``: one of
    ``artopk-ring``, ``artopk-tree``, ``allgather`` (values + int32 indices from every rank), and its time (s)."""
    options = {
        "artopk-ring": art_topk_time(nbytes, density, world_size, link, base="ring"),
        "artopk-tree": art_topk_time(nbytes, density, world_size, link, base="tree"),
        "allgather": compressed_allgather_time(2 * nbytes * density, world_size, link),
    }
    name = min(options, key=lambda k: (options[k], k))
    return name, options[name]


@dataclass(frozen=True)
class Choice:
    density: float
    collective: str
    t_comm_s: float
    t_compress_s: float
    gain: float
    score: float


@dataclass
class AdaptiveTopK:
    """Multi-objective choice of the top-k density c.

    Objective per candidate: F(c) = (t_compute + t_compress(c) + t_comm(c)) / gain(c), seconds per unit of
    gradient energy delivered (lower is better). Candidates whose gain is not yet measured are explored
    first (one step each).
    """

    nbytes: float
    world_size: int
    densities: list[float] = field(default_factory=candidate_densities)
    t_compute_s: float = 0.0
    trigger: float = 0.10
    gains: dict[float, float] = field(default_factory=dict)
    t_compress: dict[float, float] = field(default_factory=dict)
    _last_link: LinkParams | None = None
    _last_gain: float | None = None
    current: Choice | None = None

    def observe(self, density: float, gain: float, t_compress_s: float) -> None:
        """Record the measured compression gain in [0, 1] and (de)compression time (s) at ``density``."""
        if not 0 <= gain <= 1 + 1e-6:
            raise ValueError(f"gain must be in [0, 1], got {gain}")
        self.gains[density] = gain
        self.t_compress[density] = t_compress_s

    def _changed(self, link: LinkParams) -> bool:
        if self.current is None or self._last_link is None:
            return True
        old = self._last_link
        if abs(link.bandwidth_bps - old.bandwidth_bps) > self.trigger * old.bandwidth_bps:
            return True
        if abs(link.alpha_s - old.alpha_s) > self.trigger * max(old.alpha_s, 1e-6):
            return True
        g = self.gains.get(self.current.density)
        if g is None or self._last_gain is None:
            return False
        return abs(g - self._last_gain) > self.trigger * self._last_gain

    def choose(self, link: LinkParams) -> Choice:
        """The density/collective to use now (re-evaluated only on a >trigger change of link or gain)."""
        unexplored = [c for c in self.densities if c not in self.gains]
        if unexplored:
            c = unexplored[0]
            name, t = collective_for(self.nbytes, c, self.world_size, link)
            return Choice(c, name, t, 0.0, float("nan"), float("nan"))
        if not self._changed(link):
            assert self.current is not None
            return self.current
        rows = []
        for c in self.densities:
            name, t = collective_for(self.nbytes, c, self.world_size, link)
            rows.append((c, name, t, self.t_compress[c], max(self.gains[c], 1e-12)))
        scored = [Choice(c, name, t, tc, g, (self.t_compute_s + tc + t) / g) for c, name, t, tc, g in rows]
        self.current = min(scored, key=lambda ch: (ch.score, -ch.density))
        self._last_link = link
        self._last_gain = self.current.gain
        return self.current

    @staticmethod
    def gain_of(kept_sq_norm: float, total_sq_norm: float) -> float:
        """Compression gain ||C(g_e)||^2 / ||g_e||^2 (1 for an all-zero gradient)."""
        return 1.0 if total_sq_norm <= 0 or not math.isfinite(total_sq_norm) else min(1.0, kept_sq_norm / total_sq_norm)
