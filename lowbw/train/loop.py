"""The training loop shared by every backend: one :class:`Trainer` per process, over a world of replicas.

Per step (:meth:`Trainer.train_step`): every replica held here takes its next local batch (its own seeded
stream and augmentation generator) and computes its gradient; the scheme's action aggregates gradients
and/or averages models through the world's collectives (:class:`~lowbw.train.synchroniser.Synchroniser`);
per-worker statistics (:class:`~lowbw.train.state.WorkerStats`) are gathered unmetered and turned into one
record. The virtual clock advances by

    max over workers (compute) + max over workers ((de)compression) + cost-model time of the step's calls

where compute and (de)compression are measured (``clock=measured``) or modelled (``clock=model``:
``clock_sample_s`` per sample, ``clock_compress_mbyte_s``), and the communication time is the
:mod:`lowbw.net.costmodel` time of the exact collective calls the step made, at the configured link; an
exchange in the background (diloco with ``diloco_delay``) adds, at the step it lands, only the part of its
time the steps since its start did not hide (:mod:`lowbw.train.streaming`). With
``clock=model`` every field of metrics.jsonl except the measured ``t_compute/t_compress/t_comm/t_step/t_wall``
is deterministic, ``t_virtual*`` included.

Outputs (main process): ``config.json`` at the start, one ``metrics.jsonl`` line every ``log_every`` steps
and at every evaluation, ``summary.json`` last and atomically. The run's progress is one
:class:`~lowbw.train.state.RunState`; a checkpoint is that state plus the tensors of the replicas, the
optimiser, the data streams and the compressors (:meth:`Trainer.state_dict`).
"""

from __future__ import annotations

import os
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

from lowbw.compress.base import NonFiniteError
from lowbw.runio import append_jsonl, atomic_write_json
from lowbw.train import checkpoint as ckpt
from lowbw.train import records
from lowbw.train.assign import Batches, assign
from lowbw.train.optim import clip_rows, make_optimizer
from lowbw.train.ps import ParameterServer
from lowbw.train.replicas import Replicas
from lowbw.train.schedule import LRSchedule, dynamic_batch
from lowbw.train.state import Interval, RunState, WorkerStats
from lowbw.train.streaming import landing_wait
from lowbw.train.sync import Action
from lowbw.train.synchroniser import Synchroniser
from lowbw.train.targets import parse_targets
from lowbw.train.workload import load_workload
from lowbw.train.world import Exchange

__all__ = ["Trainer", "TIME_FIELDS", "WALL_FIELDS", "CHECKPOINT_FORMAT", "resolve_device"]

# measured (machine- and load-dependent) fields of a metrics line; t_virtual* are measured too unless clock=model
WALL_FIELDS = ("t_compute", "t_compress", "t_comm", "t_step", "t_meta", "t_wall")
TIME_FIELDS = WALL_FIELDS + ("t_virtual", "t_virtual_compute", "t_virtual_compress", "t_virtual_comm")
# the layout of Trainer.state_dict(); a checkpoint of another layout is refused on resume
CHECKPOINT_FORMAT = 2


def resolve_device(cfg) -> torch.device:
    if cfg.device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if cfg.device == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("device=cuda but CUDA is not available")
    return torch.device(cfg.device)


