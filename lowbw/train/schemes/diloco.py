"""The DiLoCo family as a synchronous scheme (:class:`DiLoCo`, ``sync: diloco``).

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
``diloco_fragments`` F > 1 cuts the flat row into F fragments (:class:`lowbw.train.schemes.streaming.FragmentPlan`),
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
in the background (one thread per process, :class:`lowbw.train.schemes.streaming.Background`) and is waited for,
with the world's peer timeout, at
the landing step; sim runs it at once and applies it tau steps later (the same arithmetic). The virtual
clock of the overlap is in :mod:`lowbw.train.schemes.streaming`. With F > 1 no step leaves the replicas equal: the
run is evaluated on theta_start (the global model, equal on every worker, :attr:`DiLoCo.global_row`).

``diloco_overlap: delayed`` (F = 1, tau = 0): one-step-delayed DiLoCo as PCCL's asynchronous DiLoCo runs it
(Keiblinger et al. 2025, its example ``async_diloco.py``; the wrapper's ``overlap="delayed"``,
:mod:`lowbw.comm.diloco`, has the equations). At boundary k (every H steps): Delta_k = theta_start - theta_i
is taken first; the exchange started at boundary k - 1 lands (its outer step on theta_start, theta_i <-
theta_start; at the first boundary theta_i <- theta_start only); then Delta_k's exchange starts, to land H
steps later, so the virtual clock charges a boundary only what is left of an exchange that had the H inner
steps to run (the same in-flight accounting as tau). The final synchronisation lands the last exchange;
the run is evaluated on theta_start (at a boundary the replicas equal it).

``diloco_overlap: eager`` (F = 1, tau = 0): eager updates (Kale, Douillard & Donchev 2025; the wrapper's
``overlap="eager"``, :mod:`lowbw.comm.diloco`, has the equations and their source). The exchange overlaps the
next H inner steps as with ``delayed``, but at boundary k worker i steps its own theta_start_i at once with
g_i,k = Dbar_{k-1} - Delta_i,k-1 / M + Delta_i,k / M (:func:`lowbw.comm.diloco.eager_gradient`; at the first
boundary Delta_i,1 / M): its fresh pseudo-gradient in place of its stale share of the delayed average. The
workers' theta_start_i differ (by about one local share), so the replicas are never equal: the run is
evaluated on worker 0's theta_start. The clock is the delayed one's (the exchange lands H steps after it
started); the final synchronisation is a last boundary that starts no exchange. With M = 1 it is plain
DiLoCo.

Variants (named): ``delayed`` equals PCCL's asynchronous DiLoCo (PrimeIntellect-ai/pccl at 7815195) bit for bit
at the same outer optimiser, but PCCL's example steps theta_start with plain SGD (no momentum), where the
``diloco16_delayed`` preset keeps DiLoCo's Nesterov momentum 0.9 at outer_lr 0.7: a momentum that carries
each stale pseudo-gradient on for several more outer steps. Set ``outer_momentum: 0`` for PCCL's. ``eager``
follows Kale et al.'s rule as their text restates it; their Table 2 (500M parameters, H = 30) has eager at
2.69 against 2.67 without overlap, naive one-step-delayed at 3.01 and 2.73 with a lowered outer learning
rate; they tune the outer learning rate per variant, our presets keep DiLoCo's 0.7 and 0.9.
"""

from __future__ import annotations

import time
from contextlib import contextmanager

import torch

from lowbw.comm.diloco import eager_gradient, sync_offsets
from lowbw.comm.distributed import DistCollective
from lowbw.comm.meter import Meter
from lowbw.train.aggregate import TimedCollective, aggregate_rank
from lowbw.train.config_rules import ConfigError
from lowbw.train.optim import FlatOptimizer
from lowbw.train.schemes.streaming import Background, FragmentPlan, InFlight
from lowbw.train.schemes.synchronous import Action, ModelSync, Synchronous
from lowbw.train.world import Exchange

__all__ = ["DiLoCo", "OuterSchedule", "merge_exchanges"]


class OuterSchedule:
    """When each fragment's outer step is: fragment f has its outer step after the steps t with
    t % L_W == offsets[f] (``diloco_schedule: land_at_slot``, torchft's: the exchange starts tau steps before
    the slot and lands at it)."""

    def __init__(self, cfg):
        self.LW = cfg.world_period
        early = cfg.diloco_delay if cfg.diloco_schedule == "land_at_slot" else 0
        self.fragment_at = {(off - early) % self.LW: f
                            for f, off in enumerate(sync_offsets(self.LW, cfg.diloco_fragments))}

    def action(self, step: int, progress: float) -> Action:
        """The outer step (of fragment ``Action.fragment``) after step ``step``, or none."""
        f = self.fragment_at.get(step % self.LW)
        return Action(None, None) if f is None else Action(None, "world", f)


