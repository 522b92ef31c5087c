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

Streaming DiLoCo (Douillard et al. 2025, "Streaming DiLoCo with overlapping communication"):
``diloco_fragments`` F > 1 cuts the flat row into F fragments (:class:`lowbw.train.streaming.FragmentPlan`),
each with its own slice of theta_start and its own outer momentum; fragment f does steps 1-4 alone after the
inner steps t with t = (f + 1) H / F (mod H), so an exchange carries one fragment (its pseudo-gradient,
through the collective and the compressor with error feedback like the whole model). ``diloco_delay`` tau >
0: steps 1-2 start after step t (Delta_f taken then) and steps 3-4 land after step t + tau, meanwhile the
workers keep computing; step 4 then mixes: theta_f <- alpha theta_f + (1 - alpha) theta_start_f with alpha
= ``diloco_alpha`` (the paper's mixing factor, its runs 0.5; torchft's ``fragment_update_alpha``, default 0:
the fragment is replaced and the tau steps of local progress on it are dropped). With alpha > 0 the replicas
stay apart after a landing and the run is evaluated on theta_start; the final synchronisation lands unmixed.
``diloco_fragment_layout: strided`` makes fragments of whole layers, layer j in fragment j mod F (the
paper's), instead of contiguous ranges of the flat row. ``diloco_schedule``: ``start_at_slot`` (the
default) starts fragment f's exchange after its slot t and lands it after t + tau; ``land_at_slot``
(torchft's ``fragment_sync_delay``) starts it after t - tau and lands it at the slot t, so the fragments'
updates land on the paper's schedule and Delta_f is taken tau steps earlier. The paper sends 4-bit
pseudo-gradients: ``compressor: blockwise``, ``compressor_args: {bits: 4}``. On procs the exchange really runs
in the background (one thread per process, :class:`lowbw.train.streaming.Background`) and is waited for,
with the world's peer timeout, at
the landing step; sim runs it at once and applies it tau steps later (the same arithmetic). The virtual
clock of the overlap is in :mod:`lowbw.train.streaming`. With F > 1 no step leaves the replicas equal: the
run is evaluated on theta_start (the global model, equal on every worker, :attr:`Synchroniser.global_row`).
"""

from __future__ import annotations

import math
import time
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch

from lowbw.adaptive import AdaptiveTopK, ChosenTopK, candidate_densities
from lowbw.comm.distributed import DistCollective
from lowbw.comm.meter import Meter
from lowbw.train.config_rules import ConfigError
from lowbw.train.desloc import DesLoc
from lowbw.train.optim import FlatOptimizer
from lowbw.train.sparta import Sparta
from lowbw.train.streaming import Background, FragmentPlan, InFlight
from lowbw.train.sync import Action, Scheme, TimedCollective, aggregate_rank, average_rank, make_compressor, make_states
from lowbw.train.world import Exchange, link_for

__all__ = ["Synchroniser", "ModelSync", "ADDONS"]

# per-step synchronisations after the scheme's own, in this order (lowbw.train.addons' interface)
ADDONS = (DesLoc, Sparta)


@dataclass
class ModelSync:
    """A step's model synchronisation: ``foreground`` exchanges (the step waits for them), exchanges
    ``landed`` now and ``started`` now (diloco with tau > 0: in the background), and whether the replicas
    are ``equal`` afterwards."""

    foreground: list[Exchange] = field(default_factory=list)
    landed: list[InFlight] = field(default_factory=list)
    started: list[InFlight] = field(default_factory=list)
    equal: bool = False


class Synchroniser:
    def __init__(self, cfg, world, rep, opt=None):
        """``opt``: the replicas' optimiser (its state is what ``sync: desloc`` averages besides parameters)."""
        self.cfg, self.world, self.rep, self.opt = cfg, world, rep, opt
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
                                       densities=candidate_densities(cfg.adaptive_c_low, cfg.adaptive_c_high),
                                       numels=[k for _, _, k, _ in self.chunks])
            self.comp = ChosenTopK.like(self.comp)  # aggregates with the collective the policy chooses
        self.addons = [a(cfg, world, rep, opt, self.direct) for a in ADDONS if a.applies(cfg)]
        self.start = self.outer = self.plan = None
        self.inflight: list[InFlight] = []  # diloco, tau > 0: exchanges started and not yet landed (FIFO)
        self.link_free = 0.0  # virtual time the background link is free again (lowbw.train.streaming)
        self.dirty: list[bool] = []  # per fragment: inner steps since its last outer update landed
        self.mixed: list[bool] = []  # per fragment: its landed update was mixed (alpha > 0), replicas apart
        self.bg = self.bg_coll = None  # procs, tau > 0: the background thread and its collective
        if cfg.sync == "diloco":  # theta_start of every local replica (all equal) and the outer optimisers
            F = cfg.diloco_fragments
            try:
                self.plan = FragmentPlan.make(rep.p_layout, F, cfg.world_period, gran == "flat",
                                              cfg.diloco_fragment_layout)
            except ValueError as e:
                raise ConfigError("diloco_fragments", f"{F}: {e} (model {cfg.model})") from None
            self.start = rep.params.clone()
            R = rep.params.shape[0]
            self.outer = [FlatOptimizer("sgd", (R, self.plan.size(f)), rep.device, momentum=cfg.outer_momentum,
                                        nesterov=cfg.outer_optimizer == "nesterov", weight_decay=0.0)
                          for f in range(F)]
            self.dirty = [False] * F
            self.mixed = [False] * F  # per fragment: alpha > 0 left the replicas apart from theta_start

    def compresses(self, act: Action) -> bool:
        """Does step action ``act`` run the compressor (a gradient, or diloco's pseudo-gradient)?"""
        return self.comp is not None and (act.grad is not None or (self.outer is not None and act.avg is not None))

    def compressed_bytes(self, act: Action) -> int:
        """fp32 bytes step action ``act`` compresses: the gradient row, or diloco's fragment of Delta."""
        if self.outer is not None and act.avg is not None:
            return self.plan.size(act.fragment) * 4
        return self.rep.P * 4

    @property
    def global_row(self) -> torch.Tensor | None:
        """diloco with F > 1: theta_start (worker 0's copy; equal on every worker), the model to evaluate;
        else None (the replicas are equal at synchronisation steps: evaluate them)."""
        if self.plan is not None and (len(self.plan.ranges) > 1 or self.cfg.diloco_alpha > 0):
            return self.start[0]
        if any(a.evaluate_replica0 for a in self.addons):  # sparta: worker 0's own model
            return self.rep.params[0]
        return None

    def state_dict(self) -> dict:
        """The compressor states and, for diloco, theta_start, the outer optimisers and the exchanges in
        flight (completed first: on procs this waits for them; every rank checkpoints at the same step)."""
        if self.outer is not None:
            for x in self.inflight:
                self._complete(x)
        s = {"compressor_states": self.states, "addons": [a.state_dict() for a in self.addons]}
        if self.outer is not None:
            s.update(start=self.start.clone(), outer=[o.state_dict() for o in self.outer],
                     inflight=[x.to_dict() for x in self.inflight], link_free=self.link_free,
                     dirty=list(self.dirty), mixed=list(self.mixed))
        return s

    def load_state_dict(self, s: dict) -> None:
        self.states = s["compressor_states"]
        for a, d in zip(self.addons, s.get("addons", [{}] * len(self.addons))):
            a.load_state_dict(d)
        if self.outer is not None:
            self.start.copy_(s["start"])
            outer = s["outer"] if isinstance(s["outer"], list) else [s["outer"]]  # format of one fragment
            if len(outer) != len(self.outer):
                raise RuntimeError(f"checkpoint has {len(outer)} diloco fragments, the run {len(self.outer)}")
            for o, d in zip(self.outer, outer):
                o.load_state_dict(d)
            self.inflight = [InFlight.from_dict(d) for d in s.get("inflight", [])]
            self.link_free = float(s.get("link_free", 0.0))
            self.dirty = list(s.get("dirty", self.dirty))
            self.mixed = list(s.get("mixed", self.mixed))

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
        from lowbw.train import batched  # sim: all replicas' layers at once (same records, bytes, outputs)

        if batched.applies(self.world, self.cfg, comp):
            return batched.exchange(self.world, level, rows, self.chunks, comp, self.states)

        def work(i, coll):
            return aggregate_rank(rows[i], self.chunks, coll, comp, self.states[i])

        return self.world.exchange(level, work)

    def model_sync(self, step: int, act: Action) -> ModelSync:
        """Step ``step``'s model synchronisation after its inner update: model averaging at ``act.avg``, or,
        diloco, the exchanges landing now and the fragment exchange ``act`` starts; then every add-on's
        (:data:`ADDONS`: desloc's moments, sparta's sparse average)."""
        ms = self._scheme_sync(step, act)
        for a in self.addons:
            r = a.after_step(step)
            ms.foreground += r.exchanges
            ms.equal = ms.equal or r.equal
        return ms

    def _scheme_sync(self, step: int, act: Action) -> ModelSync:
        if self.outer is None:
            if act.avg is None:
                return ModelSync(equal=False)
            return ModelSync(foreground=[self.average(act.avg)], equal=act.avg == "world")
        ms = ModelSync()
        self.dirty = [True] * len(self.dirty)
        while self.inflight and self.inflight[0].land_step <= step:
            ms.landed.append(self._land(self.inflight.pop(0)))
        if act.avg is not None:
            f, tau = act.fragment, self.cfg.diloco_delay
            if tau == 0:
                ms.foreground.append(self._fragment_step(act.avg, f))
            else:
                self.inflight.append(self._start(act.avg, f, step, step + tau))
                ms.started.append(self.inflight[-1])
        ms.equal = not any(self.dirty) and not any(self.mixed)
        return ms

    def finish(self) -> ModelSync:
        """The run's last synchronisation: diloco lands every exchange in flight and does the outer step of
        every fragment with local steps since its last update; other schemes average the world's models."""
        if self.outer is None:
            return ModelSync(foreground=[self.average("world")], equal=True)
        ms = ModelSync()
        while self.inflight:
            ms.landed.append(self._land(self.inflight.pop(0)))
        for f, d in enumerate(self.dirty):
            if d:  # the final model: theta_start's fragment, unmixed (alpha = 0)
                ms.foreground.append(self._fragment_step("world", f, alpha=0.0))
            elif self.mixed[f]:  # no inner step since it landed: theta_start_f is the global model already
                self.plan.put(self.rep.params, f, self.plan.take(self.start, f))
                self.mixed[f] = False
        ms.equal = True
        return ms

    def close(self) -> None:
        if self.bg is not None:
            self.bg.close()
            self.bg = None

    # ------------------------------------------------------------------------------------ diloco fragments
    @contextmanager
    def _fragment_chunks(self, f: int):
        """Aggregate fragment ``f``'s row (its chunks, offsets from the fragment's start) in the body."""
        full = self.chunks
        self.chunks = self.plan.chunks[f]
        try:
            yield
        finally:
            self.chunks = full

    def _delta(self, f: int) -> torch.Tensor:
        """Step 1 for fragment ``f``: Delta_i = theta_start_f - theta_i,f, ``[R, n_f]`` (a new tensor)."""
        return self.plan.take(self.start, f) - self.plan.take(self.rep.params, f)

    def _apply(self, f: int, ex: Exchange, alpha: float | None = None) -> None:
        """Steps 3-4 for fragment ``f`` with the averaged Delta_f of ``ex``; step 4 mixes with ``alpha``
        (default ``diloco_alpha``): theta_f <- alpha theta_f + (1 - alpha) theta_start_f, as torchft's
        ``lerp_(global, 1 - alpha)``."""
        start = self.plan.take(self.start, f)
        self.outer[f].step(start, torch.stack(ex.outputs), self.cfg.outer_lr)
        self.plan.put(self.start, f, start)
        a = self.cfg.diloco_alpha if alpha is None else alpha
        if a:
            self.plan.put(self.rep.params, f, self.plan.take(self.rep.params, f).lerp(start, 1 - a))
        else:
            self.plan.put(self.rep.params, f, start)
        self.dirty[f] = False
        self.mixed[f] = a > 0

    def _fragment_step(self, level: str, f: int, alpha: float | None = None) -> Exchange:
        """Steps 1-4 of fragment ``f`` at once (tau = 0), over the groups at ``level``."""
        rows = self._delta(f)
        with self._fragment_chunks(f):
            ex = self.aggregate(level, rows)
        self._apply(f, ex, alpha)
        return ex

    def _start(self, level: str, f: int, step: int, land_step: int) -> InFlight:
        """Steps 1-2 of fragment ``f`` after step ``step``, to land after ``land_step``: sim aggregates now;
        procs hands the collective to the background thread (a copy of Delta_f, so training goes on)."""
        x = InFlight(f, step, land_step, now=self.world.now)
        rows = self._delta(f)
        if self.world.kind == "sim":
            with self._fragment_chunks(f):
                x.exchange = self.aggregate(level, rows)
            return x
        if self.bg is None:
            self.bg = Background(self.rep.device)
            self.bg_coll = DistCollective(self.cfg.collective, meter=Meter(), timeout=self.world.timeout_s)
        coll, comp, state, chunks = self.bg_coll, self.comp, self.states[0], self.plan.chunks[f]
        coll.timeout = self.world.timeout_s
        n0, m0 = len(coll.calls), len(coll.meter.calls)

        def job():
            tc = TimedCollective(coll)
            t0 = time.perf_counter()
            out = aggregate_rank(rows[0], chunks, tc, comp, state)
            return out, time.perf_counter() - t0 - tc.comm_s, tc.comm_s

        x.job = (self.bg.submit(job), n0, m0)
        return x

    def _complete(self, x: InFlight) -> None:
        """Wait (procs) for ``x``'s background exchange and account it as the world does, at the link of
        its start step. Collective over the world: every rank completes the same exchanges in order. Its
        measured communication (``comm_s``) is the seconds this thread waited for it (the exposed part, as
        the virtual clock counts), not the background thread's seconds inside collective calls."""
        if x.exchange is not None:
            return
        job, n0, m0 = x.job
        t0 = time.perf_counter()
        out, busy, _ = job.result(self.world.timeout_s + 60.0,
                                  f"diloco fragment {x.fragment}'s exchange started after step {x.step}")
        waited = time.perf_counter() - t0
        now, self.world.now = self.world.now, x.now
        try:
            x.exchange = self.world.account("world", self.bg_coll, self.bg_coll.meter, n0, m0, out, busy, waited)
        finally:
            self.world.now = now
        x.job = None

    def _land(self, x: InFlight) -> InFlight:
        """Steps 3-4 of an exchange in flight (completing it first on procs)."""
        self._complete(x)
        self._apply(x.fragment, x.exchange)
        return x

    def average(self, level: str) -> Exchange:
        """Synchronise the models of every group at ``level``: replace every local replica's parameters (and
        BatchNorm statistics, with ``average_buffers``) by their dense average; diloco: the outer step of
        every fragment at once (tau = 0; the exchanges of the fragments merged into one record)."""
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
        """DiLoCo's outer step (steps 1-4 of the module docstring) of the whole model over the groups at
        ``level``: fragment by fragment (one fragment: the whole row in one exchange)."""
        exs = [self._fragment_step(level, f) for f in range(len(self.plan.ranges))]
        if len(exs) == 1:
            return exs[0]
        return merge_exchanges(exs)

    def adapt(self, step: int, clock: dict[str, float]) -> None:
        """MOO choice of the top-k density and its collective at the current links (lowbw.adaptive), before
        step ``step``'s aggregation. The compression gain ||top_c(g)||^2 / ||g||^2 of every candidate c is read
        off one sort of replica 0's gradient every 10 steps (instead of running each candidate for a step, as Tyagi &
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
        self.comp.collective = choice.collective


def merge_exchanges(exs: list[Exchange]) -> Exchange:
    """One record of exchanges made one after the other: the sums of their times, bytes and coefficients
    (outputs: the last one's)."""
    n = len(exs[0].busy_s)
    return Exchange(outputs=exs[-1].outputs, busy_s=[sum(e.busy_s[i] for e in exs) for i in range(n)],
                    comm_s=[sum(e.comm_s[i] for e in exs) for i in range(n)],
                    bytes_sent=[sum(e.bytes_sent[i] for e in exs) for i in range(n)],
                    v_comm=sum(e.v_comm for e in exs), v_alpha=sum(e.v_alpha for e in exs),
                    v_beta_bytes=sum(e.v_beta_bytes for e in exs), meta_s=sum(e.meta_s for e in exs))
