"""The event engine of the outer-step schemes whose workers do not wait for each other (sim backend):
``async_diloco`` (:mod:`.async_diloco`), ``decoupled_diloco`` (:mod:`.decoupled_diloco`) and ``halos``
(:mod:`.halos`). Each of those is a server policy on this engine; the engine owns the workers, their
links and the virtual clock.

Worker i repeats a round, on its own virtual timeline:

1. it holds the model its server last sent it: theta_i = start_i (at t = 0 the initial model);
2. it takes H_i inner steps with its own inner optimiser (``optimizer``; its state kept across rounds, as
   DiLoCo keeps it), each on its next local batch of b = B / M samples at the run's learning rate, each
   taking c_i = (``clock_sample_s`` x b, or the measured seconds) x ``worker_speeds[i]`` x
   ``clock_compute_scale`` of virtual time; H_i = H = ``world_period``, or with ``async_dylu`` (Dynamic
   Local Updates, Liu et al. 2024) H_i = max(1, floor(H x min_j c_j / c_i)): a slower worker takes fewer
   steps, so every round lasts about as long as the fastest worker's H steps;
3. it pushes Delta_i = start_i - theta_i (P fp32 values) to its server: the message leaves when the last
   inner step ends and arrives after the server port's queue and the worker's uplink
   (:class:`ServerPort`);
4. the server (the scheme) applies Delta_i by its rule and sends worker i a model when its rule says
   (P fp32 values through the port's queue and the worker's downlink); worker i waits for that model only,
   never for another worker's round.

Arrivals and releases: a server that releases workers batches them: the first arrival after a release
opens a batch, every arrival until ``async_grace_s`` seconds later joins it, and at that deadline the
batch's workers are sent the server's model (the grace window of the authors' asynchronous toy code,
google-deepmind/asyncdiloco's ``max_wait_time``; 0: only arrivals at the same virtual instant batch, so
equal workers on equal links restart from one model). Events at one instant run in the order inner step,
arrival, server-to-server message, batch deadline, model received; ties by worker id.

A metrics step is M inner steps in virtual-time order (so steps, samples and epochs compare with
synchronous runs) together with every server event before the next inner step; its learning rate is the
schedule's at the step's start; its loss is the mean of those M inner steps' losses. The clock is the event
time (``t_virtual``), split into the workers' mean compute and the rest (communication and waiting). The
run is evaluated on the scheme's global model (:meth:`AsyncOuter.global_row`) with worker 0's buffers.
Churn (``faults: [churn:RANK@STEP:REJOIN]``, :mod:`lowbw.train.faults`): after metrics step STEP worker RANK
leaves (its round in progress is dropped; a Delta it already sent still arrives and counts), the others go
on, and after step REJOIN it pulls its server's model and starts a round.
A checkpoint (between two metrics steps) keeps the events in flight with their Deltas and models, the
workers' rounds and inner optimisers, the ports' queues and the servers' state: a resumed run gives the
uninterrupted run's metrics.
The final synchronisation flushes: every worker with inner steps since its last model pushes its partial
Delta_i, and the scheme's :meth:`AsyncOuter.flush` merges whatever is left, so the global model has every
inner step of the run.

On procs (one process per worker, ``clock: model``) every process replays the same event schedule: the
process of worker i computes i's inner steps and Delta_i, every arrival of Delta_i is a broadcast from
process i over the run's torch.distributed world (lowbw.comm's broadcast, with the world's peer timeout),
every process holds a copy of the servers and applies every arrival, and each step's inner-step statistics
are gathered from their workers. The order of arrivals is the virtual clock's on both backends, so sim and
procs give the same metrics (named variant: a real server process answering arrivals in the order they
come off the wire is not built; the bytes on the wire are M - 1 copies of a Delta, the clock counts the
push and the pull of the star).
"""

from __future__ import annotations

import copy
import heapq
import math
import time
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field

import torch