class Trainer:
    """One process's part of a run: its replicas, their batches and optimiser, the scheme's communication,
    and the run's :class:`RunState` (``state``; identical on every process)."""

    def __init__(self, cfg, world, out: str | os.PathLike | None = None, data=None, device=None):
        self.cfg, self.world = cfg, world
        self.out = Path(out) if out is not None else None
        self.device = torch.device(device) if device is not None else resolve_device(cfg)
        if self.device.type == "cuda" and world.kind == "dist":
            self.device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
            torch.cuda.set_device(self.device)
        self.data = load_workload(cfg, self.device, data)  # dataset + model + evaluation sets
        self.N = self.data.n_train
        torch.manual_seed(cfg.seed)  # model initialisation: identical replicas on every backend
        self.model_template = self.data.model(cfg.model, self.device)
        engine = cfg.sim_engine
        if engine == "auto" or world.kind == "dist":
            engine = "vmap" if (self.device.type == "cuda" and world.kind == "sim") else "loop"
        self.rep = Replicas(self.model_template, len(world.ranks), self.device, engine)
        # the layout tells the optimiser which tensors are matrices
        self.opt = make_optimizer(cfg, len(world.ranks), self.rep.P, self.device, self.rep.p_layout)
        parts = assign(cfg.assignment, self.N, cfg.workers, cfg.seed, shards=cfg.shards, copies=cfg.copies,
                       households=cfg.households, household_shards=cfg.household_shards)
        self.parts_sizes = [len(p) for p in parts]
        self.batches = Batches(self.data, parts, world.ranks, cfg.seed, self.device)
        self.total = cfg.total_samples(self.N)
        self.sched = LRSchedule(cfg, self.N, self.total)
        self.eval_every_samples = cfg.eval_every * self.N
        self.ps = None  # parameter-server schemes (ssp, async) replace synchronous steps by server updates
        self.sync = None
        if cfg.sync in ("ssp", "async"):
            self.ps = ParameterServer(cfg, self.rep, self.batches, cfg.global_batch // cfg.workers)
        else:
            self.sync = Synchroniser(cfg, world, self.rep, self.opt)  # desloc averages the optimiser's moments
        self.state = RunState(batch=cfg.global_batch, next_eval=self.eval_every_samples,
                              ttt={t.name: None for t in parse_targets(cfg.targets)})
        self._t_start = time.perf_counter()

    # ------------------------------------------------------------------------------------------- views
    @property
    def step(self) -> int:
        return self.state.step

    @property
    def clock(self) -> dict[str, float]:
        """The virtual clock (seconds) and its alpha-beta coefficients (:data:`lowbw.train.state.CLOCK_FIELDS`)."""
        return self.state.clock

    @property
    def local_batch(self) -> int:
        return self.state.batch // self.cfg.workers

    def batch(self, i: int, b: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Replica ``i``'s next local batch of ``b`` samples."""
        return self.batches(i, b)

    def _wall(self) -> float:
        """Wall seconds of the run, earlier (checkpointed) segments included."""
        return self.state.wall_s + (time.perf_counter() - self._t_start)

    # ------------------------------------------------------------------------------------------- one step
    def train_step(self) -> None:
        """One synchronous step of every replica held here.

        1. local gradients (and, where the scheme says, their average over a group);
        2. the optimiser's update of every replica's row;
        3. model averaging, where the scheme says;
        4. every worker's statistics, gathered unmetered, into the run's clock and records.
        """
        cfg, st, world = self.cfg, self.state, self.world
        t0 = time.perf_counter()
        b = self.local_batch
        lr = self.sched(st.samples)
        st.step += 1
        act = self.sync.action(st.step, st.samples / self.total)
        world.now = st.clock["t_virtual"]
        grads, stats, exchanges = self.gradients(b, act)
        t_opt = time.perf_counter()
        self.opt.step(self.rep.params, clip_rows(grads, cfg.grad_clip), lr)
        t_opt = (time.perf_counter() - t_opt) / len(stats)  # per replica: the optimiser's update of its row
        ms = self.sync.model_sync(st.step, act)  # model averaging / diloco's outer steps (landing, starting)
        exchanges += ms.foreground
        # replicas are equal after a world average, or after a world gradient step from equal replicas
        st.in_sync = ms.equal or (act.grad == "world" and st.in_sync)
        st.samples += b * cfg.workers
        v_comm, meta_s = 0.0, 0.0
        for ex in exchanges:
            meta_s += ex.meta_s
            v_comm += ex.v_comm
            self._count_comm(ex)
        for ex in exchanges + [x.exchange for x in ms.landed]:  # a background exchange counts when it lands
            for i, s in enumerate(stats):
                s.add_exchange(ex.busy_s[i], ex.comm_s[i], ex.bytes_sent[i])
        meta_s += sum(x.exchange.meta_s for x in ms.landed)
        for s in stats:
            s.t_compute += t_opt  # a worker's compute: its batch, forward + backward, and its optimiser update
        t_meta = time.perf_counter()
        cols = WorkerStats.from_rows(world.allgather_rows(WorkerStats.rows(stats)))
        st.meas["t_meta"] += time.perf_counter() - t_meta + meta_s
        v_compress = (self._compress_model_s(self.sync.compressed_bytes(act))
                      if (cfg.clock == "model" and self.sync.compresses(act)) else None)
        self._record_step(cols, v_comm, v_compress, time.perf_counter() - t0)
        self._overlap(ms)

    def _overlap(self, ms) -> None:
        """The virtual clock of background exchanges (diloco with tau > 0; :mod:`lowbw.train.streaming`):
        each exchange landing now makes the step wait w = max(0, e - T) for the link to finish it (T: the
        clock after this step's own time); exchanges starting now start at the clock after those waits."""
        clock = self.state.clock
        for x in ms.landed:
            ex = x.exchange
            w, self.sync.link_free = landing_wait(clock["t_virtual"], x.t_start, ex.v_comm, self.sync.link_free)
            clock["t_virtual"] += w
            clock["t_virtual_comm"] += w
            self._count_comm(ex, w / ex.v_comm if ex.v_comm > 0 else 0.0)
        for x in ms.started:
            x.t_start = clock["t_virtual"]

    def gradients(self, b: int, act: Action) -> tuple[torch.Tensor, list[WorkerStats], list[Exchange]]:
        """Every local replica's gradient on its next ``b`` samples, averaged over its group at ``act.grad``
        (None: kept local). Returns the gradient rows ``[R, P]``, per replica its loss, correct predictions,
        sample count and compute seconds (batch + forward/backward), and the exchanges made."""
        rep, R = self.rep, len(self.world.ranks)
        t_batch = time.perf_counter()
        xs, ys = zip(*(self.batches(i, b) for i in range(R)), strict=True)
        t_batch = (time.perf_counter() - t_batch) / R  # per replica: loading and augmenting its batch
        losses, correct, secs = rep.forward_backward(list(xs), list(ys))
        stats = [WorkerStats(loss=losses[i], correct=correct[i], count=b, t_compute=t_batch + secs[i])
                 for i in range(R)]
        if act.grad is None:
            return rep.grads, stats, []
        if self.sync.policy is not None:
            self.sync.adapt(self.state.step, self.state.clock)
        ex = self.sync.aggregate(act.grad)
        return torch.stack(ex.outputs), stats, [ex]

    def _compress_model_s(self, nbytes: int | None = None) -> float:
        """clock=model: seconds to (de)compress ``nbytes`` (default: the gradient's) at
        ``clock_compress_mbyte_s``."""
        cfg = self.cfg
        if self.sync.comp is None or cfg.clock_compress_mbyte_s <= 0:
            return 0.0
        return (self.rep.P * 4 if nbytes is None else nbytes) / (cfg.clock_compress_mbyte_s * 1e6)

    def _count_comm(self, ex: Exchange, weight: float = 1.0) -> None:
        """Accumulate the alpha-beta coefficients of an exchange (lets the report re-time at any link);
        ``weight``: the exposed fraction of a background exchange (:mod:`lowbw.train.streaming`)."""
        self.state.clock["comm_alpha_terms"] += ex.v_alpha * weight
        self.state.clock["comm_beta_bytes"] += ex.v_beta_bytes * weight

    def _record_step(self, cols: WorkerStats, v_comm: float, v_compress: float | None, wall: float) -> None:
        """Advance the clocks and records by one step whose every worker's statistics are ``cols``."""
        cfg, st = self.cfg, self.state
        # a synchronous step waits for its slowest worker: worker i computes worker_speeds[i] x as long
        speeds = torch.tensor(cfg.worker_speeds or [1.0] * cfg.workers, dtype=torch.float64)
        if cfg.clock == "model":
            v_compute = cfg.clock_sample_s * self.local_batch * float(speeds.max())
            v_compress = (v_compress or 0.0) * float(speeds.max())
        else:
            v_compute = float((cols.t_compute * speeds).max())
            v_compress = float((cols.t_compress * speeds).max())
        v_compute *= cfg.clock_compute_scale  # workers sharing cores (1: one machine each)
        v_compress *= cfg.clock_compress_scale or cfg.clock_compute_scale
        clock, meas = st.clock, st.meas
        clock["t_virtual_compute"] += v_compute
        clock["t_virtual_compress"] += v_compress
        clock["t_virtual_comm"] += v_comm
        clock["t_virtual"] += v_compute + v_compress + v_comm
        meas["t_compute"] += float(cols.t_compute.max())
        meas["t_compress"] += float(cols.t_compress.max())
        meas["t_comm"] += float(cols.t_comm.max())
        meas["t_step"] += wall
        st.bytes_sent += int(cols.bytes_sent.sum())
        for iv in (st.interval, st.epoch_interval):
            iv.loss += float(cols.loss.mean())
            iv.correct += float(cols.correct.sum())
            iv.count += float(cols.count.sum())
            iv.n += 1

    def ps_update(self) -> None:
        """Parameter server (ssp/async, sim): one server update; a metrics step is M updates."""
        cfg, st = self.cfg, self.state
        t0 = time.perf_counter()
        info = self.ps.update(self.sched(st.samples))
        st.samples += info.count
        st.bytes_sent += info.bytes_sent
        # event time; the split is per-worker average compute and the rest (communication and waiting)
        st.clock["t_virtual"] = self.ps.now
        st.clock["t_virtual_compute"] += info.t_compute / cfg.workers
        st.clock["t_virtual_comm"] = max(0.0, st.clock["t_virtual"] - st.clock["t_virtual_compute"])
        st.meas["t_compute"] += info.t_compute if cfg.clock == "measured" else 0.0
        st.meas["t_step"] += time.perf_counter() - t0
        for iv in (st.interval, st.epoch_interval):
            iv.loss += info.loss / cfg.workers
            iv.correct += info.correct
            iv.count += info.count
            iv.n += 1 / cfg.workers
        if self.ps.updates % cfg.workers == 0:
            st.step += 1
        st.in_sync = True  # evaluation uses the server's model

    def final_sync(self) -> None:
        """Average the world's models after a last step that left replicas apart (counted as communication);
        diloco: land the exchanges in flight, then the outer step of every fragment with local steps."""
        st, world = self.state, self.world
        t_sync = time.perf_counter()
        ms = self.sync.finish()
        stats = [WorkerStats() for _ in world.ranks]
        for ex in [x.exchange for x in ms.landed] + ms.foreground:
            for i, s in enumerate(stats):
                s.add_exchange(ex.busy_s[i], ex.comm_s[i], ex.bytes_sent[i])
        st.bytes_sent += int(WorkerStats.from_rows(world.allgather_rows(WorkerStats.rows(stats))).bytes_sent.sum())
        self._overlap(ms)
        for ex in ms.foreground:
            st.clock["t_virtual_comm"] += ex.v_comm
            st.clock["t_virtual"] += ex.v_comm
            self._count_comm(ex)
        st.in_sync = True
        t_sync = time.perf_counter() - t_sync  # measured like a step: the final synchronisation is training
        st.meas["t_step"] += t_sync
        st.meas["t_comm"] += t_sync

    # ------------------------------------------------------------------------------------------- evaluation
    def evaluate(self) -> dict[str, float | None]:
        """Loss and accuracy on every evaluation set of the workload (``val_loss``, ``val_acc``, ...; text:
        ``val_ppl`` too) of worker 0's model (the server's for ssp/async)."""
        res: dict[str, float] = {}
        if self.world.is_main:
            wl, bs = self.data, self.cfg.eval_batch_size
            rep = self.ps.server if self.ps is not None else self.rep
            with self._global_model():
                for split, (x, y) in wl.eval_sets().items():
                    res[f"{split}_loss"], res[f"{split}_acc"] = rep.evaluate(0, x, y, bs, wl.eval_input)
            res.update(wl.derived_metrics(res))
        return records.finite(self.world.broadcast_obj(res))

    @property
    def evaluable(self) -> bool:
        """Can the run be evaluated now: the replicas agree, or (streaming diloco) its global model is
        theta_start, equal on every worker whatever the replicas do."""
        return self.state.in_sync or (self.sync is not None and self.sync.global_row is not None)

    @contextmanager
    def _global_model(self):
        """Replica 0 holds the model to evaluate in the body: itself, or streaming diloco's theta_start."""
        g = self.sync.global_row if self.sync is not None else None
        if g is None:
            yield
            return
        own = self.rep.params[0].clone()
        self.rep.params[0].copy_(g)
        try:
            yield
        finally:
            self.rep.params[0].copy_(own)

    def after_eval(self, ev: dict[str, Any]) -> None:
        """Best accuracies, times to target, and the dynamic batch size after an evaluation ``ev``."""
        cfg, st = self.cfg, self.state
        records.note_eval(st, ev, cfg.targets, self.N, self._wall())
        # the dynamic batch size (draft paper 2.5.1): E_e against E_0, never shrinking
        if cfg.dynamic_batch != "off":
            err = self._error_metric(ev)
            if st.step == 0 or st.e0 is None:
                st.e0 = err
            elif err is not None:
                nb = dynamic_batch(cfg.global_batch, st.e0, err, cfg.dynamic_batch_max, cfg.dynamic_batch,
                                   cfg.workers)
                st.batch = max(st.batch, nb)
        st.epoch_interval = Interval()

    def _error_metric(self, ev) -> float | None:
        m = self.cfg.dynamic_batch_metric
        if m == "val_loss":
            return ev.get("val_loss")
        if m == "val_error":
            return None if ev.get("val_acc") is None else 1.0 - ev["val_acc"]
        iv = self.state.epoch_interval
        if iv.n == 0:  # before training: the initial model's loss on a first batch of worker 0's data
            x, y = self.data.probe(min(self.N, 1000))
            rep = self.ps.server if self.ps is not None else self.rep
            loss, _ = rep.evaluate(0, x, y, self.cfg.eval_batch_size, self.data.eval_input)
            return self.world.broadcast_obj(loss)
        return iv.loss / iv.n

    # ------------------------------------------------------------------------------------------- records
    def write_line(self, ev: dict[str, Any] | None) -> dict[str, Any]:
        """Write the metrics line of now (``ev``: an evaluation's results) and start a new interval."""
        st = self.state
        density = self.sync.density if self.sync is not None else None
        line = records.metrics_line(st, self.cfg, self.N, self.sched(st.samples), self._wall(), ev, density)
        st.interval = Interval()
        if self.world.is_main and self.out is not None:
            append_jsonl(self.out / "metrics.jsonl", line)
        st.lines += 1
        return line

    # ------------------------------------------------------------------------------------------- checkpoints
    def state_dict(self) -> dict[str, Any]:
        """This process's checkpoint: the run state and the tensors of every collaborator."""
        st = self.state.to_dict()
        st["wall_s"] = self._wall()
        s = {"format": CHECKPOINT_FORMAT, "run": st, "replicas": self.rep.state_dict(),
             "optimizer": self.opt.state_dict(), "batches": self.batches.state_dict(),
             "torch_rng": torch.get_rng_state()}
        if self.ps is not None:
            s["ps"] = self.ps.state_dict()
        else:
            s["synchroniser"] = self.sync.state_dict()
        return s

    def load_state_dict(self, s: dict[str, Any]) -> None:
        if s.get("format") != CHECKPOINT_FORMAT:
            raise RuntimeError(f"{self.out}/checkpoint has format {s.get('format')} (this lowbw reads format "
                               f"{CHECKPOINT_FORMAT}); delete it to start over")
        self.state = RunState.from_dict(s["run"])
        self.rep.load_state_dict(s["replicas"])
        self.opt.load_state_dict(s["optimizer"])
        self.batches.load_state_dict(s["batches"])
        torch.set_rng_state(s["torch_rng"])
        if self.ps is not None:
            self.ps.load_state_dict(s["ps"])
        else:
            self.sync.load_state_dict(s["synchroniser"])

    def save_checkpoint(self) -> None:
        if self.out is None:
            return
        world = self.world
        rank = world.ranks[0] if world.kind == "dist" else 0
        ckpt.save_part(self.out, self.state.step, rank, self.state_dict())
        world.barrier()
        if world.is_main:
            nparts = self.cfg.workers if world.kind == "dist" else 1
            ckpt.write_marker(self.out, self.state.step, nparts, self.state.lines,
                              ckpt.fingerprint(self.cfg.to_dict()))
            ckpt.prune(self.out, self.state.step)
        world.barrier()

    def try_resume(self) -> bool:
        """Load the run directory's checkpoint, if any, and drop metrics lines written after it."""
        if self.out is None:
            return False
        world = self.world
        marker = world.broadcast_obj(ckpt.read_marker(self.out) if world.is_main else None)
        if marker is None:
            return False
        if marker["fingerprint"] != ckpt.fingerprint(self.cfg.to_dict()):
            raise RuntimeError(f"{self.out}/checkpoint was written by a different config; delete it to start over")
        rank = world.ranks[0] if world.kind == "dist" else 0
        self.load_state_dict(ckpt.load_part(self.out, marker["step"], rank, map_location=self.device))
        if world.is_main:
            records.truncate_metrics(self.out / "metrics.jsonl", marker["metrics_lines"])
        world.barrier()
        return True

    # ------------------------------------------------------------------------------------------- the run
    def run(self) -> dict[str, Any]:
        """Train to the configured length from the start or from the run directory's checkpoint; writes the
        run directory (main process) and returns the summary."""
        cfg, world = self.cfg, self.world
        self._t_start = time.perf_counter()
        # 1. resume from a checkpoint, or start metrics.jsonl afresh; config.json either way
        resumed = self.try_resume()
        st = self.state
        if world.is_main and self.out is not None:
            if not resumed:
                (self.out / "metrics.jsonl").unlink(missing_ok=True)
            records.write_config(
                self.out / "config.json", cfg, resumed,
                data={"dataset": cfg.dataset, **self.data.describe(), "worker_samples": self.parts_sizes},
                model={"name": cfg.model, "params": self.rep.P, "grad_bytes": self.rep.P * 4,
                       "engine": self.rep.engine},
                device=self.device)
        pbar = records.progress_bar(cfg, self.total, st.samples) if world.is_main and cfg.progress else None
        # 2. the initial model's evaluation: the line of step 0
        if not resumed:
            ev = self.evaluate()
            self.after_eval(ev)
            self.write_line(ev)
        stopped: str | None = None  # why the run ended early: diverged, max_wall_s
        try:
            while st.samples < self.total:
                # 3. one step: a synchronous step, or one parameter-server update (a step is M of them)
                s0, step0 = st.samples, st.step
                if self.ps is not None:
                    self.ps_update()
                else:
                    try:
                        self.train_step()
                    except NonFiniteError:
                        # the method diverged (NaN/Inf gradients): a result, not a crash; summary says so
                        stopped = "diverged"
                        st.in_sync = True  # no final averaging of NaN replicas
                        break
                if pbar is not None:
                    pbar.update(st.samples - s0)
                if st.step == step0:
                    continue
                # 4. evaluation when due and the replicas agree (local schemes: at the next world average)
                while st.samples >= st.next_eval:
                    st.eval_pending = True
                    st.next_eval += self.eval_every_samples
                ev = None
                if st.eval_pending and self.evaluable and st.samples < self.total:
                    ev = self.evaluate()
                    self.after_eval(ev)
                    st.eval_pending = False
                # 5. a metrics line every log_every steps and at every evaluation; the wall-clock limit
                if ev is not None or st.step % cfg.log_every == 0:
                    line = self.write_line(ev)
                    if pbar is not None:
                        records.progress_postfix(pbar, line, ev)
                    if cfg.max_wall_s and world.broadcast_obj(self._wall() >= cfg.max_wall_s):
                        stopped = "max_wall_s"
                # 6. a checkpoint every checkpoint_every steps
                if cfg.checkpoint_every and st.step % cfg.checkpoint_every == 0 and st.samples < self.total:
                    self.save_checkpoint()
                if stopped:
                    break
        finally:
            if pbar is not None:
                pbar.close()
        # 7. the final model: synchronise if the last step left replicas apart
        if not st.in_sync and stopped is None and self.ps is None:
            self.final_sync()
        if self.sync is not None:
            self.sync.close()
        # 8. the final evaluation and metrics line, unless the last step had them; summary.json
        if st.last_eval_step != st.step or st.interval.n:
            ev = self.evaluate() if st.last_eval_step != st.step else {}
            if ev:
                self.after_eval(ev)
            self.write_line(ev)
        summ = records.summary(st, cfg, self.N, self.rep.P, self._wall(), stopped)
        if world.is_main and self.out is not None:
            atomic_write_json(self.out / "summary.json", summ)
        return summ
