"""The training loop shared by every backend: one :class:`Trainer` per process, over a world of replicas.

Per step: every replica held here takes its next local batch (its own seeded stream and augmentation
generator), computes its gradient; the scheme's action (:mod:`lowbw.train.sync`) aggregates gradients
and/or averages models through the world's collectives; per-worker statistics are gathered (unmetered) and
turned into one record. The virtual clock advances by

    max over workers (compute) + max over workers ((de)compression) + cost-model time of the step's calls

where compute and (de)compression are measured (``clock=measured``) or modelled (``clock=model``:
``clock_sample_s`` per sample, ``clock_compress_mbyte_s``), and the communication time is the
:mod:`lowbw.net.costmodel` time of the exact collective calls the step made, at the configured link. With
``clock=model`` every field of metrics.jsonl except the measured ``t_compute/t_compress/t_comm/t_step/t_wall``
is deterministic, ``t_virtual*`` included.

Outputs (main process): ``config.json`` at the start, one ``metrics.jsonl`` line every ``log_every`` steps
and at every evaluation, ``summary.json`` last and atomically.
"""

from __future__ import annotations

import math
import os
import time
from pathlib import Path
from typing import Any

import torch

from lowbw.compress.base import NonFiniteError
from lowbw.runio import append_jsonl, atomic_write_json
from lowbw.train import checkpoint as ckpt
from lowbw.train.assign import WorkerStream, assign, generator, load_data
from lowbw.train.augment import Augmenter
from lowbw.train.models import build_model
from lowbw.train.optim import FlatOptimizer
from lowbw.train.replicas import Replicas
from lowbw.train.schedule import LRSchedule, dynamic_batch
from lowbw.train.sync import Scheme, aggregate_rank, average_rank, make_compressor, make_states

__all__ = ["Trainer", "TIME_FIELDS", "WALL_FIELDS"]

# measured (machine- and load-dependent) fields of a metrics line; t_virtual* are measured too unless clock=model
WALL_FIELDS = ("t_compute", "t_compress", "t_comm", "t_step", "t_meta", "t_wall")
TIME_FIELDS = WALL_FIELDS + ("t_virtual", "t_virtual_compute", "t_virtual_compress", "t_virtual_comm")
# per-worker statistics gathered every step
_K = ("loss", "correct", "count", "t_compute", "t_compress", "t_comm", "bytes_sent")


def resolve_device(cfg) -> torch.device:
    if cfg.device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if cfg.device == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("device=cuda but CUDA is not available")
    return torch.device(cfg.device)


