"""Synchronous schemes: every worker takes a local step, then the scheme communicates what its schedule says.

Per step a scheme's :meth:`Synchronous.action` is a pair (gradient level, model-averaging level), each
``None`` or one of ``world | neighbourhood | household``:

================  =======================================================================================
``sync``          :class:`SyncSGD`: gradients averaged over the world every step (any collective, any
                  compressor + EF)
``local``         :class:`LocalSGD`: local steps, models averaged over the world every L_W steps
``post_local``    :class:`PostLocalSGD`: ``sync`` until ``local_start`` of the run, then ``local`` (Lin et
                  al. 2020)
``hierarchical``  :class:`Hierarchical`: households of M/H workers: gradients averaged in the household
                  every step (L_H = 1) or models every L_H steps; neighbourhoods (NB) every L_N steps; the
                  world every L_W steps (the highest level due wins). Thesis ch. 4.2.
``desloc``        :class:`LocalSGD` with Adam, whose moments are averaged on their own periods too (Iacob et
                  al. 2025; the add-on :mod:`lowbw.train.schemes.desloc`)
``sparta``        :class:`LocalOnly`: local steps; a random p of the parameters averaged after every step
                  (Beton et al. 2025; the add-on :mod:`lowbw.train.schemes.sparta`)
``diloco``        :class:`lowbw.train.schemes.diloco.DiLoCo`: outer steps on the pseudo-gradient
``noloco``        :class:`lowbw.train.schemes.noloco.NoLoCo`: every L_W steps a pairwise outer step with one
                  seeded peer, no collective (Kolehmainen et al. 2025)
================  =======================================================================================

A :class:`Synchronous` scheme owns the run's compressor, one compressor State per local replica
(error-feedback residuals, random streams: part of a checkpoint) and the tensors gradients are aggregated as
(each parameter tensor, or the flat gradient). It aggregates gradients and averages models at a level and
returns the world's :class:`~lowbw.train.world.Exchange` of it; with ``adaptive: moo`` it also chooses the
top-k density of each step (:meth:`Synchronous.adapt`). After its own model synchronisation it runs the
add-ons of :data:`ADDONS` (:mod:`lowbw.train.schemes.addons`: desloc's moments, sparta's sparse average).
"""

from __future__ import annotations

import math
import time
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch

from lowbw.train import batched
from lowbw.train.adaptive import AdaptiveTopK, ChosenTopK, candidate_densities
from lowbw.train.aggregate import (
    aggregate_rank,
    average_rank,
    bucket_mb_of,
    call_bytes,
    granularity,
    make_compressor,
    make_states,
)
from lowbw.train.optim import clip_rows
from lowbw.train.schemes.base import Scheme, StepContext
from lowbw.train.schemes.charge import compress_model_s, count_comm, record_step
from lowbw.train.schemes.desloc import DesLoc
from lowbw.train.schemes.sparta import Sparta
from lowbw.train.schemes.streaming import InFlight, landing_wait
from lowbw.train.state import RunState, WorkerStats
from lowbw.train.world import Exchange, link_for

__all__ = ["Action", "ModelSync", "Synchronous", "SyncSGD", "LocalSGD", "PostLocalSGD", "Hierarchical",
           "LocalOnly", "ADDONS"]

# per-step synchronisations after the scheme's own, in this order (lowbw.train.schemes.addons' interface)
ADDONS = (DesLoc, Sparta)


@dataclass(frozen=True)
class Action:
    grad: str | None  # level at which gradients are averaged (None: local step)
    avg: str | None  # level at which models are averaged after the step (None: no averaging)
    fragment: int = 0  # diloco: the fragment whose outer step ``avg`` is (0 with one fragment)


@dataclass
class ModelSync:
    """A step's model synchronisation: ``foreground`` exchanges (the step waits for them), exchanges
    ``landed`` now and ``started`` now (diloco with tau > 0: in the background), and whether the replicas
    are ``equal`` afterwards."""

    foreground: list[Exchange] = field(default_factory=list)
    landed: list[InFlight] = field(default_factory=list)
    started: list[InFlight] = field(default_factory=list)
    equal: bool = False


