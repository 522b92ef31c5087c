"""Parameter-server schemes on the sim backend: asynchronous SGD and stale-synchronous parallel (SSP).

An event simulation on the virtual clock. Worker i repeatedly: pulls the server's parameters (its snapshot),
computes a gradient on its next local batch (``compute_i`` = the step's compute time x ``worker_speeds[i]``),
pushes it. The server applies gradients one at a time in arrival order (ties: lower worker id) with the
configured optimiser at ``lr / M`` (M pushes of a local batch ~ one synchronous step of the global batch;
weight decay is scaled alike). Staleness is not imposed; it emerges from the ordering (with equal speeds
every gradient is M-1 updates old).

Network: every worker has its own full-duplex link (the cost model's star); the server's link is shared, so
pushes queue on its downlink and pulls on its uplink (``bytes x 8 / bandwidth`` each, plus the latency), each
in the order its messages are ready (a push joins the queue when its gradient is computed: a slow worker's
push does not hold the link for the faster ones' before it is sent).
The server's link is ``bandwidth_mbit``/``latency_ms``. On per-worker links (``worker_bandwidth_mbit``,
``worker_uplink_mbit``, ``worker_latency_ms``, ``bandwidth_trace``: :func:`lowbw.train.world.worker_links`,
a trace read when the message starts) a message also crosses worker i's own link: a push ends at
``max(server's queue start + m / B_server, ready + m / U_i)`` (a pull: ``D_i``) plus worker i's latency, and
holds the server's link for ``m / B_server`` only (cut-through; equal links give the shared-link model).

* ``async``: a worker starts its next gradient as soon as its pull completes (Recht et al.; Dean et al.).
* ``ssp`` with bound s (Ho et al. 2013): a worker that has completed c pushes may start its next gradient only
  when every worker has completed at least c - s pushes; otherwise it waits (and pulls when released).

A "step" in the metrics is M server updates (so steps, samples and epochs compare with synchronous runs);
the run's clock is the event time, split into the workers' mean compute and the rest (communication and
waiting). The run is evaluated on the server's model.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from contextlib import contextmanager

import torch

from lowbw.net.costlinks import WorkerLink
from lowbw.net.costmodel import LinkParams
from lowbw.train.links import message_link, message_stall
from lowbw.train.optim import make_optimizer
from lowbw.train.replicas import Replicas
from lowbw.train.schemes.base import Scheme, StepContext
from lowbw.train.state import WorkerStats
from lowbw.train.world import bandwidth_at, has_worker_links, worker_links

__all__ = ["ParameterServer", "server_link"]


def server_link(cfg, t_virtual: float = 0.0) -> LinkParams:
    """The server's link: ``bandwidth_mbit`` (its value at ``t_virtual`` under a schedule; the parameter
    server reads it at t = 0) x ``link_goodput``, latency ``latency_ms`` + ``clock_overhead_ms``; under
    ``link_loss`` as TCP's loss recovery charges one message alone (:func:`lowbw.train.links.message_link`:
    each message's timer waits for its own bytes, :func:`lowbw.train.links.message_stall`)."""
    return message_link(cfg, (cfg.latency_ms + cfg.clock_overhead_ms) / 1e3,
                        bandwidth_at(cfg, t_virtual, per_worker=False) * 1e6 * cfg.link_goodput, cfg.latency_ms)


