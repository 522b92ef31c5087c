"""What one process's replicas communicate in a step, through the world's collectives.

A :class:`Synchroniser` owns the run's compressor, one compressor State per local replica (error-feedback
residuals, random streams: part of a checkpoint) and the tensors gradients are aggregated as (each parameter
tensor, or the flat gradient). It aggregates gradients and averages models at a level (world, neighbourhood,
household) and returns the world's :class:`~lowbw.train.world.Exchange` of it; with ``adaptive: moo`` it
also chooses the top-k density of each step (:meth:`Synchroniser.adapt`).

``sync: diloco`` (Douillard et al. 2023, "DiLoCo: Distributed Low-Communication Training of Language
Models"): the scheme's model synchronisation every H = ``world_period`` inner steps is an outer step:

1. Delta_i = theta_start - theta_i, worker i's pseudo-gradient (flat fp32 row);
2. Delta = (1/M) sum_i Delta_i, aggregated like a gradient: through the run's collective, and through its
   compressor when one is set (with per-worker error feedback on Delta when the compressor has it);
3. theta_start <- the outer optimiser's step with Delta as gradient: SGD with momentum ``outer_momentum``,
   Nesterov's for ``outer_optimizer: nesterov`` (torch.optim.SGD semantics, dampening 0), rate ``outer_lr``;
4. theta_i <- theta_start on every worker; the inner optimiser keeps its state.

With ``outer_optimizer: sgd``, ``outer_lr: 1``, ``outer_momentum: 0`` step 3 is theta_start - Delta =
the workers' mean: local SGD, up to floating-point rounding. BatchNorm statistics are not synchronised
(each worker keeps its own, as the wrapper :mod:`lowbw.comm.diloco` does).
"""

from __future__ import annotations

import math

import torch

from lowbw.adaptive import AdaptiveTopK, candidate_densities
from lowbw.train.optim import FlatOptimizer
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
        self.start = self.outer = None
        if cfg.sync == "diloco":  # theta_start of every local replica (all equal) and the outer optimiser
            self.start = rep.params.clone()
            self.outer = FlatOptimizer("sgd", tuple(rep.params.shape), rep.device, momentum=cfg.outer_momentum,
                                       nesterov=cfg.outer_optimizer == "nesterov", weight_decay=0.0)

    def compresses(self, act: Action) -> bool:
        """Does step action ``act`` run the compressor (a gradient, or diloco's pseudo-gradient)?"""
        return self.comp is not None and (act.grad is not None or (self.outer is not None and act.avg is not None))

    def state_dict(self) -> dict:
        """The compressor states and, for diloco, theta_start and the outer optimiser (checkpoints)."""
        s = {"compressor_states": self.states}
        if self.outer is not None:
            s.update(start=self.start.clone(), outer=self.outer.state_dict())
        return s

    def load_state_dict(self, s: dict) -> None:
        self.states = s["compressor_states"]
        if self.outer is not None:
            self.start.copy_(s["start"])
            self.outer.load_state_dict(s["outer"])

    def action(self, step: int, progress: float) -> Action:
        """The scheme's communication after step ``step`` (from 1) at ``progress`` = samples / total."""
        return self.scheme.action(step, progress)

    @property
    def density(self) -> float | None:
        """The top-k density the adaptive policy chose last (None without ``adaptive``)."""
        return None if self.policy is None else self._sparse().ratio

    def _sparse(self):
        return getattr(self.comp, "inner", self.comp)  # the top-k inside error feedback

    def aggregate(self, level: str, rows: torch.Tensor | None = None) -> Exchange:
        """Average every local replica's gradient row (or row of ``rows``, ``[R, P]``) over its group at
        ``level``, compressed if configured; ``Exchange.outputs`` are the averaged rows."""
        rows, comp = self.rep.grads if rows is None else rows, self.comp
        if comp is None and self.direct:
            return self.world.dense_mean(level, list(rows), [k * 4 for _, _, k, _ in self.chunks])

        def work(i, coll):
            return aggregate_rank(rows[i], self.chunks, coll, comp, self.states[i])

        return self.world.exchange(level, work)

    def average(self, level: str) -> Exchange:
        """Synchronise the models of every group at ``level``: replace every local replica's parameters (and
        BatchNorm statistics, with ``average_buffers``) by their dense average; diloco: the outer step."""
        if self.outer is not None:
            return self.outer_step(level)
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

    def outer_step(self, level: str) -> Exchange:
        """DiLoCo's outer step (steps 1-4 of the module docstring) over the groups at ``level``."""
        rep, start = self.rep, self.start
        ex = self.aggregate(level, start - rep.params)
        self.outer.step(start, torch.stack(ex.outputs), self.cfg.outer_lr)
        rep.params.copy_(start)
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