class Synchronous(Scheme):
    """Local step, then the communication of :meth:`action` (subclasses: the schedule)."""

    def __init__(self, cfg, world, rep, opt=None, batches=None):
        """``opt``: the replicas' optimiser (its state is what ``sync: desloc`` averages besides parameters);
        ``batches``: unused (the Trainer's local step draws the batches)."""
        self.cfg, self.world, self.rep, self.opt = cfg, world, rep, opt
        self.comp = make_compressor(cfg)
        self.states = make_states(cfg, world.ranks)
        self.gran = granularity(cfg, self.comp)
        self.bucket_mb = bucket_mb_of(cfg, self.gran)  # None: one call per chunk (layer, flat)
        self.chunks = rep.chunks(self.gran)
        # sim, dense: one rank-ordered sum per group replaces the collective's threads (same records; the sums
        # in rank order, not the ring's: sim_dense: collective takes the ring's, lowbw.train.batched)
        self.direct = world.kind == "sim" and cfg.sim_dense == "direct"
        self.policy = None
        if cfg.adaptive == "moo":
            self.policy = AdaptiveTopK(nbytes=rep.P * 4, world_size=cfg.workers,
                                       densities=candidate_densities(cfg.adaptive_c_low, cfg.adaptive_c_high),
                                       numels=[k for _, _, k, _ in self.chunks])
            self.comp = ChosenTopK.like(self.comp)  # aggregates with the collective the policy chooses
        self.addons = [a(cfg, world, rep, opt, self.direct) for a in ADDONS if a.applies(cfg)]
        self.link_free = 0.0  # virtual time the background link is free again (lowbw.train.schemes.streaming)

    # ------------------------------------------------------------------------------------ the schedule
    def action(self, step: int, progress: float) -> Action:
        """The scheme's communication after step ``step`` (from 1) at ``progress`` = samples / total."""
        raise NotImplementedError

    # ------------------------------------------------------------------------------------ one step
    def step(self, ctx: StepContext) -> None:
        """One synchronous step of every replica held here.

        1. local gradients (and, where the scheme says, their average over a group);
        2. the optimiser's update of every replica's row;
        3. model synchronisation (:meth:`model_sync`), where the scheme says;
        4. every worker's statistics, gathered unmetered, into the run's clock and records (:mod:`.charge`).
        """
        cfg, st, world = self.cfg, ctx.state, self.world
        t0 = time.perf_counter()
        b = ctx.local_batch
        st.step += 1
        act = self.action(st.step, st.samples / ctx.total)
        world.now = st.clock["t_virtual"]
        if cfg.compress_target == "update" and act.grad is not None:
            grads, stats, exchanges, t_opt = self.update_step(ctx, b, act)
        else:
            grads, stats, exchanges = self.gradients(ctx, b, act)
            t_opt = time.perf_counter()
            # grad_clip where the method's reference clips (:meth:`clips_workers`): the gradient rows the step
            # applies (the averaged gradient, as DDP; a local step's own), or, already, each worker's raw gradient
            self.opt.step(self.rep.params, grads if self.clips_workers(act) else clip_rows(grads, cfg.grad_clip),
                          ctx.lr)
            t_opt = (time.perf_counter() - t_opt) / len(stats)  # per replica: the optimiser's update of its row
        ms = self.model_sync(st.step, act)  # model averaging / diloco's outer steps (landing, starting)
        exchanges += ms.foreground
        # replicas are equal after a world average, or after a world gradient step from equal replicas
        st.in_sync = ms.equal or (act.grad == "world" and st.in_sync)
        st.samples += b * cfg.workers
        v_comm, meta_s = 0.0, 0.0
        for ex in exchanges:
            meta_s += ex.meta_s
            v_comm += ex.v_comm
            count_comm(st, ex)
        for ex in exchanges + [x.exchange for x in ms.landed]:  # a background exchange counts when it lands
            for i, s in enumerate(stats):
                s.add_exchange(ex.busy_s[i], ex.comm_s[i], ex.bytes_sent[i])
        meta_s += sum(x.exchange.meta_s for x in ms.landed)
        for s in stats:
            s.t_compute += t_opt  # a worker's compute: its batch, forward + backward, and its optimiser update
        t_meta = time.perf_counter()
        cols = WorkerStats.from_rows(world.allgather_rows(WorkerStats.rows(stats)))
        st.meas["t_meta"] += time.perf_counter() - t_meta + meta_s
        v_compress = (compress_model_s(cfg, self.comp, self.rep.P, self.compressed_bytes(act))
                      if (cfg.clock == "model" and self.compresses(act)) else None)
        record_step(st, cfg, cols, v_comm, v_compress, time.perf_counter() - t0)
        self.overlap(st, ms)

    def gradients(self, ctx: StepContext, b: int, act: Action) -> tuple[torch.Tensor, list[WorkerStats],
                                                                         list[Exchange]]:
        """Every local replica's gradient on its next ``b`` samples, averaged over its group at ``act.grad``
        (None: kept local). Returns the gradient rows ``[R, P]``, per replica its statistics, and the
        exchanges made."""
        ls = ctx.local_step(b)
        if ls.exchange is not None:  # the local step averaged them itself (ddp_hook)
            return ls.grads, ls.stats, [ls.exchange]
        if act.grad is None:
            return ls.grads, ls.stats, []
        if self.policy is not None:
            self.adapt(ctx.state.step, ctx.state.clock)
        if self.clips_workers(act):
            ls.grads.copy_(clip_rows(ls.grads, self.cfg.grad_clip))
        ex = self.aggregate(act.grad)
        return torch.stack(ex.outputs), ls.stats, [ex]

    def update_step(self, ctx: StepContext, b: int, act: Action) -> tuple[torch.Tensor, list[WorkerStats],
                                                                          list[Exchange], float]:
        """``compress_target: update``: every replica's optimiser direction from its own (clipped, uncompressed)
        gradient, d_i = Adam's m_i / (sqrt(v_i) + eps) or SGD's buffer, compressed with the run's compressor and
        error feedback and averaged over the group at ``act.grad``; every replica applies the average
        (``FlatOptimizer.apply``). The residual of error feedback is then a residual of updates, which the
        optimiser never sees, instead of a residual of gradients that, sent in bursts, enters Adam's second
        moment (Tang et al. 2021's 1-bit Adam compresses with error feedback after the variance is fixed, for
        the same reason). Returns the gradient rows, the statistics, the exchanges and the optimiser's seconds
        per replica."""
        ls = ctx.local_step(b)
        t0 = time.perf_counter()
        d = self.opt.direction(self.rep.params, clip_rows(ls.grads, self.cfg.grad_clip))
        t_opt = time.perf_counter() - t0
        ex = self.aggregate(act.grad, d)
        t0 = time.perf_counter()
        self.opt.apply(self.rep.params, torch.stack(ex.outputs), ctx.lr)
        t_opt = (t_opt + time.perf_counter() - t0) / len(ls.stats)
        return ls.grads, ls.stats, [ex], t_opt

    def overlap(self, st: RunState, ms: ModelSync) -> None:
        """The virtual clock of background exchanges (diloco with tau > 0; :mod:`lowbw.train.schemes.streaming`):
        each exchange landing now makes the step wait w = max(0, e - T) for the link to finish it (T: the
        clock after this step's own time); exchanges starting now start at the clock after those waits."""
        clock = st.clock
        for x in ms.landed:
            ex = x.exchange
            w, self.link_free = landing_wait(clock["t_virtual"], x.t_start, ex.v_comm, self.link_free)
            clock["t_virtual"] += w
            clock["t_virtual_comm"] += w
            count_comm(st, ex, w / ex.v_comm if ex.v_comm > 0 else 0.0)
        for x in ms.started:
            x.t_start = clock["t_virtual"]

    def final_sync(self, ctx: StepContext) -> None:
        """Average the world's models after a last step that left replicas apart (counted as communication);
        diloco: land the exchanges in flight, then the outer step of every fragment with local steps."""
        st, world = ctx.state, self.world
        t_sync = time.perf_counter()
        ms = self.finish()
        stats = [WorkerStats() for _ in world.ranks]
        for ex in [x.exchange for x in ms.landed] + ms.foreground:
            for i, s in enumerate(stats):
                s.add_exchange(ex.busy_s[i], ex.comm_s[i], ex.bytes_sent[i])
        st.bytes_sent += int(WorkerStats.from_rows(world.allgather_rows(WorkerStats.rows(stats))).bytes_sent.sum())
        self.overlap(st, ms)
        for ex in ms.foreground:
            st.clock["t_virtual_comm"] += ex.v_comm
            st.clock["t_virtual"] += ex.v_comm
            count_comm(st, ex)
        st.in_sync = True
        t_sync = time.perf_counter() - t_sync  # measured like a step: the final synchronisation is training
        st.meas["t_step"] += t_sync
        st.meas["t_comm"] += t_sync

    # ------------------------------------------------------------------------------------ evaluation
    @property
    def global_row(self) -> torch.Tensor | None:
        """The model to evaluate while the replicas are apart (sparta: worker 0's own); None: the replicas
        are equal at synchronisation steps, evaluate them."""
        if any(a.evaluate_replica0 for a in self.addons):
            return self.rep.params[0]
        return None

    def evaluable(self, in_sync: bool) -> bool:
        """The replicas agree, or the scheme has a global model (:attr:`global_row`) equal on every worker."""
        return in_sync or self.global_row is not None

    @contextmanager
    def evaluation_model(self):
        """Replica 0 holds the model to evaluate in the body: itself, or :attr:`global_row`."""
        g = self.global_row
        if g is None:
            yield self.rep
            return
        own = self.rep.params[0].clone()
        self.rep.params[0].copy_(g)
        try:
            yield self.rep
        finally:
            self.rep.params[0].copy_(own)

    # ------------------------------------------------------------------------------------ state
    def state_dict(self) -> dict:
        """The compressor states and the add-ons'."""
        return {"compressor_states": [None if st is None else st.state_dict() for st in self.states],
                "addons": [a.state_dict() for a in self.addons]}

    def load_state_dict(self, s: dict) -> None:
        for st, d in zip(self.states, s["compressor_states"], strict=True):
            if st is not None:
                st.load_state_dict(d)
        for a, d in zip(self.addons, s.get("addons", [{}] * len(self.addons))):
            a.load_state_dict(d)

    # ------------------------------------------------------------------------------------ communication
    def compresses(self, act: Action) -> bool:
        """Does step action ``act`` run the compressor (a gradient average)?"""
        return self.comp is not None and act.grad is not None

    def clips_workers(self, act: Action) -> bool:
        """Does ``grad_clip`` apply to each worker's raw gradient before the exchange of ``act``, not to the
        rows the step applies? Where the compressor's aggregate is an update direction of a size the method
        fixes (``Compressor.clip_at == "worker"``: DeMo, the sign methods): their references clip the raw
        gradient and never rescale the update (clipping DeMo's sign update, of norm sqrt(P), moved every
        weight by lr / sqrt(P)). Everywhere else the step's rows are clipped: the averaged gradient (DDP's
        ``clip_grad_norm_`` after the all-reduce; compressors with or without error feedback, as a DDP comm
        hook) or a local step's own gradient (local SGD, DiLoCo's inner steps, DES-LOC, SPARTA, NoLoCo; never
        an outer step's pseudo-gradient)."""
        return bool(self.cfg.grad_clip) and self.compresses(act) and self.comp.clip_at == "worker"

    def compressed_bytes(self, act: Action) -> int:
        """fp32 bytes step action ``act`` compresses: the gradient row."""
        return self.rep.P * 4

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
            return self.world.dense_mean(level, list(rows), call_bytes(self.chunks, self.bucket_mb))

        if batched.applies(self.world, self.cfg, comp):
            return batched.exchange(self.world, level, rows, self.chunks, comp, self.states, self.bucket_mb)

        def work(i, coll):
            return aggregate_rank(rows[i], self.chunks, coll, comp, self.states[i], self.bucket_mb)

        return self.world.exchange(level, work)

    def model_sync(self, step: int, act: Action) -> ModelSync:
        """Step ``step``'s model synchronisation after its inner update: the scheme's own
        (:meth:`scheme_sync`), then every add-on's (:data:`ADDONS`: desloc's moments, sparta's sparse
        average)."""
        ms = self.scheme_sync(step, act)
        for a in self.addons:
            r = a.after_step(step)
            ms.foreground += r.exchanges
            ms.equal = ms.equal or r.equal
        return ms

    def scheme_sync(self, step: int, act: Action) -> ModelSync:
        """Model averaging at ``act.avg`` (None: nothing)."""
        if act.avg is None:
            return ModelSync(equal=False)
        return ModelSync(foreground=[self.average(act.avg)], equal=act.avg == "world")

    def finish(self) -> ModelSync:
        """The run's last synchronisation: the world's models averaged."""
        return ModelSync(foreground=[self.average("world")], equal=True)

    def average(self, level: str) -> Exchange:
        """Synchronise the models of every group at ``level``: replace every local replica's parameters (and
        BatchNorm statistics, with ``average_buffers``) by their dense average."""
        rep = self.rep
        with_buffers = self.cfg.average_buffers and rep.Q > 0

        def row(i):
            return torch.cat([rep.params[i], rep.buffers[i]]) if with_buffers else rep.params[i]

        if self.direct:
            ex = self.world.dense_mean(level, [row(i) for i in range(len(self.world.ranks))])
        elif batched.applies(self.world, self.cfg, None):
            ex = batched.mean_rows(self.world, level, torch.stack([row(i) for i in range(len(self.world.ranks))]))
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
        """MOO choice of the top-k density and its collective at the current links (lowbw.train.adaptive), before
        step ``step``'s aggregation. The compression gain ||top_c(g)||^2 / ||g||^2 of every candidate c is read
        off one sort of replica 0's gradient every 10 steps (one sort costs less than Tyagi & Swany's exploration,
        which runs each candidate for a step); compute and compression seconds per step are the virtual clock's
        means."""
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