from lowbw.comm.distributed import DistCollective
from lowbw.comm.meter import Meter
from lowbw.net.costlinks import WorkerLink
from lowbw.net.costmodel import LinkParams
from lowbw.train.faults import parse_faults
from lowbw.train.links import message_stall
from lowbw.train.optim import clip_rows, make_optimizer
from lowbw.train.replicas import Replicas
from lowbw.train.schemes.base import Scheme, StepContext
from lowbw.train.state import WorkerStats
from lowbw.train.world import has_worker_links, worker_links

__all__ = ["AsyncOuter", "ServerPort", "dylu_steps", "EVENT_ORDER"]

# the order of events at one virtual instant (lower first)
EVENT_ORDER = {"inner": 0, "arrive": 1, "relay": 2, "close": 3, "receive": 4}


def dylu_steps(H: int, compute_s: list[float], on: bool) -> list[int]:
    """Inner steps per round of each worker: H, or with DyLU (``on``) H_i = max(1, floor(H x min_j c_j / c_i))
    for per-step compute seconds ``compute_s`` (Liu et al. 2024, Sec. 4.2: H_i = floor(v_i / max_j v_j x H)
    for speeds v = 1 / c; the floor of 1 is ours, their toy code floors at 5)."""
    if not on:
        return [H] * len(compute_s)
    fastest = min(compute_s)
    return [max(1, math.floor(H * fastest / c + 1e-9)) for c in compute_s]


class ServerPort:
    """One server's network port on the virtual clock: the server's link is shared, so messages to it queue
    on its downlink and messages from it on its uplink (``bytes x 8 / bandwidth`` each, at the link
    ``link_at(t)`` of the time t the message starts: a ``bandwidth_schedule`` is followed); on per-worker links
    a message also crosses the worker's own link and ends at ``max(queue end, ready + bytes / worker rate)``
    (cut-through) plus both latencies (the parameter server's model, :mod:`.parameter_server`)."""

    def __init__(self, cfg, link_at: Callable[[float], LinkParams], per_worker: bool):
        self.cfg, self.link_at, self.per_worker = cfg, link_at, per_worker
        self.free = {"in": 0.0, "out": 0.0}  # virtual time each direction of the port is free again

    def transfer(self, ready: float, nbytes: int, direction: str, worker: int | None) -> float:
        """Finish time of a message of ``nbytes`` ready at ``ready``, ``direction`` in (to the server) or out;
        ``worker``: the worker at the other end (None: a server, no worker link crossed)."""
        start = max(ready, self.free[direction])
        link = self.link_at(start)
        done = start + nbytes * link.beta
        self.free[direction] = done
        if not self.per_worker or worker is None:
            return done + link.alpha_s + message_stall(link, nbytes)
        w = worker_links(self.cfg, ready)[worker]
        own = 8.0 * nbytes / (w.up_bps if direction == "in" else w.down_bps)
        return max(done, ready + own) + w.up_alpha_s + w.down_alpha_s


def uses_worker_links(cfg, link: LinkParams) -> bool:
    """Per-worker links that are not all the server's own (then the shared-link model, exactly)."""
    return has_worker_links(cfg) and (bool(cfg.bandwidth_trace)
                                      or any(w != WorkerLink.symmetric(link) for w in worker_links(cfg)))


@dataclass
class Worker:
    """One worker's round (the module docstring's steps 1-4)."""

    steps: int = 0  # inner steps taken in this round
    target: int = 1  # H_i, inner steps of this round
    t: float = 0.0  # virtual time of its last event (its last inner step's end, or the model's arrival)
    state: str = "run"  # run (inner steps), away (its Delta sent; waiting for a model), idle (flushed), gone
    samples: int = 0  # samples of this round (the token count of decoupled_diloco's weighting)
    since: int = 0  # server version of the model the round started from (staleness)


@dataclass
class StepTally:
    """What one metrics step's inner steps did: per inner step its worker and statistics (loss, correct,
    count, compute; None for a worker another process holds, until gathered)."""

    stats: list[tuple[int, WorkerStats | None]] = field(default_factory=list)
    bytes_sent: int = 0