class DiLoCo(Synchronous):
    """Local steps; outer steps of fragments on the schedule of :class:`OuterSchedule` (module docstring)."""

    def __init__(self, cfg, world, rep, opt=None, batches=None):
        super().__init__(cfg, world, rep, opt, batches)
        self.schedule = OuterSchedule(cfg)
        self.inflight: list[InFlight] = []  # tau > 0: exchanges started and not yet landed (FIFO)
        self.bg = self.bg_coll = None  # procs, tau > 0: the background thread and its collective
        F = cfg.diloco_fragments
        try:
            self.plan = FragmentPlan.make(rep.p_layout, F, cfg.world_period, self.gran == "flat",
                                          cfg.diloco_fragment_layout)
        except ValueError as e:
            raise ConfigError("diloco_fragments", f"{F}: {e} (model {cfg.model})") from None
        self.start = rep.params.clone()  # theta_start of every local replica (all equal)
        R = rep.params.shape[0]
        self.outer = [FlatOptimizer("sgd", (R, self.plan.size(f)), rep.device, momentum=cfg.outer_momentum,
                                    nesterov=cfg.outer_optimizer == "nesterov", weight_decay=0.0)
                      for f in range(F)]
        self.dirty = [False] * F  # per fragment: inner steps since its last outer update landed
        self.mixed = [False] * F  # per fragment: alpha > 0 left the replicas apart from theta_start
        self.own: torch.Tensor | None = None  # eager: Delta_i,k-1 of every local replica, [R, P] (in flight)

    def action(self, step: int, progress: float) -> Action:
        return self.schedule.action(step, progress)

    def compresses(self, act: Action) -> bool:
        """Does step action ``act`` run the compressor (a gradient, or the pseudo-gradient)?"""
        return self.comp is not None and (act.grad is not None or act.avg is not None)

    def compressed_bytes(self, act: Action) -> int:
        """fp32 bytes step action ``act`` compresses: the fragment of Delta of an outer step."""
        if act.avg is not None:
            return self.plan.size(act.fragment) * 4
        return self.rep.P * 4

    @property
    def global_row(self) -> torch.Tensor | None:
        """F > 1, alpha > 0 or ``diloco_overlap``: theta_start (worker 0's copy; equal on every worker except
        with ``eager``, where it is worker 0's own), the model to evaluate; else the add-ons' (sparta: worker
        0's) or None (the replicas are equal at outer steps)."""
        if len(self.plan.ranges) > 1 or self.cfg.diloco_alpha > 0 or self.cfg.diloco_overlap != "none":
            return self.start[0]
        return super().global_row

    def state_dict(self) -> dict:
        """The compressor states, theta_start, the outer optimisers and the exchanges in flight (completed
        first: on procs this waits for them; every rank checkpoints at the same step)."""
        for x in self.inflight:
            self._complete(x)
        s = super().state_dict()
        s.update(start=self.start.clone(), outer=[o.state_dict() for o in self.outer],
                 inflight=[x.to_dict() for x in self.inflight], link_free=self.link_free,
                 dirty=list(self.dirty), mixed=list(self.mixed), own=self.own)
        return s

    def load_state_dict(self, s: dict) -> None:
        super().load_state_dict(s)
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
        self.own = s.get("own")

    def scheme_sync(self, step: int, act: Action) -> ModelSync:
        """The exchanges landing now, and the fragment exchange ``act`` starts (tau = 0: done at once)."""
        ms = ModelSync()
        self.dirty = [True] * len(self.dirty)
        if self.cfg.diloco_overlap == "eager":
            return self._eager_sync(step, act.avg is not None, ms)
        if self.cfg.diloco_overlap == "delayed":
            return self._delayed_sync(step, act, ms)
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
        """The run's last synchronisation: land every exchange in flight, then the outer step of every
        fragment with local steps since its last update."""
        ms = ModelSync()
        if self.cfg.diloco_overlap == "eager":
            self._eager_sync(0, False, ms, start=False)
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

    def _delayed_sync(self, step: int, act: Action, ms: ModelSync) -> ModelSync:
        """``diloco_overlap: delayed`` at step ``step`` (module docstring): at a boundary, Delta_k before
        theta_start moves, the landing of boundary k - 1's exchange, then the start of Delta_k's."""
        if act.avg is None:
            return ms
        rows = self._delta(0)  # Delta_k = theta_start - theta_i (theta_start not yet moved)
        if self.inflight:
            ms.landed.append(self._land(self.inflight.pop(0)))  # theta_start <- OuterOpt; theta_i <- it
        else:
            self.plan.put(self.rep.params, 0, self.plan.take(self.start, 0))  # first boundary: theta_i <- phi_0
            self.dirty[0] = False
        self.inflight.append(self._start(act.avg, 0, step, step + self.cfg.world_period, rows))
        ms.started.append(self.inflight[-1])
        return ms  # not equal: the replicas agree, but an update is in flight (the final sync lands it)

    def _eager_sync(self, step: int, boundary: bool, ms: ModelSync, start: bool = True) -> ModelSync:
        """``diloco_overlap: eager`` after step ``step`` (module docstring): at a ``boundary`` (or the final one,
        ``start`` false: no new exchange), Delta_k, the landing of boundary k - 1's exchange, the outer step of
        every local replica on its own g_i,k, and the start of Delta_k's exchange."""
        if not boundary and start:
            return ms
        rows = self._delta(0)  # Delta_i,k = theta_start_i - theta_i
        mean = None
        if self.inflight:
            x = self.inflight.pop(0)
            self._complete(x)
            ms.landed.append(x)
            mean = torch.stack(x.exchange.outputs)  # Dbar_{k-1}, on every local replica's row
        self._outer(0, eager_gradient(mean, self.own, rows, self.cfg.workers))
        self.own = None
        if start:
            self.own = rows.clone()  # this worker's share of the exchange now in flight
            self.inflight.append(self._start("world", 0, step, step + self.cfg.world_period, rows))
            ms.started.append(self.inflight[-1])
        return ms

    def close(self) -> None:
        if self.bg is not None:
            self.bg.close()
            self.bg = None

    def average(self, level: str) -> Exchange:
        """The outer step of every fragment at once (tau = 0; the exchanges of the fragments merged into one
        record)."""
        return self.outer_step(level)

    # ------------------------------------------------------------------------------------ fragments
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
        self._outer(f, torch.stack(ex.outputs), alpha)

    def _outer(self, f: int, grad: torch.Tensor, alpha: float | None = None) -> None:
        """Steps 3-4 for fragment ``f`` with outer gradient rows ``grad`` ``[R, n_f]`` (see :meth:`_apply`)."""
        start = self.plan.take(self.start, f)
        self.outer[f].step(start, grad, self.cfg.outer_lr)
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

    def _start(self, level: str, f: int, step: int, land_step: int, rows: torch.Tensor | None = None) -> InFlight:
        """Steps 1-2 of fragment ``f`` after step ``step``, to land after ``land_step``: sim aggregates now;
        procs hands the collective to the background thread (a copy of Delta_f, so training goes on).
        ``rows``: Delta_f taken earlier (``diloco_overlap: delayed``), else taken now."""
        x = InFlight(f, step, land_step, now=self.world.now)
        rows = self._delta(f) if rows is None else rows
        if self.world.kind == "sim":
            with self._fragment_chunks(f):
                x.exchange = self.aggregate(level, rows)
            return x
        if self.bg is None:
            self.bg = Background(self.rep.device)
            self.bg_coll = DistCollective(self.cfg.collective, meter=Meter(), timeout=self.world.timeout_s)
        coll, comp, state, chunks = self.bg_coll, self.comp, self.states[0], self.plan.chunks[f]
        bucket_mb = self.bucket_mb
        coll.timeout = self.world.timeout_s
        n0, m0 = len(coll.calls), len(coll.meter.calls)

        def job():
            tc = TimedCollective(coll)
            t0 = time.perf_counter()
            out = aggregate_rank(rows[0], chunks, tc, comp, state, bucket_mb)
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

    def outer_step(self, level: str) -> Exchange:
        """DiLoCo's outer step (steps 1-4 of the module docstring) of the whole model over the groups at
        ``level``: fragment by fragment (one fragment: the whole row in one exchange)."""
        exs = [self._fragment_step(level, f) for f in range(len(self.plan.ranges))]
        if len(exs) == 1:
            return exs[0]
        return merge_exchanges(exs)


def merge_exchanges(exs: list[Exchange]) -> Exchange:
    """One record of exchanges made one after the other: the sums of their times, bytes and coefficients
    (outputs: the last one's)."""
    n = len(exs[0].busy_s)
    return Exchange(outputs=exs[-1].outputs, busy_s=[sum(e.busy_s[i] for e in exs) for i in range(n)],
                    comm_s=[sum(e.comm_s[i] for e in exs) for i in range(n)],
                    bytes_sent=[sum(e.bytes_sent[i] for e in exs) for i in range(n)],
                    v_comm=sum(e.v_comm for e in exs), v_alpha=sum(e.v_alpha for e in exs),
                    v_beta_bytes=sum(e.v_beta_bytes for e in exs), meta_s=sum(e.meta_s for e in exs))
