"""What one process's replicas communicate in a step, through the world's collectives.

A :class:`Synchroniser` owns the run's compressor, one compressor State per local replica (error-feedback
residuals, random streams: part of a checkpoint) and the tensors gradients are aggregated as (each parameter
tensor, or the flat gradient). It aggregates gradients and averages models at a level (world, neighbourhood,
household) and returns the world's :class:`~lowbw.train.world.Exchange` of it; with ``adaptive: moo`` it
also chooses the top-k density of each step (:meth:`Synchroniser.adapt`).
"""

from __future__ import annotations

import math

import torch

from lowbw.adaptive import AdaptiveTopK, candidate_densities
from lowbw.train.sync import Action, Scheme, aggregate_rank, average_rank, make_compressor, make_states
from lowbw.train.world import Exchange, link_for

__all__ = ["Synchroniser"]


class Synchroniser:
    def __init__(self, cfg, world, rep):
        self.cfg, self.world, self.rep = cfg, world, rep
        self.scheme = Scheme(cfg)
        self.comp = make_compressor(cfg)
        self.states = make_states(cfg, world.ranks)
        gran = cfg.granularity if cfg.granularity != "auto" else ("flat" if self.comp is None else "layer")
        self.chunks = rep.chunks(gran)
        # sim, dense: one rank-ordered sum per group instead of the collective's threads (same records)
        self.direct = world.kind == "sim" and cfg.sim_dense == "direct"
        self.policy = None
        if cfg.adaptive == "moo":
            self.policy = AdaptiveTopK(nbytes=rep.P * 4, world_size=cfg.workers,
                                       densities=candidate_densities(cfg.adaptive_c_low, cfg.adaptive_c_high))

    def action(self, step: int, progress: float) -> Action:
        """The scheme's communication after step ``step`` (from 1) at ``progress`` = samples / total."""
        return self.scheme.action(step, progress)

    @property
    def density(self) -> float | None:
        """The top-k density the adaptive policy chose last (None without ``adaptive``)."""
        return None if self.policy is None else self._sparse().ratio

    def _sparse(self):
        return getattr(self.comp, "inner", self.comp)  # the top-k inside error feedback

    def aggregate(self, level: str) -> Exchange:
        """Average every local replica's gradient row over its group at ``level`` (compressed if configured);
        ``Exchange.outputs`` are the averaged rows."""
        rep, comp = self.rep, self.comp
        if comp is None and self.direct:
            return self.world.dense_mean(level, list(rep.grads), [k * 4 for _, _, k, _ in self.chunks])

        def work(i, coll):
            return aggregate_rank(rep.grads[i], self.chunks, coll, comp, self.states[i])

        return self.world.exchange(level, work)

    def average(self, level: str) -> Exchange:
        """Replace every local replica's parameters (and BatchNorm statistics, with ``average_buffers``) by
        their dense average over its group at ``level``."""
        rep = self.rep
        with_buffers = self.cfg.average_buffers and rep.Q > 0

        def row(i):
            return torch.cat([rep.params[i], rep.buffers[i]]) if with_buffers else rep.params[i]

        if self.direct:
            ex = self.world.dense_mean(level, [row(i) for i in range(len(self.world.ranks))])
        else:
            def work(i, coll):
                return average_rank(row(i), coll)

            ex = self.world.exchange(level, work)
        for i, v in enumerate(ex.outputs):
            rep.params[i].copy_(v[: rep.P])
            if with_buffers:
                rep.buffers[i].copy_(v[rep.P:])
        return ex

    def adapt(self, step: int, clock: dict[str, float]) -> None:
        """MOO choice of the top-k density at the current bandwidth (lowbw.adaptive), before step ``step``'s
        aggregation. The compression gain ||top_c(g)||^2 / ||g||^2 of every candidate c is read off one sort
        of replica 0's gradient every 10 steps (instead of running each candidate for a step, as Tyagi &
        Swany's exploration does); compute and compression seconds per step are the virtual clock's means."""
        pol = self.policy
        if step == 1:  # no compute time measured yet: the first step uses the configured ratio
            return
        if step % 10 == 2 or not pol.gains:
            g2 = self.rep.grads[0].float().pow(2).sort(descending=True).values.cumsum(0)
            total = float(g2[-1]) if g2.numel() else 0.0
            t_comp = clock["t_virtual_compress"] / max(step - 1, 1)
            for c in pol.densities:
                k = max(1, math.ceil(c * g2.numel()))
                pol.observe(c, pol.gain_of(float(g2[k - 1]), total), t_comp)
            pol.t_compute_s = clock["t_virtual_compute"] / max(step - 1, 1)
            pol.current = None  # fresh measurements: decide again
        choice = pol.choose(link_for(self.cfg, "world", clock["t_virtual"]))
        self._sparse().ratio = choice.density