class AsyncOuter(Scheme):
    """The event engine (module docstring); subclasses are the server policies: they implement
    :meth:`arrive` (a Delta reached a server), optionally :meth:`relay` (a server-to-server message) and
    :meth:`flush`, own :attr:`global_row`, and name their checkpointed state in :attr:`SERVER_STATE`
    (attributes copied as they are) and :attr:`SERVER_OPTIMIZERS` (objects, or lists of them, with
    ``state_dict``)."""

    SERVER_STATE: tuple[str, ...] = ()
    SERVER_OPTIMIZERS: tuple[str, ...] = ()

    def __init__(self, cfg, world, rep: Replicas, opt=None, batches=None):
        self.cfg, self.world, self.rep, self.batch = cfg, world, rep, batches
        self.M, self.b = cfg.workers, cfg.global_batch // cfg.workers
        self.H = cfg.world_period
        P = rep.P
        self.nbytes = P * 4  # a Delta or a model: P fp32 values (parameters only; buffers stay each worker's)
        self.row = {w: k for k, w in enumerate(world.ranks)}  # the workers held here -> their replica row
        # every worker held here its own inner optimiser (one row each): workers step at different times
        self.inner = {i: make_optimizer(cfg, 1, P, rep.device, rep.p_layout) for i in self.row}
        self.coll = None  # procs: the collective the arrivals are broadcast over (made at the first)
        speeds = list(cfg.worker_speeds) or [1.0] * self.M
        self.compute_s = [self._step_seconds(None) * s for s in speeds]  # clock=model; measured: per step
        self.speeds = speeds
        self.targets = dylu_steps(self.H, speeds, cfg.async_dylu)
        self.start = rep.params.clone()  # start_i: the model each worker held here started its round from
        self.workers = [Worker(target=self.targets[i]) for i in range(self.M)]
        self.events: list[tuple] = []  # heap of (time, order, worker or -1, seq, kind, payload)
        self.seq = 0
        self.now = 0.0  # virtual time of the last event processed
        self.open_batch: dict[int, list[int]] = {}  # server id -> workers of its open batch
        self.version = 0  # server updates applied (staleness bookkeeping)
        self.flushing = False
        self.tally = StepTally()
        self.inner_done = 0  # inner steps processed in the current metrics step
        self.inner_steps = [0] * self.M  # inner steps each worker has taken in the run
        self.rounds = [0] * self.M  # Deltas each worker has pushed in the run
        self.lr = 0.0
        self.churn = parse_faults(cfg.faults, self.M)  # workers that leave and rejoin (lowbw.train.faults)
        self.gone: set[int] = set()  # workers away now
        for i in range(self.M):
            self._schedule_inner(i, 0.0)

    # ----------------------------------------------------------------------------------- the policy's hooks
    def arrive(self, i: int, delta: torch.Tensor, t: float) -> None:
        """Worker ``i``'s Delta_i ``[P]`` reached its server at ``t``."""
        raise NotImplementedError

    def relay(self, payload, t: float) -> None:
        """A server-to-server message (``send(..., kind="relay")``) arrived at ``t``."""
        raise NotImplementedError

    def flush(self, t: float) -> None:
        """The run's end: every Delta has arrived; merge what the servers still hold."""
        return None

    def server_of(self, i: int) -> int:
        """The server worker ``i`` talks to (0: the only one)."""
        return 0

    def port_of(self, i: int) -> ServerPort:
        """The network port of worker ``i``'s server."""
        raise NotImplementedError

    def model_for(self, server: int) -> torch.Tensor:
        """The model server ``server`` sends a worker it releases, ``[P]``."""
        raise NotImplementedError

    @property
    def global_row(self) -> torch.Tensor:
        """The model the run is evaluated on, ``[P]``."""
        raise NotImplementedError

    def grace_s(self) -> float:
        """Seconds a server's batch stays open after its first arrival (``async_grace_s``)."""
        return self.cfg.async_grace_s

    # ----------------------------------------------------------------------------------- events
    def push_event(self, t: float, kind: str, worker: int, payload=None) -> None:
        heapq.heappush(self.events, (t, EVENT_ORDER[kind], worker, self.seq, kind, payload))
        self.seq += 1

    def _step_seconds(self, measured: float | None) -> float:
        """Virtual seconds of one inner step at speed 1 (clock=model, or the measured ``measured``)."""
        c = self.cfg.clock_sample_s * self.b if self.cfg.clock == "model" else (measured or 0.0)
        return c * self.cfg.clock_compute_scale

    def _schedule_inner(self, i: int, t: float) -> None:
        """Worker ``i``'s next inner step, ending at ``t + c_i`` (clock=measured: at ``t``; its measured
        seconds are added when it runs)."""
        self.push_event(t + (self.compute_s[i] if self.cfg.clock == "model" else 0.0), "inner", i)

    def _inner(self, i: int, t: float) -> None:
        """One inner step of worker ``i`` ending at ``t`` (step 2); at its round's last, the push (step 3).
        A worker another process holds: its bookkeeping only (clock=model: its time is known)."""
        w = self.workers[i]
        if i in self.row:
            rep, r = self.rep, self.row[i]
            x, y = self.batch(r, self.b)
            losses, correct, secs = rep.forward_backward([x], [y], rows=[r])
            t0 = time.perf_counter()
            self.inner[i].step(rep.params[r: r + 1], clip_rows(rep.grads[r: r + 1], self.cfg.grad_clip), self.lr)
            secs_i = secs[0] + time.perf_counter() - t0
            c = self.compute_s[i] if self.cfg.clock == "model" else self._step_seconds(secs_i) * self.speeds[i]
            if self.cfg.clock != "model":
                t += c
            self.tally.stats.append((i, WorkerStats(loss=losses[0], correct=correct[0], count=self.b, t_compute=c)))
        else:
            self.tally.stats.append((i, None))
        self.inner_done += 1
        self.inner_steps[i] += 1
        w.t, w.steps, w.samples = t, w.steps + 1, w.samples + self.b
        if w.steps >= w.target:
            self._push(i, t)
        else:
            self._schedule_inner(i, t)

    def _push(self, i: int, t: float) -> None:
        """Step 3: worker ``i`` sends Delta_i at ``t``."""
        w = self.workers[i]
        r = self.row.get(i)
        delta = None if r is None else self.start[r] - self.rep.params[r]  # procs: worker i's process has it
        w.state = "away"
        self.rounds[i] += 1
        self.tally.bytes_sent += self.nbytes
        self.push_event(self.port_of(i).transfer(t, self.nbytes, "in", i), "arrive", i, delta)

    def release(self, server: int, workers: list[int], t: float) -> None:
        """Send ``workers`` the model of ``server`` at ``t`` (step 4; a copy: the server moves on)."""
        model = self.model_for(server).clone()
        for j in sorted(workers):
            self.tally.bytes_sent += self.nbytes
            self.push_event(self.port_of(j).transfer(t, self.nbytes, "out", j), "receive", j, (model, self.version))

    def join_batch(self, server: int, i: int, t: float) -> None:
        """Worker ``i`` joins ``server``'s open batch (opening one, whose deadline is ``t`` + the grace)."""
        if server not in self.open_batch:
            self.open_batch[server] = []
            self.push_event(t + self.grace_s(), "close", -1, server)
        self.open_batch[server].append(i)

    def close_batch(self, server: int, t: float) -> None:
        """A batch's deadline: release its workers with the server's model (subclasses may merge first)."""
        self.release(server, self.open_batch.pop(server, []), t)

    def _receive(self, i: int, t: float, model: torch.Tensor, version: int) -> None:
        """Step 1 of worker ``i``'s next round: its model arrived at ``t``."""
        w = self.workers[i]
        if i in self.row:
            self.rep.params[self.row[i]].copy_(model)
            self.start[self.row[i]].copy_(model)
        w.t, w.steps, w.samples, w.since = t, 0, 0, version
        if self.flushing or i in self.gone:
            w.state = "idle" if self.flushing else "gone"
            return
        w.state = "run"
        w.target = self.targets[i]
        self._schedule_inner(i, t)

    def _process(self, ev) -> None:
        t, _, i, _, kind, payload = ev
        self.now = max(self.now, t)
        if kind == "inner":
            self._inner(i, t)
        elif kind == "arrive":
            self.arrive(i, self._share(i, payload), t)
        elif kind == "relay":
            self.relay(payload, t)
        elif kind == "close":
            self.close_batch(payload, t)
        elif kind == "receive":
            self._receive(i, t, *payload)

    def _share(self, i: int, delta: torch.Tensor | None) -> torch.Tensor:
        """Delta_i on every process (procs: broadcast from worker i's process; sim: it is here)."""
        if self.world.kind == "sim":
            return delta
        if self.coll is None:
            self.coll = DistCollective(self.cfg.collective, meter=Meter(), timeout=self.world.timeout_s)
        self.coll.timeout = self.world.timeout_s
        buf = delta if delta is not None else torch.empty(self.rep.P, device=self.rep.device)
        out = self.coll.broadcast(buf, src=i)
        self.coll.calls.clear()
        self.coll.meter.calls.clear()
        return out

    def _gathered(self) -> list[WorkerStats]:
        """This step's inner-step statistics in event order, those of other processes' workers gathered."""
        if self.world.kind == "sim":
            return [s for _, s in self.tally.stats]
        mine = [s.to_row() for _, s in self.tally.stats if s is not None]
        queues = {w: iter(rows) for w, rows in zip(range(self.M), self.world.allgather_obj(mine))}
        return [s if s is not None else WorkerStats(*next(queues[i])) for i, s in self.tally.stats]

    # ----------------------------------------------------------------------------------- the scheme
    def step(self, ctx: StepContext) -> None:
        """One metrics step: events in virtual-time order until M inner steps are done and the next event is
        an inner step; charged to the run like the parameter server's (module docstring)."""
        st = ctx.state
        t0 = time.perf_counter()
        self.lr = ctx.lr
        self.tally = StepTally()
        self.inner_done = 0
        while self.inner_done < self.M or (self.events and self.events[0][4] != "inner"):
            if not self.events:
                raise RuntimeError(f"sync={self.cfg.sync}: no event left with {self.inner_done} of {self.M} inner "
                                   "steps of the step done (every worker waits for a model none will send)")
            self._process(heapq.heappop(self.events))
        self._churn(st.step + 1)
        self._charge(st, time.perf_counter() - t0)
        st.step += 1
        st.samples += self.b * self.M
        st.in_sync = False  # the final synchronisation flushes the workers' unsent steps

    def _churn(self, step: int) -> None:
        """Faults after metrics step ``step``: a leaving worker drops its round in progress (a Delta it sent
        still arrives; the model sent back then waits for its return); a rejoining one pulls its server's model."""
        for c in self.churn:
            i, w = c.rank, self.workers[c.rank]
            if c.leave_step == step:
                self.gone.add(i)
                if w.state == "run":
                    self.events = [e for e in self.events if not (e[4] == "inner" and e[2] == i)]
                    heapq.heapify(self.events)
                    w.state = "gone"
            elif c.rejoin_step == step:
                self.gone.discard(i)
                if w.state == "gone":
                    w.state = "away"
                    self.release(self.server_of(i), [i], self.now)

    def _charge(self, st, wall: float) -> None:
        """The step's clock, bytes and statistics (the loss: the mean over its inner steps, in event order)."""
        stats = self._gathered()
        cols = WorkerStats.from_rows(WorkerStats.rows(stats)) if stats else None
        st.clock["t_virtual"] = max(st.clock["t_virtual"], self.now)
        if cols is not None:
            st.clock["t_virtual_compute"] += float(cols.t_compute.sum()) / self.M
        st.clock["t_virtual_comm"] = max(0.0, st.clock["t_virtual"] - st.clock["t_virtual_compute"])
        st.bytes_sent += self.tally.bytes_sent
        st.meas["t_step"] += wall
        if cols is None:
            return
        st.meas["t_compute"] += float(cols.t_compute.sum()) / self.M if self.cfg.clock == "measured" else 0.0
        for iv in (st.interval, st.epoch_interval):
            iv.loss += float(cols.loss.mean())
            iv.correct += float(cols.correct.sum())
            iv.count += float(cols.count.sum())
            iv.n += 1

    def final_sync(self, ctx: StepContext) -> None:
        """Flush (module docstring): no more inner steps; every worker with steps since its model pushes its
        partial Delta_i at its last step's end; every message is delivered; the scheme merges what is left."""
        st = ctx.state
        t0 = time.perf_counter()
        self.tally = StepTally()
        self.flushing = True
        self.events = [e for e in self.events if e[4] != "inner"]
        heapq.heapify(self.events)
        for i, w in enumerate(self.workers):
            if w.state == "run":
                if w.steps:
                    self._push(i, w.t)
                else:
                    w.state = "idle"
        self._drain()
        self.flush(self.now)
        self._drain()
        self._charge(st, time.perf_counter() - t0)
        st.meas["t_comm"] += time.perf_counter() - t0
        st.in_sync = True

    def _drain(self) -> None:
        while self.events:
            self._process(heapq.heappop(self.events))

    def evaluable(self, in_sync: bool) -> bool:
        """Always: the run is evaluated on the global model."""
        return True

    # ----------------------------------------------------------------------------------- checkpoints
    def ports(self) -> list[ServerPort]:
        """Every server port of the scheme (their queues are state)."""
        return []

    def state_dict(self) -> dict:
        """The engine between two metrics steps: the events in flight (with their Deltas and models), the
        workers' rounds, their inner optimisers, the ports' queues and the servers' state."""
        def opt_state(o):
            return [x.state_dict() for x in o] if isinstance(o, list) else o.state_dict()

        return copy.deepcopy({
            "events": self.events, "seq": self.seq, "now": self.now, "start": self.start,
            "workers": [asdict(w) for w in self.workers], "open_batch": self.open_batch, "version": self.version,
            "inner_steps": self.inner_steps, "rounds": self.rounds, "gone": sorted(self.gone),
            "inner": {i: o.state_dict() for i, o in self.inner.items()},
            "ports": [p.free for p in self.ports()],
            "server": {k: getattr(self, k) for k in self.SERVER_STATE},
            "server_opt": {k: opt_state(getattr(self, k)) for k in self.SERVER_OPTIMIZERS}})

    def load_state_dict(self, s: dict) -> None:
        s = copy.deepcopy(s)
        self.events, self.seq, self.now = s["events"], s["seq"], s["now"]
        heapq.heapify(self.events)
        self.start.copy_(s["start"])
        self.workers = [Worker(**w) for w in s["workers"]]
        self.open_batch, self.version = s["open_batch"], s["version"]
        self.inner_steps, self.rounds, self.gone = s["inner_steps"], s["rounds"], set(s["gone"])
        for i, d in s["inner"].items():
            self.inner[i].load_state_dict(d)
        for p, free in zip(self.ports(), s["ports"], strict=True):
            p.free = free
        for k, v in s["server"].items():
            setattr(self, k, v)
        for k, d in s["server_opt"].items():
            o = getattr(self, k)
            for x, dx in (zip(o, d, strict=True) if isinstance(o, list) else [(o, d)]):
                x.load_state_dict(dx)

    @contextmanager
    def evaluation_model(self):
        """Replica 0 holds the global model (with worker 0's buffers) in the body."""
        own = self.rep.params[0].clone()
        self.rep.params[0].copy_(self.global_row)
        try:
            yield self.rep
        finally:
            self.rep.params[0].copy_(own)