# ---------------------------------------------------------------------------------------- the schedules
class SyncSGD(Synchronous):
    """``sync``: gradients averaged over the world every step."""

    def action(self, step: int, progress: float) -> Action:
        return Action("world", None)


class LocalSGD(Synchronous):
    """``local`` (and ``desloc``, whose moments' averages are its add-on): models averaged every L_W steps."""

    def action(self, step: int, progress: float) -> Action:
        return Action(None, "world" if step % self.cfg.world_period == 0 else None)


class PostLocalSGD(LocalSGD):
    """``post_local``: ``sync`` until ``local_start`` of the run, then ``local``."""

    def action(self, step: int, progress: float) -> Action:
        if progress < self.cfg.local_start:
            return Action("world", None)
        return super().action(step, progress)


class Hierarchical(Synchronous):
    """``hierarchical``: households (gradients every step when L_H = 1, else models every L_H steps),
    neighbourhoods every L_N steps, the world every L_W steps; the highest level due wins."""

    def action(self, step: int, progress: float) -> Action:
        cfg = self.cfg
        grad = "household" if cfg.household_period == 1 else None
        if step % cfg.world_period == 0:
            avg = "world"
        elif cfg.neighbourhoods and step % cfg.neighbourhood_period == 0:
            avg = "neighbourhood"
        elif cfg.household_period > 1 and step % cfg.household_period == 0:
            avg = "household"
        else:
            avg = None
        return Action(grad, avg)


class LocalOnly(Synchronous):
    """``sparta``: local steps only; its add-on's sparse averages are the communication."""

    def action(self, step: int, progress: float) -> Action:
        return Action(None, None)
