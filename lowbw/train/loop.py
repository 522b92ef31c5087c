"""The training loop shared by every backend: one :class:`Trainer` per process, over a world of replicas.

Per step (:meth:`Trainer.train_step`) the run's sync scheme (one object behind one interface,
:mod:`lowbw.train.schemes`, chosen by ``sync``) runs the step: every replica held here takes its next local
batch (its own seeded stream and augmentation generator) and computes its gradient (the local step,
:class:`~lowbw.train.schemes.base.ReplicaStep`), then the scheme aggregates gradients, averages models or
takes an outer step through the world's collectives, or (parameter server) applies one server update; it
charges the step's time and bytes to the run's virtual clock (:mod:`lowbw.train.schemes.charge`). With
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
from pathlib import Path
from typing import Any

import torch

from lowbw.compress.base import NonFiniteError
from lowbw.runs.io import append_jsonl, atomic_write_json
from lowbw.train import checkpoint as ckpt
from lowbw.train import records
from lowbw.train.assign import Batches, assign
from lowbw.train.masks import MaskStreams
from lowbw.train.optim import make_optimizer
from lowbw.train.replicas import Replicas
from lowbw.train.schedule import LRSchedule, dynamic_batch
from lowbw.train.schemes import make_scheme
from lowbw.train.schemes.base import ReplicaStep, StepContext
from lowbw.train.state import Interval, RunState
from lowbw.train.targets import parse_targets
from lowbw.train.workload import build_template, load_workload

__all__ = ["Trainer", "TIME_FIELDS", "WALL_FIELDS", "CHECKPOINT_FORMAT", "resolve_device"]

# measured (machine- and load-dependent) fields of a metrics line; t_virtual* are measured too unless clock=model
WALL_FIELDS = ("t_compute", "t_compress", "t_comm", "t_step", "t_meta", "t_wall")
TIME_FIELDS = WALL_FIELDS + ("t_virtual", "t_virtual_compute", "t_virtual_compress", "t_virtual_comm")
# the layout of Trainer.state_dict(); a checkpoint of another layout is refused on resume
CHECKPOINT_FORMAT = 4


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
        self.model_template = build_template(cfg, self.data, self.device)
        engine = cfg.sim_engine
        if engine == "auto" or world.kind == "dist":
            # vmap would draw every replica's dropout masks from one stream (lowbw.train.masks): loop then
            engine = "vmap" if (self.device.type == "cuda" and world.kind == "sim" and not cfg.dropout) else "loop"
        # each worker's dropout masks from its own stream, alike on every backend
        masks = MaskStreams(cfg.seed, world.ranks, self.device) if cfg.dropout else None
        self.rep = Replicas(self.model_template, len(world.ranks), self.device, engine, masks)
        # the layout tells the optimiser which tensors are matrices
        self.opt = make_optimizer(cfg, len(world.ranks), self.rep.P, self.device, self.rep.p_layout)
        parts = assign(cfg.assignment, self.N, cfg.workers, cfg.seed, shards=cfg.shards, copies=cfg.copies,
                       households=cfg.households, household_shards=cfg.household_shards)
        self.parts_sizes = [len(p) for p in parts]
        self.batches = Batches(self.data, parts, world.ranks, cfg.seed, self.device)
        self.total = cfg.total_samples(self.N)
        self.sched = LRSchedule(cfg, self.N, self.total)
        self.eval_every_samples = cfg.eval_every * self.N
        # the sync scheme (cfg.sync): what every step does after its local step; desloc averages the
        # optimiser's moments, the parameter server (ssp, async) draws its own batches
        self.sync = make_scheme(cfg, world, self.rep, self.opt, self.batches)
        # the local step the scheme calls: a collaborator, not a method of this Trainer (DDP: its own)
        self.local_step = ReplicaStep(self.rep, self.batches, len(world.ranks))
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
        """One training step, as the sync scheme runs it (:meth:`lowbw.train.schemes.base.Scheme.step`)."""
        self.sync.step(self._context())

    def final_sync(self) -> None:
        """Bring together the replicas a last step left apart (the scheme's final synchronisation)."""
        self.sync.final_sync(self._context())

    def _context(self) -> StepContext:
        """What the scheme's step gets: the collaborators, this step's learning rate, the run state."""
        st = self.state
        return StepContext(cfg=self.cfg, world=self.world, rep=self.rep, opt=self.opt, state=st,
                           lr=self.sched(st.samples), local_batch=self.local_batch, total=self.total,
                           local_step=self.local_step)

    # ------------------------------------------------------------------------------------------- evaluation
    def evaluate(self) -> dict[str, float | None]:
        """Loss and accuracy on every evaluation set of the workload (``val_loss``, ``val_acc``, ...; text:
        ``val_ppl`` too) of the model the scheme names (worker 0's, a global model, the server's)."""
        res: dict[str, float] = {}
        if self.world.is_main:
            wl, bs = self.data, self.cfg.eval_batch_size
            with self.sync.evaluation_model() as rep:
                for split, (x, y) in wl.eval_sets().items():
                    res[f"{split}_loss"], res[f"{split}_acc"] = rep.evaluate(0, x, y, bs, wl.eval_input)
            res.update(wl.derived_metrics(res))
        return records.finite(self.world.broadcast_obj(res))

    @property
    def evaluable(self) -> bool:
        """Can the run be evaluated now: the replicas agree, or the scheme has a model equal on every worker
        (streaming diloco's theta_start, sparta's worker 0)."""
        return self.sync.evaluable(self.state.in_sync)

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
            with self.sync.evaluation_model() as rep:
                loss, _ = rep.evaluate(0, x, y, self.cfg.eval_batch_size, self.data.eval_input)
            return self.world.broadcast_obj(loss)
        return iv.loss / iv.n

    # ------------------------------------------------------------------------------------------- records
    def write_line(self, ev: dict[str, Any] | None) -> dict[str, Any]:
        """Write the metrics line of now (``ev``: an evaluation's results) and start a new interval."""
        st = self.state
        line = records.metrics_line(st, self.cfg, self.N, self.sched(st.samples), self._wall(), ev,
                                    self.sync.density)
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
             "torch_rng": torch.get_rng_state(), "scheme": self.sync.state_dict()}
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
        self.sync.load_state_dict(s["scheme"])

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
                # 3. one step of the scheme (the parameter server's: one update; a step is M of them)
                s0, step0 = st.samples, st.step
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
        if not st.in_sync and stopped is None:
            self.final_sync()
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