class Trainer:
    def __init__(self, cfg, world, out: str | os.PathLike | None = None, data=None, device=None):
        self.cfg = cfg
        self.world = world
        self.out = Path(out) if out is not None else None
        self.device = torch.device(device) if device is not None else resolve_device(cfg)
        if self.device.type == "cuda" and world.kind == "dist":
            self.device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
            torch.cuda.set_device(self.device)
        self.data = data if data is not None else load_data(cfg, self.device)
        d = self.data
        self.N = len(d.y_train)
        C, H, _ = d.image_shape
        torch.manual_seed(cfg.seed)  # model initialisation: identical replicas on every backend
        self.model_template = build_model(cfg.model, d.num_classes, C, H, device=self.device)
        engine = cfg.sim_engine
        if engine == "auto" or world.kind == "dist":
            engine = "vmap" if (self.device.type == "cuda" and world.kind == "sim") else "loop"
        self.rep = Replicas(self.model_template, len(world.ranks), self.device, engine)
        self.opt = FlatOptimizer(cfg.optimizer, (len(world.ranks), self.rep.P), self.device, momentum=cfg.momentum,
                                 nesterov=cfg.nesterov, weight_decay=cfg.weight_decay,
                                 betas=(cfg.adam_beta1, cfg.adam_beta2), eps=cfg.adam_eps)
        parts = assign(cfg.assignment, self.N, cfg.workers, cfg.seed, shards=cfg.shards, copies=cfg.copies,
                       households=cfg.households, household_shards=cfg.household_shards)
        self.parts_sizes = [len(p) for p in parts]
        self.streams = [WorkerStream(parts[w], cfg.seed, w) for w in world.ranks]
        self.aug = Augmenter(cfg.augment, C, d.mean, d.std, self.device)
        self.aug_gens = [generator(cfg.seed, "augment", w) for w in world.ranks]
        self.total = cfg.total_samples(self.N)
        self.sched = LRSchedule(cfg, self.N, self.total)
        self.ps_mode = cfg.sync in ("ssp", "async")
        self.scheme = None if self.ps_mode else Scheme(cfg)
        self.comp = make_compressor(cfg)
        self.policy = None
        if cfg.adaptive == "moo":
            from lowbw.adaptive import AdaptiveTopK, candidate_densities

            self.policy = AdaptiveTopK(nbytes=self.rep.P * 4, world_size=cfg.workers,
                                       densities=candidate_densities(cfg.adaptive_c_low, cfg.adaptive_c_high))
            self._sparse = getattr(self.comp, "inner", self.comp)
        self.states = make_states(cfg, world.ranks)
        gran = cfg.granularity if cfg.granularity != "auto" else ("flat" if self.comp is None else "layer")
        self.chunks = self.rep.chunks(gran)
        self._direct = self.comp is None and world.kind == "sim" and cfg.sim_dense == "direct"
        self.B = cfg.global_batch
        self.B0 = self.B
        # progress and records (identical on every process)
        self.step = 0
        self.samples = 0
        self.bytes_sent = 0
        self.clock = {k: 0.0 for k in ("t_virtual", "t_virtual_compute", "t_virtual_compress", "t_virtual_comm",
                                       "comm_alpha_terms", "comm_beta_bytes")}
        # measured seconds (slowest worker per step); t_meta: lowbw's own bookkeeping exchanges (statistics and
        # call records between processes), part of t_step but not of training
        self.meas = {k: 0.0 for k in ("t_compute", "t_compress", "t_comm", "t_step", "t_meta")}
        self.wall0 = 0.0  # wall seconds of earlier (checkpointed) segments of this run
        self._meta_s = 0.0
        self.interval = self._zero_interval()
        self.epoch_interval = self._zero_interval()
        self.eval_every_samples = cfg.eval_every * self.N
        self.next_eval = self.eval_every_samples
        self.eval_pending = False
        self.last_eval_step = -1
        self.e0: float | None = None
        self.best = {"val_acc": None, "test_acc": None}
        self.last_eval: dict[str, Any] = {}
        self.ttt: dict[str, Any] = {f"{t:g}": None for t in cfg.targets}
        self.lines = 0
        self.stopped: str | None = None
        self.in_sync = True
        self.ps = None
        if self.ps_mode:
            from lowbw.train.ps import ParameterServer

            self.ps = ParameterServer(self)
        self._pbar = None

    # ------------------------------------------------------------------------------------------- helpers
    @staticmethod
    def _zero_interval() -> dict[str, float]:
        return {"loss": 0.0, "correct": 0.0, "count": 0.0, "n": 0.0}

    def batch(self, i: int, b: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Replica ``i``'s next local batch: indices from its stream, augmented with its generator."""
        idx = self.streams[i].take(b)
        if self.device.type != "cpu":
            idx = idx.to(self.device)
        return self.aug.train(self.data.x_train[idx], self.aug_gens[i]), self.data.y_train[idx]

    @property
    def local_batch(self) -> int:
        return self.B // self.cfg.workers

    def _wall(self) -> float:
        return self.wall0 + (time.perf_counter() - self._t_start)

    # ------------------------------------------------------------------------------------------- one step
    def _compress_model_s(self) -> float:
        cfg = self.cfg
        if self.comp is None or cfg.clock_compress_mbyte_s <= 0:
            return 0.0
        return self.rep.P * 4 / (cfg.clock_compress_mbyte_s * 1e6)

    def train_step(self) -> None:
        cfg, rep, world = self.cfg, self.rep, self.world
        t0 = time.perf_counter()
        self._meta_s = 0.0  # bookkeeping seconds inside this step's exchanges
        b = self.local_batch
        lr = self.sched(self.samples)
        progress = self.samples / self.total
        R = len(world.ranks)
        xs, ys = [], []
        t_batch = time.perf_counter()
        for i in range(R):
            x, y = self.batch(i, b)
            xs.append(x)
            ys.append(y)
        t_batch = (time.perf_counter() - t_batch) / R  # per replica: loading and augmenting its batch
        losses, correct, secs = rep.forward_backward(xs, ys)
        self.step += 1
        act = self.scheme.action(self.step, progress)
        busy = [0.0] * R
        comm = [0.0] * R
        sent = [0] * R
        v_comm = 0.0
        grads = rep.grads
        world.now = self.clock["t_virtual"]
        if self.policy is not None and act.grad is not None:
            self._adapt()
        if act.grad is not None:
            comp = self.comp
            if self._direct:
                ex = world.dense_mean(act.grad, list(rep.grads), [k * 4 for _, _, k, _ in self.chunks])
            else:
                def work(i, coll):
                    return aggregate_rank(rep.grads[i], self.chunks, coll, comp, self.states[i])

                ex = world.exchange(act.grad, work)
            grads = torch.stack(ex.outputs)
            v_comm += self._tally(ex, busy, comm, sent)
        t_opt = time.perf_counter()
        self.opt.step(rep.params, grads, lr)
        t_opt = (time.perf_counter() - t_opt) / R  # per replica: the optimiser's update of its row
        if act.avg is not None:
            v_comm += self._tally(self._average(act.avg), busy, comm, sent)
        # replicas are equal after a world average, or after a world gradient step from equal replicas
        self.in_sync = act.avg == "world" or (act.grad == "world" and self.in_sync)
        self.samples += b * cfg.workers
        # a worker's compute: its batch, forward + backward, and its optimiser update
        rows = torch.tensor([[losses[i], correct[i], b, t_batch + secs[i] + t_opt, busy[i], comm[i], sent[i]]
                             for i in range(R)], dtype=torch.float64)
        t_meta = time.perf_counter()
        allrows = world.allgather_rows(rows)
        self.meas["t_meta"] += time.perf_counter() - t_meta + self._meta_s
        v_compress = self._compress_model_s() if (cfg.clock == "model" and act.grad is not None) else None
        self._record_step(allrows, v_comm, v_compress, time.perf_counter() - t0)

    def _average(self, level: str):
        rep, cfg = self.rep, self.cfg
        with_buffers = cfg.average_buffers and rep.Q > 0

        def row(i):
            return torch.cat([rep.params[i], rep.buffers[i]]) if with_buffers else rep.params[i]

        if self.world.kind == "sim" and cfg.sim_dense == "direct":
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

    def _adapt(self) -> None:
        """MOO choice of the top-k density at the current bandwidth (lowbw.adaptive). The compression gain
        ||top_c(g)||^2 / ||g||^2 of every candidate c is read off one sort of rank 0's gradient every 10 steps
        (instead of running each candidate for a step, as Tyagi & Swany's exploration does)."""
        from lowbw.train.world import link_for

        pol = self.policy
        if self.step == 1:  # no compute time measured yet: the first step uses the configured ratio
            return
        if self.step % 10 == 2 or not pol.gains:
            g2 = self.rep.grads[0].float().pow(2).sort(descending=True).values.cumsum(0)
            total = float(g2[-1]) if g2.numel() else 0.0
            t_comp = self.clock["t_virtual_compress"] / max(self.step - 1, 1)
            for c in pol.densities:
                k = max(1, math.ceil(c * g2.numel()))
                pol.observe(c, pol.gain_of(float(g2[k - 1]), total), t_comp)
            pol.t_compute_s = self.clock["t_virtual_compute"] / max(self.step - 1, 1)
            pol.current = None  # fresh measurements: decide again
        choice = pol.choose(link_for(self.cfg, "world", self.clock["t_virtual"]))
        self._sparse.ratio = choice.density

    def _tally(self, ex, busy: list[float], comm: list[float], sent: list[int]) -> float:
        """Add one exchange's per-replica busy/comm seconds and bytes into the step's lists; returns its
        modelled communication time (and accumulates its alpha-beta coefficients)."""
        self._meta_s += ex.meta_s
        for i in range(len(busy)):
            busy[i] += ex.busy_s[i]
            comm[i] += ex.comm_s[i]
            sent[i] += ex.bytes_sent[i]
        self._count_comm(ex)
        return ex.v_comm

    def _count_comm(self, ex) -> None:
        """Accumulate the alpha-beta coefficients of an exchange (lets the report re-time at any link)."""
        self.clock["comm_alpha_terms"] += ex.v_alpha
        self.clock["comm_beta_bytes"] += ex.v_beta_bytes

    def _record_step(self, allrows: torch.Tensor, v_comm: float, v_compress: float | None, wall: float) -> None:
        cfg = self.cfg
        k = {n: i for i, n in enumerate(_K)}
        col = lambda n: allrows[:, k[n]]  # noqa: E731
        if cfg.clock == "model":
            v_compute = cfg.clock_sample_s * self.local_batch
            v_compress = v_compress or 0.0
        else:
            v_compute = float(col("t_compute").max())
            v_compress = float(col("t_compress").max())
        v_compute *= cfg.clock_compute_scale  # workers sharing cores (1: one machine each)
        v_compress *= cfg.clock_compute_scale
        self.clock["t_virtual_compute"] += v_compute
        self.clock["t_virtual_compress"] += v_compress
        self.clock["t_virtual_comm"] += v_comm
        self.clock["t_virtual"] += v_compute + v_compress + v_comm
        self.meas["t_compute"] += float(col("t_compute").max())
        self.meas["t_compress"] += float(col("t_compress").max())
        self.meas["t_comm"] += float(col("t_comm").max())
        self.meas["t_step"] += wall
        self.bytes_sent += int(col("bytes_sent").sum())
        for iv in (self.interval, self.epoch_interval):
            iv["loss"] += float(col("loss").mean())
            iv["correct"] += float(col("correct").sum())
            iv["count"] += float(col("count").sum())
            iv["n"] += 1

    def ps_update(self) -> None:
        """Sim parameter server: one server update (ssp/async); a metrics step is M updates."""
        t0 = time.perf_counter()
        ps = self.ps
        lr = self.sched(self.samples)
        info = ps.update(lr)
        self.samples += info["count"]
        self.bytes_sent += info["bytes"]
        # event time; the split is per-worker average compute and the rest (communication and waiting)
        self.clock["t_virtual"] = ps.now
        self.clock["t_virtual_compute"] += info["t_compute"] / self.cfg.workers
        self.clock["t_virtual_comm"] = max(0.0, self.clock["t_virtual"] - self.clock["t_virtual_compute"])
        self.meas["t_compute"] += info["t_compute"] if self.cfg.clock == "measured" else 0.0
        self.meas["t_step"] += time.perf_counter() - t0
        for iv in (self.interval, self.epoch_interval):
            iv["loss"] += info["loss"] / self.cfg.workers
            iv["correct"] += info["correct"]
            iv["count"] += info["count"]
            iv["n"] += 1 / self.cfg.workers
        if ps.updates % self.cfg.workers == 0:
            self.step += 1
        self.in_sync = True  # evaluation uses the server's model

    # ------------------------------------------------------------------------------------------- evaluation
    def evaluate(self) -> dict[str, float]:
        """Validation and test loss/accuracy of worker 0's model (the server's for ssp/async)."""
        res: dict[str, float] = {}
        if self.world.is_main:
            d, cfg = self.data, self.cfg
            rep = self.ps.server if self.ps is not None else self.rep
            tf = self.aug.eval
            res["val_loss"], res["val_acc"] = rep.evaluate(0, d.x_val, d.y_val, cfg.eval_batch_size, tf)
            res["test_loss"], res["test_acc"] = rep.evaluate(0, d.x_test, d.y_test, cfg.eval_batch_size, tf)
        res = self.world.broadcast_obj(res)
        return {k: (None if (v is None or (isinstance(v, float) and math.isnan(v))) else v) for k, v in res.items()}

    def _after_eval(self, ev: dict[str, Any]) -> None:
        cfg = self.cfg
        for key in ("val_acc", "test_acc"):
            v = ev.get(key)
            if v is not None and (self.best[key] is None or v > self.best[key]):
                self.best[key] = v
        ta = ev.get("test_acc")
        for t in cfg.targets:
            name = f"{t:g}"
            if self.ttt[name] is None and ta is not None and ta >= t:
                self.ttt[name] = {"step": self.step, "samples": self.samples, "epoch": self.samples / self.N,
                                  "t_virtual": self.clock["t_virtual"], "t_wall": self._wall()}
        self.last_eval = dict(ev)
        self.last_eval_step = self.step
        # the dynamic batch size (draft paper 2.5.1): E_e against E_0, never shrinking
        if cfg.dynamic_batch != "off":
            err = self._error_metric(ev)
            if self.step == 0 or self.e0 is None:
                self.e0 = err
            elif err is not None:
                nb = dynamic_batch(self.B0, self.e0, err, cfg.dynamic_batch_max, cfg.dynamic_batch, cfg.workers)
                self.B = max(self.B, nb)
        self.epoch_interval = self._zero_interval()

    def _error_metric(self, ev) -> float | None:
        m = self.cfg.dynamic_batch_metric
        if m == "val_loss":
            return ev.get("val_loss")
        if m == "val_error":
            return None if ev.get("val_acc") is None else 1.0 - ev["val_acc"]
        iv = self.epoch_interval
        if iv["n"] == 0:  # before training: the initial model's loss on a first batch of worker 0's data
            return self._initial_train_loss()
        return iv["loss"] / iv["n"]

    def _initial_train_loss(self) -> float:
        d = self.data
        n = min(len(d.y_train), 1000)
        rep = self.ps.server if self.ps is not None else self.rep
        loss, _ = rep.evaluate(0, d.x_train[:n], d.y_train[:n], self.cfg.eval_batch_size, self.aug.eval)
        return self.world.broadcast_obj(loss)

    # ------------------------------------------------------------------------------------------- records
    def _line(self, ev: dict[str, Any] | None) -> dict[str, Any]:
        iv = self.interval
        line: dict[str, Any] = {
            "step": self.step,
            "epoch": self.samples / self.N,
            "samples": self.samples,
            "lr": self.sched(self.samples),
            "batch_size": self.B,
            "loss": iv["loss"] / iv["n"] if iv["n"] else None,
            "acc": iv["correct"] / iv["count"] if iv["count"] else None,
            "bytes_sent": self.bytes_sent,
        }
        if self.cfg.bandwidth_schedule:
            from lowbw.train.world import bandwidth_at

            line["bandwidth_mbit"] = bandwidth_at(self.cfg, self.clock["t_virtual"])
        if self.policy is not None:
            line["density"] = self._sparse.ratio
        if ev:
            line.update(ev)
        line.update(self.meas)
        line["t_wall"] = self._wall()
        line.update(self.clock)
        self.interval = self._zero_interval()
        return line

    def _write_line(self, line: dict[str, Any]) -> None:
        if self.world.is_main and self.out is not None:
            append_jsonl(self.out / "metrics.jsonl", line)
        self.lines += 1

    def summary(self) -> dict[str, Any]:
        le = self.last_eval
        return {
            "complete": self.stopped is None,
            "stopped": self.stopped,
            "backend": self.cfg.backend,
            "step": self.step,
            "samples": self.samples,
            "epoch": self.samples / self.N,
            "final_val_acc": le.get("val_acc"),
            "final_val_loss": le.get("val_loss"),
            "final_test_acc": le.get("test_acc"),
            "final_test_loss": le.get("test_loss"),
            "best_val_acc": self.best["val_acc"],
            "best_test_acc": self.best["test_acc"],
            "time_to_target": self.ttt,
            "bytes_sent_total": self.bytes_sent,
            "bytes_sent_per_worker": self.bytes_sent / self.cfg.workers,
            "final_batch_size": self.B,
            **{k: v for k, v in self.clock.items()},
            **{k: v for k, v in self.meas.items()},
            "t_wall": self._wall(),
            "params": self.rep.P,
            "grad_bytes": self.rep.P * 4,
        }

    # ------------------------------------------------------------------------------------------- checkpoints
    def _state(self) -> dict[str, Any]:
        s = {
            "rep": self.rep.state_dict(), "opt": self.opt.state_dict(),
            "streams": [st.state_dict() for st in self.streams],
            "aug_gens": [g.get_state() for g in self.aug_gens],
            "states": self.states, "torch_rng": torch.get_rng_state(),
            "trainer": {k: getattr(self, k) for k in (
                "step", "samples", "bytes_sent", "clock", "meas", "interval", "epoch_interval", "next_eval",
                "eval_pending", "last_eval_step", "e0", "best", "last_eval", "ttt", "lines", "B", "in_sync")},
            "wall": self._wall(),
        }
        if self.ps is not None:
            s["ps"] = self.ps.state_dict()
        return s

    def _load_state(self, s: dict[str, Any]) -> None:
        self.rep.load_state_dict(s["rep"])
        self.opt.load_state_dict(s["opt"])
        for st, d in zip(self.streams, s["streams"]):
            st.load_state_dict(d)
        for g, st in zip(self.aug_gens, s["aug_gens"]):
            g.set_state(st)
        self.states = s["states"]
        torch.set_rng_state(s["torch_rng"])
        for k, v in s["trainer"].items():
            setattr(self, k, v)
        self.wall0 = s["wall"]
        if self.ps is not None:
            self.ps.load_state_dict(s["ps"])

    def save_checkpoint(self) -> None:
        if self.out is None:
            return
        rank = self.world.ranks[0] if self.world.kind == "dist" else 0
        ckpt.save_part(self.out, self.step, rank, self._state())
        self.world.barrier()
        if self.world.is_main:
            nparts = self.cfg.workers if self.world.kind == "dist" else 1
            ckpt.write_marker(self.out, self.step, nparts, self.lines, ckpt.fingerprint(self.cfg.to_dict()))
            ckpt.prune(self.out, self.step)
        self.world.barrier()

    def try_resume(self) -> bool:
        if self.out is None:
            return False
        marker = ckpt.read_marker(self.out) if self.world.is_main else None
        marker = self.world.broadcast_obj(marker)
        if marker is None:
            return False
        if marker["fingerprint"] != ckpt.fingerprint(self.cfg.to_dict()):
            raise RuntimeError(f"{self.out}/checkpoint was written by a different config; delete it to start over")
        rank = self.world.ranks[0] if self.world.kind == "dist" else 0
        self._load_state(ckpt.load_part(self.out, marker["step"], rank, map_location=self.device))
        if self.world.is_main:  # drop metrics lines written after the checkpoint
            path = self.out / "metrics.jsonl"
            lines = path.read_text(encoding="utf-8").splitlines(keepends=True) if path.exists() else []
            if len(lines) < marker["metrics_lines"]:
                raise RuntimeError(f"{path} has fewer lines than its checkpoint recorded")
            path.write_text("".join(lines[: marker["metrics_lines"]]), encoding="utf-8")
        self.world.barrier()
        return True

    def _write_config(self, resumed: bool) -> None:
        from lowbw.runio import provenance

        path = self.out / "config.json"
        resumes = 0
        if resumed and path.exists():
            import json

            try:
                resumes = int(json.loads(path.read_text()).get("resumes", 0)) + 1
            except (ValueError, OSError):
                resumes = 1
        d = self.data
        atomic_write_json(path, {
            "config": self.cfg.to_dict(),
            "seed": self.cfg.seed,
            "derived": self.cfg.derived(self.N),
            "data": {"dataset": self.cfg.dataset, "train": self.N, "val": len(d.y_val), "test": len(d.y_test),
                     "image_shape": list(d.image_shape), "num_classes": d.num_classes,
                     "worker_samples": self.parts_sizes},
            "model": {"name": self.cfg.model, "params": self.rep.P, "grad_bytes": self.rep.P * 4,
                      "engine": self.rep.engine},
            "device": str(self.device),
            "emulation": os.environ.get("LOWBW_EMULATION"),
            "resumes": resumes,
            "provenance": provenance(),
        })

    # ------------------------------------------------------------------------------------------- the run
    def run(self) -> dict[str, Any]:
        cfg, world = self.cfg, self.world
        self._t_start = time.perf_counter()
        resumed = self.try_resume()
        if world.is_main and self.out is not None:
            if not resumed:
                mp = self.out / "metrics.jsonl"
                if mp.exists():
                    mp.unlink()
            self._write_config(resumed)
        if world.is_main and cfg.progress:
            from tqdm.auto import tqdm

            self._pbar = tqdm(total=self.total, initial=self.samples, unit="sample", unit_scale=True,
                              desc=f"{cfg.backend} M={cfg.workers} {cfg.model}", leave=False, dynamic_ncols=True)
        if not resumed:
            ev = self.evaluate()
            self._after_eval(ev)
            self._write_line(self._line(ev))
        try:
            self._loop()
        finally:
            if self._pbar is not None:
                self._pbar.close()
        # the final model: synchronise if the last step left replicas apart (counted as communication)
        if not self.in_sync and self.stopped is None and not self.ps_mode:
            t_sync = time.perf_counter()
            ex = self._average("world")
            rows = torch.tensor([[0, 0, 0, 0, ex.busy_s[i], ex.comm_s[i], ex.bytes_sent[i]]
                                 for i in range(len(world.ranks))], dtype=torch.float64)
            allrows = world.allgather_rows(rows)
            self.bytes_sent += int(allrows[:, 6].sum())
            self.clock["t_virtual_comm"] += ex.v_comm
            self.clock["t_virtual"] += ex.v_comm
            self._count_comm(ex)
            self.in_sync = True
            t_sync = time.perf_counter() - t_sync  # measured like a step: the final synchronisation is training
            self.meas["t_step"] += t_sync
            self.meas["t_comm"] += t_sync
        if self.last_eval_step != self.step or self.interval["n"]:
            ev = self.evaluate() if self.last_eval_step != self.step else {}
            if ev:
                self._after_eval(ev)
            self._write_line(self._line(ev))
        summ = self.summary()
        if world.is_main and self.out is not None:
            atomic_write_json(self.out / "summary.json", summ)
        return summ

    def _loop(self) -> None:
        cfg, world = self.cfg, self.world
        while self.samples < self.total:
            s0 = self.samples
            if self.ps_mode:
                step0 = self.step
                self.ps_update()
                stepped = self.step != step0
            else:
                try:
                    self.train_step()
                except NonFiniteError:
                    # the method diverged (NaN/Inf gradients): a result, not a crash; summary says so
                    self.stopped = "diverged"
                    self.in_sync = True  # no final averaging of NaN replicas
                    break
                stepped = True
            if self._pbar is not None:
                self._pbar.update(self.samples - s0)
            if not stepped:
                continue
            while self.samples >= self.next_eval:
                self.eval_pending = True
                self.next_eval += self.eval_every_samples
            ev = None
            if self.eval_pending and self.in_sync and self.samples < self.total:
                ev = self.evaluate()
                self._after_eval(ev)
                self.eval_pending = False
            if ev is not None or self.step % cfg.log_every == 0:
                line = self._line(ev)
                self._write_line(line)
                if self._pbar is not None and line["loss"] is not None:
                    post = {"loss": f"{line['loss']:.3f}"}
                    if ev and ev.get("test_acc") is not None:
                        post["test"] = f"{ev['test_acc']:.3f}"
                    self._pbar.set_postfix(post)
                if cfg.max_wall_s and world.broadcast_obj(self._wall() >= cfg.max_wall_s):
                    self.stopped = "max_wall_s"
            if cfg.checkpoint_every and self.step % cfg.checkpoint_every == 0 and self.samples < self.total:
                self.save_checkpoint()
            if self.stopped:
                break