class ParameterServer(Scheme):
    """``ssp`` and ``async``: the server and its M workers' event timeline. ``rep``: the M workers' replicas
    (their rows are the workers' snapshots and gradients); ``batches(i, b)``: worker i's next batch of ``b``
    samples; each pushes gradients of b = the global batch / M samples. ``world`` and the replicas'
    optimiser ``opt`` are unused (the server has its own)."""

    def __init__(self, cfg, world, rep: Replicas, opt=None,
                 batches: Callable[[int, int], tuple[torch.Tensor, torch.Tensor]] | None = None):
        self.cfg, self.rep, self.batch, self.b = cfg, rep, batches, cfg.global_batch // cfg.workers
        self.M = cfg.workers
        self.bound = cfg.staleness if cfg.sync == "ssp" else math.inf
        self.speeds = list(cfg.worker_speeds) or [1.0] * self.M
        self.server = Replicas(rep.model, 1, rep.device, "loop")
        self.server.load_state_dict({"params": rep.params[:1], "buffers": rep.buffers[:1],
                                     "int_buffers": {k: v[:1] for k, v in rep.int_buffers.items()}})
        self.opt = make_optimizer(cfg, 1, rep.P, rep.device)
        self.link = server_link(cfg)
        # per-worker links, unless they are all the server's (then the shared-link model, exactly)
        self.per_worker = has_worker_links(cfg) and (
            bool(cfg.bandwidth_trace) or any(w != WorkerLink.symmetric(self.link) for w in worker_links(cfg)))
        self.push_bytes = rep.P * 4
        self.pull_bytes = (rep.P + rep.Q) * 4
        self.now = 0.0
        self.ps_in_free = 0.0
        self.ps_out_free = 0.0
        self.clock = [0] * self.M  # completed pushes per worker
        self.arrival: list[float | None] = [None] * self.M  # when worker i's current gradient reaches the server
        # when worker i's gradient is computed and its push may take the server's link (None: on its way or not
        # computing); the link serves pushes in the order they are ready, so a push joins its queue only then
        self.ready: list[float | None] = [None] * self.M
        self.t_compute = [0.0] * self.M
        self.loss = [0.0] * self.M
        self.correct = [0] * self.M
        self.updates = 0
        for i in range(self.M):
            self._start(i, 0.0)

    # --------------------------------------------------------------------------------------------- events
    def _transfer(self, ready: float, nbytes: int, direction: str, worker: int) -> float:
        """Finish time of ``worker``'s message through the server's shared link (queued) and, on per-worker
        links, its own link (see the module docstring), plus the latency."""
        free = self.ps_in_free if direction == "in" else self.ps_out_free
        start = max(ready, free)
        done = start + nbytes * self.link.beta
        if direction == "in":
            self.ps_in_free = done
        else:
            self.ps_out_free = done
        if not self.per_worker:
            return done + self.link.alpha_s + message_stall(self.link, nbytes)
        w = worker_links(self.cfg, ready)[worker]
        own = 8.0 * nbytes / (w.up_bps if direction == "in" else w.down_bps)
        return max(done, ready + own) + w.up_alpha_s + w.down_alpha_s

    def _start(self, i: int, t: float) -> None:
        """Worker i pulls the server's model at ``t`` and computes its gradient; schedules its push."""
        rep, srv, b = self.rep, self.server, self.b
        rep.params[i].copy_(srv.params[0])
        rep.buffers[i].copy_(srv.buffers[0])
        for k, v in rep.int_buffers.items():
            v[i].copy_(srv.int_buffers[k][0])
        x, y = self.batch(i, b)
        losses, correct, secs = rep.forward_backward([x], [y], rows=[i])
        self.loss[i], self.correct[i] = losses[0], correct[0]
        comp = self.cfg.clock_sample_s * b if self.cfg.clock == "model" else secs[0]
        comp *= self.speeds[i]
        self.t_compute[i] = comp
        pulled = self._transfer(t, self.pull_bytes, "out", i) if t > 0 else t  # the initial model is everyone's
        self.ready[i] = pulled + comp  # its push joins the server link's queue at that time (update)

    def _may_start(self, i: int) -> bool:
        return self.clock[i] - min(self.clock) <= self.bound

    def update(self, lr: float) -> WorkerStats:
        """Process the next arrival: apply that gradient, restart its worker (and any SSP-released ones).
        Returns the pushing worker's statistics of that gradient (bytes: its push and its pull)."""
        while True:  # events in time order: a push ready (it joins the link's queue) before an arrival at a tie
            ready = [(r, 0, i) for i, r in enumerate(self.ready) if r is not None]
            live = [(a, 1, i) for i, a in enumerate(self.arrival) if a is not None]
            t, kind, i = min(ready + live)
            if kind == 1:
                break
            self.arrival[i] = self._transfer(t, self.push_bytes, "in", i)
            self.ready[i] = None
        self.now = t
        srv, rep = self.server, self.rep
        self.opt.step(srv.params, rep.grads[i: i + 1], lr / self.M)
        srv.buffers[0].copy_(rep.buffers[i])
        for k, v in srv.int_buffers.items():
            v[0].copy_(rep.int_buffers[k][i])
        self.clock[i] += 1
        self.updates += 1
        info = WorkerStats(loss=self.loss[i], correct=self.correct[i], count=self.b, t_compute=self.t_compute[i],
                           bytes_sent=self.push_bytes + self.pull_bytes)
        self.arrival[i] = None
        for j in [i] + [j for j in range(self.M) if j != i]:  # the pusher first, then released waiters
            if self.arrival[j] is None and self.ready[j] is None and self._may_start(j):  # idle, may start
                self._start(j, self.now)
        return info

    # --------------------------------------------------------------------------------------------- the scheme
    def step(self, ctx: StepContext) -> None:
        """One server update (:meth:`update`) charged to the run: samples, bytes, the event clock, the
        statistics at 1/M of a step each; ``state.step`` advances every M updates."""
        cfg, st = self.cfg, ctx.state
        t0 = time.perf_counter()
        info = self.update(ctx.lr)
        st.samples += info.count
        st.bytes_sent += info.bytes_sent
        # event time; the split is per-worker average compute and the rest (communication and waiting)
        st.clock["t_virtual"] = self.now
        st.clock["t_virtual_compute"] += info.t_compute / cfg.workers
        st.clock["t_virtual_comm"] = max(0.0, st.clock["t_virtual"] - st.clock["t_virtual_compute"])
        st.meas["t_compute"] += info.t_compute if cfg.clock == "measured" else 0.0
        st.meas["t_step"] += time.perf_counter() - t0
        for iv in (st.interval, st.epoch_interval):
            iv.loss += info.loss / cfg.workers
            iv.correct += info.correct
            iv.count += info.count
            iv.n += 1 / cfg.workers
        if self.updates % cfg.workers == 0:
            st.step += 1
        st.in_sync = True  # evaluation uses the server's model

    @contextmanager
    def evaluation_model(self):
        """The server's model."""
        yield self.server

    # --------------------------------------------------------------------------------------------- state
    def state_dict(self) -> dict:
        return {"server": self.server.state_dict(), "opt": self.opt.state_dict(), "now": self.now,
                "ps_in_free": self.ps_in_free, "ps_out_free": self.ps_out_free, "clock": list(self.clock),
                "arrival": list(self.arrival), "ready": list(self.ready), "t_compute": list(self.t_compute),
                "loss": list(self.loss),
                "correct": list(self.correct), "updates": self.updates}

    def load_state_dict(self, s: dict) -> None:
        self.server.load_state_dict(s["server"])
        self.opt.load_state_dict(s["opt"])
        for k in ("now", "ps_in_free", "ps_out_free", "updates"):
            setattr(self, k, s[k])
        for k in ("clock", "arrival", "t_compute", "loss", "correct"):
            setattr(self, k, list(s[k]))
        self.ready = list(s.get("ready", [None] * self.M))  # a checkpoint of before the queue was in time order
