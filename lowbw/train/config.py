"""One validated run configuration for every training run (all backends, all schemes).

A :class:`RunConfig` is flat (every key a scalar, list or dict) so that the same keys work in
``run.yaml``, ``--set key=value``, Snakemake's grid (``runs/<exp>/<key>~<value>/...``) and papermill.

* :meth:`RunConfig.from_dict` rejects unknown keys (with a suggestion), wrong types, out-of-range values and
  impossible combinations *before any work*, always naming the key (``ConfigError.key``).
* :func:`json_schema` exports the same rules as JSON Schema (draft 2020-12) for the workflow's config schema;
  cross-key rules that JSON Schema cannot express are checked by :func:`validate_grid`.
* :meth:`RunConfig.derived` resolves what the sources define by formula: local batch size (B/M, or the
  thesis' Appendix A household formula), copies C of every sample, overlap epochs ceil(E/C), total samples.
"""

from __future__ import annotations

import difflib
import math
from dataclasses import MISSING, asdict, dataclass, field, fields
from typing import Any

__all__ = ["RunConfig", "ConfigError", "json_schema", "validate_grid", "keys_help", "parse_override", "load_file"]


class ConfigError(ValueError):
    """An invalid run configuration; ``key`` names the offending key."""

    def __init__(self, key: str, message: str):
        super().__init__(f"{key}: {message}")
        self.key = key


def _f(default: Any, help: str, *, enum: list[str] | None = None, minimum: float | None = None,
       maximum: float | None = None, exclusive_minimum: float | None = None, group: str = "") -> Any:
    meta = {"help": help, "enum": enum, "minimum": minimum, "maximum": maximum,
            "exclusive_minimum": exclusive_minimum, "group": group}
    if isinstance(default, list | dict):
        return field(default_factory=lambda d=default: type(d)(d), metadata=meta)
    return field(default=default, metadata=meta)


SYNC_SCHEMES = ["sync", "local", "post_local", "hierarchical", "ssp", "async"]
ASSIGNMENTS = ["disjoint", "full", "coarse", "medium", "fine", "household"]


@dataclass
class RunConfig:
    """Every key of a training run. ``python -m lowbw train --help`` lists them with their defaults."""

    # --- run
    name: str = _f("", "free-form label stored with the run", group="run")
    seed: int = _f(0, "seed of model init, data order, augmentation, compressor randomness", minimum=0, group="run")
    backend: str = _f("sim", "sim: M workers in one process with a virtual clock; procs: M processes "
                      "(torch.distributed gloo, NCCL on CUDA); torchrun: same worker under env:// rendezvous",
                      enum=["sim", "procs", "torchrun"], group="run")
    device: str = _f("cpu", "cpu | cuda | auto (cuda when available)", enum=["cpu", "cuda", "auto"], group="run")
    threads: int = _f(0, "torch intra-op threads per process (0: sim keeps torch's default, procs split the "
                      "cores between workers)", minimum=0, group="run")
    sim_engine: str = _f("auto", "how sim computes the M replicas: loop (one after another; fastest on CPU and "
                         "bit-identical to procs), vmap (torch.func over stacked replicas; for GPUs), auto "
                         "(loop on CPU, vmap on CUDA)", enum=["auto", "loop", "vmap"], group="run")
    sim_dense: str = _f("direct", "sim, dense averaging (no compressor): direct = one rank-ordered sum per group "
                        "(fast; the call records and byte counts of the configured collective are still what the "
                        "virtual clock uses), threads = the collective's own threaded implementation "
                        "(bit-identical to procs)", enum=["direct", "threads"], group="run")
    progress: bool = _f(True, "tqdm progress bar on the console", group="run")
    max_wall_s: float = _f(0.0, "stop after this many wall-clock seconds (0: no limit); summary.json says "
                           "stopped=max_wall_s", minimum=0, group="run")
    checkpoint_every: int = _f(0, "save a checkpoint every K steps (atomic; a rerun resumes from it); 0: never",
                               minimum=0, group="run")
    master_port: int = _f(0, "procs: TCP port of the rendezvous (0: pick a free one)", minimum=0, maximum=65535,
                          group="run")
    testbed: bool = _f(False, "procs: each worker in its own network namespace behind a tc-shaped link at "
                       "bandwidth_mbit / latency_ms (needs root, ip, tc)", group="run")
    peer_timeout_s: float = _f(0.0, "procs/torchrun: seconds any wait on another worker may take before the run "
                               "fails naming the rank (0: 30 s + 10x the modelled gradient all-reduce time)",
                               minimum=0, group="run")

    # --- data
    dataset: str = _f("cifar10_small", "dataset name (lowbw.data.available()), or synthetic (no files: 10 classes "
                      "of 16x16x3 prototypes + noise, for tests and benchmarks)", group="data")
    val_fraction: float = _f(0.1, "fraction of the training split held out for validation (0.1 = 45k/5k on "
                             "CIFAR-10, as in the thesis)", minimum=0, maximum=0.5, group="data")
    split_seed: int = _f(0, "seed of the train/validation split (fixed across run seeds)", minimum=0, group="data")
    train_limit: int = _f(0, "use only this many training samples (0: all); for quick tests", minimum=0,
                          group="data")
    test_limit: int = _f(0, "evaluate on only this many test/validation samples (0: all)", minimum=0, group="data")
    augment: str = _f("auto", "batched tensor augmentation: crop_flip (pad 4 + random 32x32 crop + horizontal "
                      "flip), crop, none; auto = crop_flip for colour images, none for greyscale",
                      enum=["auto", "crop_flip", "crop", "none"], group="data")
    assignment: str = _f("disjoint", "data assignment (thesis ch. 4): disjoint (C=1), full (C=M), coarse (S "
                         "shards, worker i gets shard i mod S), medium (M shards, worker i gets C consecutive), "
                         "fine (every sample to C workers, near-equal pairwise intersections), household "
                         "(hierarchical: S_H household shards)", enum=ASSIGNMENTS, group="data")
    shards: int = _f(0, "coarse: number of shards S (divides workers)", minimum=0, group="data")
    copies: int = _f(0, "medium/fine: copies C of every sample (1..workers)", minimum=0, group="data")
    household_shards: int = _f(0, "hierarchical: household shards S_H (divides households; 0: = households, "
                               "i.e. disjoint)", minimum=0, group="data")

    # --- model and optimisation
    model: str = _f("cnn", "model name (lowbw.train.models.MODELS)", group="optim")
    workers: int = _f(4, "number of data-parallel workers M", minimum=1, maximum=1024, group="optim")
    batch_size: int = _f(0, "global batch size B per step (sum of local batches); 0: workers x "
                         "local_batch_size, or 128 if that is 0 too", minimum=0, group="optim")
    local_batch_size: int = _f(0, "per-worker batch size b (0: batch_size / workers)", minimum=0, group="optim")
    effective_batch_size: int = _f(0, "hierarchical: target effective batch size B_e; the local batch is "
                                   "B_e L_W H / (M (H + L_W - 1)) rounded (thesis Appendix A); 0: off",
                                   minimum=0, group="optim")
    epochs: float = _f(10.0, "target epochs E over the training split; with C copies per sample the run does "
                       "ceil(E/C) overlap epochs (thesis 5.2.1)", minimum=0, group="optim")
    steps: int = _f(0, "total steps instead of epochs (0: use epochs)", minimum=0, group="optim")
    optimizer: str = _f("sgd", "sgd (momentum, weight decay), adam, adamw", enum=["sgd", "adam", "adamw"],
                        group="optim")
    lr: float = _f(0.05, "learning rate at base_batch_size", exclusive_minimum=0, group="optim")
    momentum: float = _f(0.9, "sgd momentum", minimum=0, maximum=0.999999, group="optim")
    nesterov: bool = _f(False, "sgd: Nesterov momentum", group="optim")
    weight_decay: float = _f(1e-4, "L2 weight decay (decoupled for adamw)", minimum=0, group="optim")
    adam_beta1: float = _f(0.9, "adam beta1", minimum=0, maximum=0.999999, group="optim")
    adam_beta2: float = _f(0.999, "adam beta2", minimum=0, maximum=0.999999, group="optim")
    adam_eps: float = _f(1e-8, "adam epsilon", exclusive_minimum=0, group="optim")
    lr_schedule: str = _f("step", "step (x lr_gamma at each milestone), cosine (to 0), constant",
                          enum=["step", "cosine", "constant"], group="optim")
    lr_milestones: list[float] = _f([0.5, 0.75], "step: fractions of training at which lr is multiplied by "
                                    "lr_gamma (thesis: 32k and 48k of 64k iterations)", group="optim")
    lr_gamma: float = _f(0.1, "step: factor at each milestone", exclusive_minimum=0, maximum=1, group="optim")
    lr_scaling: str = _f("none", "linear: lr x B / base_batch_size (Goyal et al. 2017)", enum=["none", "linear"],
                         group="optim")
    base_batch_size: int = _f(128, "batch size at which lr is given (linear scaling rule)", minimum=1,
                              group="optim")
    warmup_epochs: float = _f(0.0, "linear warm-up of the learning rate over this many epochs", minimum=0,
                              group="optim")
    warmup_from: float = _f(-1.0, "lr at the start of warm-up (-1: the unscaled lr, as Goyal et al.; with "
                            "lr_scaling=none that means lr/10)", group="optim")
    dynamic_batch: str = _f("off", "dynamic batch size (draft paper 2.5.1): text = 2^floor(log2(E0/Ee)) (the "
                            "text: half the error -> double, a quarter -> double again; default rule), literal = "
                            "max(1, 2^(floor(E0/Ee)-1)) (the draft's formula as printed)",
                            enum=["off", "text", "literal"], group="optim")
    dynamic_batch_max: int = _f(1024, "dynamic batch: cap beta on the global batch size", minimum=1, group="optim")
    dynamic_batch_metric: str = _f("val_loss", "error E_e that drives the dynamic batch size",
                                   enum=["val_loss", "val_error", "train_loss"], group="optim")

    # --- synchronisation
    sync: str = _f("sync", "sync: every step; local: local SGD, model averaging every world_period steps; "
                   "post_local: sync until local_start then local; hierarchical: households/neighbourhoods; "
                   "ssp: stale-synchronous parameter server (sim); async: asynchronous parameter server (sim)",
                   enum=SYNC_SCHEMES, group="sync")
    collective: str = _f("ring", "collective algorithm (lowbw.comm: ring, tree, ps, butterfly, native, ...)",
                         group="sync")
    compressor: str = _f("none", "gradient compressor (lowbw.compress.available()); none = dense", group="sync")
    compressor_args: dict = _f({}, "keyword arguments of the compressor, e.g. {ratio: 0.01}", group="sync")
    error_feedback: str = _f("auto", "wrap the compressor in error feedback: auto (when the method wants it), "
                             "on, off", enum=["auto", "on", "off"], group="sync")
    granularity: str = _f("auto", "aggregate each parameter tensor separately (layer) or the whole gradient as "
                          "one flat vector (flat, like one DDP bucket); auto: flat when dense, layer with a "
                          "compressor (as GRACE compresses per tensor)", enum=["auto", "layer", "flat"],
                          group="sync")
    ddp_hook: bool = _f(False, "procs/torchrun: torch DDP with the compressor as a communication hook",
                        group="sync")
    world_period: int = _f(1, "L_W: steps between world synchronisations (local, post_local, hierarchical)",
                           minimum=1, group="sync")
    local_start: float = _f(0.5, "post_local: fraction of training after which local SGD starts (Lin et al.: at "
                            "the first lr decay)", minimum=0, maximum=1, group="sync")
    households: int = _f(0, "H: households (divides workers); hierarchical only", minimum=0, group="sync")
    household_period: int = _f(1, "L_H: steps between household synchronisations (1: gradient averaging in "
                               "the household every step)", minimum=1, group="sync")
    neighbourhoods: int = _f(0, "NB: neighbourhoods (divides households; 0: none)", minimum=0, group="sync")
    neighbourhood_period: int = _f(0, "L_N: steps between neighbourhood synchronisations", minimum=0,
                                   group="sync")
    average_buffers: bool = _f(True, "model averaging also averages BatchNorm running statistics", group="sync")
    staleness: int = _f(2, "ssp: staleness bound s (a worker may be s clocks ahead of the slowest)", minimum=0,
                        group="sync")
    worker_speeds: list[float] = _f([], "ssp/async virtual clock: relative compute time of each worker (len = "
                                    "workers; [] = all equal)", group="sync")

    # --- network and virtual clock
    bandwidth_mbit: float = _f(10.0, "link bandwidth (Mbit/s) of every worker for the virtual clock / testbed",
                               exclusive_minimum=0, group="clock")
    latency_ms: float = _f(0.0, "one-way link latency (ms)", minimum=0, group="clock")
    bandwidth_schedule: list[float] = _f([], "fluctuating network: flat pairs [t0_s, mbit0, t1_s, mbit1, ...] in "
                                         "virtual time; from t_i on the world link has mbit_i (before t0: "
                                         "bandwidth_mbit)", group="clock")
    adaptive: str = _f("off", "moo: choose the top-k density each step by the multi-objective rule of Tyagi & "
                       "Swany 2023 (lowbw.adaptive) at the current bandwidth; needs compressor topk or artopk",
                       enum=["off", "moo"], group="clock")
    adaptive_c_low: float = _f(0.001, "moo: smallest candidate density", exclusive_minimum=0, maximum=1,
                               group="clock")
    adaptive_c_high: float = _f(0.1, "moo: largest candidate density", exclusive_minimum=0, maximum=1,
                                group="clock")
    household_bandwidth_mbit: float = _f(0.0, "bandwidth inside a household/neighbourhood (0: bandwidth_mbit)",
                                         minimum=0, group="clock")
    household_latency_ms: float = _f(-1.0, "latency inside a household (-1: latency_ms)", group="clock")
    clock: str = _f("measured", "virtual clock compute/compression time: measured (this machine) or model "
                    "(clock_sample_s per sample, clock_compress_mbyte_s; deterministic)",
                    enum=["measured", "model"], group="clock")
    clock_sample_s: float = _f(0.0, "clock=model: seconds of forward+backward per training sample", minimum=0,
                               group="clock")
    clock_compress_mbyte_s: float = _f(0.0, "clock=model: compressor throughput in MB of gradient per second "
                                       "(0: compression costs nothing)", minimum=0, group="clock")
    link_goodput: float = _f(1448 / 1514, "fraction of the link rate that carries payload: TCP/IPv4 with "
                             "timestamps over Ethernet (MTU 1500) carries 1448 bytes per 1514-byte frame as a "
                             "shaper counts it; 1 = the nominal rate", exclusive_minimum=0, maximum=1,
                             group="clock")
    clock_overhead_ms: float = _f(0.0, "virtual clock: per-message cost of the communication software on each "
                                  "worker (ms), added to latency_ms in every message's alpha (python -m lowbw "
                                  "bench e2e measures it for this host; 0: an ideal stack)", minimum=0,
                                  group="clock")
    clock_compute_scale: float = _f(1.0, "virtual clock: factor on each worker's compute and (de)compression "
                                    "time, for workers that share cores (N processes on C < N cores: about "
                                    "N/C); 1: one machine per worker", exclusive_minimum=0, group="clock")

    # --- evaluation and logging
    log_every: int = _f(10, "write a metrics line every this many steps", minimum=1, group="log")
    eval_every: float = _f(1.0, "evaluate on validation and test every this many epochs (local schemes: at the "
                           "next world synchronisation)", exclusive_minimum=0, group="log")
    eval_batch_size: int = _f(1000, "batch size of evaluation", minimum=1, group="log")
    targets: list[float] = _f([], "test accuracies (0..1] for time-to-accuracy in summary.json", group="log")

    # ------------------------------------------------------------------------------------------- construction
    @classmethod
    def keys(cls) -> list[str]:
        return [f.name for f in fields(cls)]

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None, *, check_registries: bool = True) -> RunConfig:
        """Validated config from a (possibly partial) dict; unknown keys and bad values raise ConfigError."""
        d = dict(d or {})
        known = {f.name: f for f in fields(cls)}
        for k in d:
            if k not in known:
                close = difflib.get_close_matches(k, known, n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                raise ConfigError(k, f"unknown key{hint}; see `python -m lowbw train --help`")
        kw = {k: _coerce(known[k], v) for k, v in d.items()}
        cfg = cls(**kw)
        cfg.validate(check_registries=check_registries)
        return cfg

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def replace(self, **kw) -> RunConfig:
        return RunConfig.from_dict({**self.to_dict(), **kw})

    # ------------------------------------------------------------------------------------------- derived values
    @property
    def global_batch(self) -> int:
        """Samples per step over all workers (before any dynamic-batch growth)."""
        return self.local_batch * self.workers

    @property
    def local_batch(self) -> int:
        M = self.workers
        if self.effective_batch_size:
            H, LW = self.households, self.world_period
            return max(1, round(self.effective_batch_size * LW * H / (M * (H + LW - 1))))
        if self.local_batch_size:
            return self.local_batch_size
        return (self.batch_size or 128) // M

    @property
    def copies_per_sample(self) -> int:
        """C: how many workers hold each sample."""
        a, M = self.assignment, self.workers
        if a == "disjoint":
            return 1
        if a == "full":
            return M
        if a == "coarse":
            return M // self.shards
        if a in ("medium", "fine"):
            return self.copies
        if a == "household":
            return self.households // (self.household_shards or self.households)
        raise AssertionError(a)

    @property
    def overlap_epochs(self) -> int | float:
        """ceil(E/C) when samples have C > 1 copies (every sample processed equally often), else E."""
        C = self.copies_per_sample
        return math.ceil(self.epochs / C - 1e-9) if C > 1 else self.epochs

    def total_samples(self, n_train: int) -> int:
        """Samples (over all workers) the run processes: steps x B, or overlap epochs x N x C."""
        if self.steps:
            return self.steps * self.global_batch
        return int(round(self.overlap_epochs * n_train * self.copies_per_sample))

    def lr_target(self) -> float:
        """Peak learning rate (after linear scaling)."""
        if self.lr_scaling == "linear":
            return self.lr * self.global_batch / self.base_batch_size
        return self.lr

    def derived(self, n_train: int | None = None) -> dict[str, Any]:
        out: dict[str, Any] = {
            "local_batch_size": self.local_batch,
            "global_batch_size": self.global_batch,
            "copies": self.copies_per_sample,
            "overlap_epochs": self.overlap_epochs,
            "lr_peak": self.lr_target(),
        }
        if n_train is not None:
            ts = self.total_samples(n_train)
            out.update(n_train=n_train, total_samples=ts, total_steps=math.ceil(ts / self.global_batch),
                       effective_epochs=ts / n_train)
        return out

    # ------------------------------------------------------------------------------------------- validation
    def validate(self, *, check_registries: bool = True) -> None:
        """Cross-key rules; raises ConfigError naming the key to change."""
        for f in fields(self):
            _check_range(f, getattr(self, f.name))
        M = self.workers
        err = ConfigError

        # batch sizes
        if self.local_batch_size and self.batch_size and self.batch_size != M * self.local_batch_size:
            raise err("batch_size", f"{self.batch_size} != workers x local_batch_size = {M} x {self.local_batch_size}")
        if not self.local_batch_size and not self.effective_batch_size:
            B = self.batch_size or 128
            if B % M:
                raise err("batch_size", f"global batch {B} is not divisible by workers={M}")
        if self.effective_batch_size and self.sync != "hierarchical":
            raise err("effective_batch_size", "only meaningful with sync=hierarchical (thesis Appendix A)")
        if self.effective_batch_size and (self.batch_size or self.local_batch_size):
            raise err("effective_batch_size", "set either effective_batch_size or batch_size/local_batch_size")
        if self.epochs <= 0 and self.steps <= 0:
            raise err("epochs", "one of epochs or steps must be > 0")
        if self.dynamic_batch != "off" and self.dynamic_batch_max < self.global_batch:
            raise err("dynamic_batch_max", f"cap {self.dynamic_batch_max} is below the initial global batch "
                                           f"{self.global_batch}")
        if self.dynamic_batch != "off" and self.dynamic_batch_metric != "train_loss" and self.val_fraction == 0:
            raise err("dynamic_batch_metric",
                      f"{self.dynamic_batch_metric} needs a validation split (val_fraction > 0)")
        if self.dynamic_batch != "off" and self.sync in ("ssp", "async"):
            raise err("dynamic_batch", f"not supported with sync={self.sync}")
        ms = self.lr_milestones
        if any(not (0 < m < 1) for m in ms) or list(ms) != sorted(ms):
            raise err("lr_milestones", f"{ms}: must be increasing fractions in (0, 1)")
        if any(not (0 < t <= 1) for t in self.targets):
            raise err("targets", f"{self.targets}: accuracies must lie in (0, 1]")

        # data assignment
        a = self.assignment
        if a == "coarse":
            if not self.shards or M % self.shards:
                raise err("shards", f"coarse assignment needs shards S dividing workers={M} (got {self.shards})")
        elif self.shards:
            raise err("shards", f"only used with assignment=coarse (assignment={a})")
        if a in ("medium", "fine"):
            if not 1 <= self.copies <= M:
                raise err("copies", f"{a} assignment needs 1 <= copies <= workers={M} (got {self.copies})")
        elif self.copies:
            raise err("copies", f"only used with assignment=medium or fine (assignment={a})")
        if a == "household" and self.sync != "hierarchical":
            raise err("assignment", "household assignment needs sync=hierarchical")

        # synchronisation
        s = self.sync
        if s == "hierarchical":
            H = self.households
            if H < 1 or M % H:
                raise err("households", f"hierarchical needs households H dividing workers={M} (got {H})")
            if a not in ("disjoint", "household"):
                raise err("assignment", "hierarchical uses household shards: assignment must be disjoint or household")
            SH = self.household_shards or H
            if H % SH:
                raise err("household_shards", f"S_H={SH} must divide households={H}")
            if a == "disjoint" and SH != H:
                raise err("household_shards", "S_H < H overlaps households: use assignment=household")
            NB = self.neighbourhoods
            if NB:
                if H % NB or NB >= H:
                    raise err("neighbourhoods", f"NB={NB} must divide households={H} and be smaller")
                if not self.neighbourhood_period:
                    raise err("neighbourhood_period", "set L_N when neighbourhoods > 0")
                if not (self.household_period <= self.neighbourhood_period <= self.world_period):
                    raise err("neighbourhood_period", f"need L_H <= L_N <= L_W (got {self.household_period}, "
                                                      f"{self.neighbourhood_period}, {self.world_period})")
            elif self.neighbourhood_period:
                raise err("neighbourhood_period", "only used with neighbourhoods > 0")
            if self.household_period > self.world_period:
                raise err("household_period", f"L_H={self.household_period} > L_W={self.world_period}")
        else:
            for k in ("households", "neighbourhoods", "neighbourhood_period", "household_shards"):
                if getattr(self, k):
                    raise err(k, f"only used with sync=hierarchical (sync={s})")
        if s in ("sync", "ssp", "async") and self.world_period != 1:
            raise err("world_period", f"not used with sync={s}")
        if s in ("ssp", "async") and self.backend != "sim":
            raise err("backend", f"sync={s} runs on the sim backend only")
        if s in ("ssp", "async", "local") and self.compressor != "none":
            raise err("compressor", f"sync={s} averages models / pushes to a parameter server densely; "
                                    "compressors apply to gradient synchronisation (sync, post_local, hierarchical "
                                    "with household_period=1)")
        if s == "hierarchical" and self.compressor != "none" and self.household_period != 1:
            raise err("compressor", "hierarchical compresses the per-step household gradient average: needs "
                                    "household_period=1")
        if self.worker_speeds:
            if s not in ("ssp", "async"):
                raise err("worker_speeds", "only used with sync=ssp or async")
            if len(self.worker_speeds) != M or any(v <= 0 for v in self.worker_speeds):
                raise err("worker_speeds", f"needs {M} positive numbers")
        if self.ddp_hook:
            if self.backend == "sim":
                raise err("ddp_hook", "DDP communication hooks need real processes (backend procs or torchrun)")
            if s != "sync":
                raise err("ddp_hook", "DDP hooks implement sync=sync")
        if self.testbed and self.backend != "procs":
            raise err("testbed", "the tc testbed launches real processes: backend=procs")
        if self.clock == "model" and self.clock_sample_s <= 0:
            raise err("clock_sample_s", "clock=model needs seconds per sample > 0")
        if self.compressor == "none" and self.compressor_args:
            raise err("compressor_args", "given but compressor=none")
        sched = self.bandwidth_schedule
        if sched:
            ts, bs = sched[0::2], sched[1::2]
            if len(sched) % 2 or min(ts) < 0 or min(bs) <= 0 or any(a >= b for a, b in zip(ts, ts[1:])):
                raise err("bandwidth_schedule",
                          f"{sched}: needs flat pairs [t0, mbit0, t1, mbit1, ...], t >= 0 increasing, mbit > 0")
        if self.adaptive != "off":
            if self.compressor not in ("topk", "artopk"):
                raise err("adaptive", f"moo adapts a top-k density: compressor must be topk or artopk, got "
                                      f"{self.compressor!r}")
            if self.adaptive_c_low > self.adaptive_c_high:
                raise err("adaptive_c_low", f"{self.adaptive_c_low} > adaptive_c_high={self.adaptive_c_high}")

        if check_registries:
            self._check_registries()

    def _check_registries(self) -> None:
        from lowbw.train.models import MODELS

        if self.model not in MODELS and not self.model.startswith("torchvision:"):
            raise ConfigError("model", f"{self.model!r} is unknown; allowed: {', '.join(MODELS)}")
        try:
            from lowbw.data import available as datasets
        except ImportError:  # pragma: no cover - data layer missing
            datasets = None
        if datasets is not None and self.dataset != "synthetic" and self.dataset not in datasets():
            raise ConfigError("dataset", f"{self.dataset!r} is unknown; allowed: {', '.join(datasets())}")
        from lowbw.train import sync as _sync

        _sync.check_collective(self)
        _sync.check_compressor(self)


# ----------------------------------------------------------------------------------------------- type handling
def _kind(f) -> str:
    t = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", str(f.type))
    return {"str": "string", "int": "integer", "float": "number", "bool": "boolean", "list[float]": "array",
            "dict": "object"}[t]


def _coerce(f, v: Any) -> Any:
    kind = _kind(f)
    k = f.name
    if kind == "string":
        if k == "error_feedback" and isinstance(v, bool):  # YAML 1.1 reads on/off as booleans (issue 19)
            v = "on" if v else "off"
        if not isinstance(v, str):
            raise ConfigError(k, f"expected a string, got {v!r}")
        return v
    if kind == "boolean":
        if isinstance(v, bool):
            return v
        if isinstance(v, str) and v.lower() in ("true", "false", "yes", "no", "1", "0"):
            return v.lower() in ("true", "yes", "1")
        raise ConfigError(k, f"expected true/false, got {v!r}")
    if kind in ("integer", "number") and isinstance(v, str):  # YAML 1.1 reads 1e-3 as a string
        try:
            v = float(v.strip())
        except ValueError:
            raise ConfigError(k, f"expected {'a number' if kind == 'number' else 'an integer'}, got {v!r}") from None
    if kind == "integer":
        if isinstance(v, bool) or not isinstance(v, int | float) or (isinstance(v, float) and not v.is_integer()):
            raise ConfigError(k, f"expected an integer, got {v!r}")
        return int(v)
    if kind == "number":
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
            raise ConfigError(k, f"expected a number, got {v!r}")
        return float(v)
    if kind == "array":
        if not isinstance(v, list | tuple) or any(isinstance(x, bool) or not isinstance(x, int | float) for x in v):
            raise ConfigError(k, f"expected a list of numbers, got {v!r}")
        return [float(x) for x in v]
    if kind == "object":
        if not isinstance(v, dict):
            raise ConfigError(k, f"expected a mapping, got {v!r}")
        return dict(v)
    raise AssertionError(kind)


def _check_range(f, v: Any) -> None:
    m = f.metadata
    k = f.name
    if m.get("enum") and v not in m["enum"]:
        close = difflib.get_close_matches(str(v), m["enum"], n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ConfigError(k, f"{v!r} is not one of {m['enum']}{hint}")
    if isinstance(v, int | float) and not isinstance(v, bool):
        if m.get("minimum") is not None and v < m["minimum"]:
            raise ConfigError(k, f"{v} < minimum {m['minimum']}")
        if m.get("maximum") is not None and v > m["maximum"]:
            raise ConfigError(k, f"{v} > maximum {m['maximum']}")
        if m.get("exclusive_minimum") is not None and v <= m["exclusive_minimum"]:
            raise ConfigError(k, f"{v} must be > {m['exclusive_minimum']}")


# ----------------------------------------------------------------------------------------------- exports
def json_schema() -> dict[str, Any]:
    """JSON Schema (draft 2020-12) of a run config: types, defaults, enums, ranges, no unknown keys.

    Cross-key rules (divisibility, combinations) are not expressible here; :func:`validate_grid` runs them.
    """
    props: dict[str, Any] = {}
    for f in fields(RunConfig):
        m = f.metadata
        kind = _kind(f)
        p: dict[str, Any] = {"type": kind, "description": m["help"]}
        default = f.default if f.default is not MISSING else f.default_factory()
        p["default"] = default
        if kind == "array":
            p["items"] = {"type": "number"}
        if m.get("enum"):
            p["enum"] = list(m["enum"])
        for key, sk in (("minimum", "minimum"), ("maximum", "maximum"), ("exclusive_minimum", "exclusiveMinimum")):
            if m.get(key) is not None:
                p[sk] = m[key]
        props[f.name] = p
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "lowbw.train RunConfig",
        "type": "object",
        "additionalProperties": False,
        "properties": props,
    }


def keys_help() -> str:
    """Every key with its default and meaning, grouped (the CLI's --help epilog)."""
    lines: list[str] = []
    group = None
    titles = {"run": "run", "data": "data", "optim": "model and optimisation", "sync": "synchronisation",
              "clock": "network and virtual clock", "log": "evaluation and logging"}
    for f in fields(RunConfig):
        m = f.metadata
        if m["group"] != group:
            group = m["group"]
            lines.append(f"\n{titles.get(group, group)}:")
        default = f.default if f.default is not MISSING else f.default_factory()
        extra = f" {{{', '.join(m['enum'])}}}" if m.get("enum") else ""
        lines.append(f"  {f.name} = {default!r}{extra}\n      {m['help']}")
    return "\n".join(lines)


def parse_override(s: str) -> tuple[str, Any]:
    """``key=value`` with the value parsed as YAML (``lr=0.1``, ``targets=[0.5,0.6]``, ``ddp_hook=true``).

    Raises ConfigError naming the override when it is not ``key=value`` or its value is not valid YAML."""
    import yaml

    if "=" not in s:
        raise ConfigError(s, "override must look like key=value")
    k, v = s.split("=", 1)
    k = k.strip()
    if not k:
        raise ConfigError(s, "override has no key before '=' (use key=value)")
    try:
        val = yaml.safe_load(v) if v.strip() else ""
    except yaml.YAMLError as e:
        where = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise ConfigError(k, f"--set {s}: value {v!r} is not valid YAML ({where}); quote strings, "
                             f"e.g. {k}='{v}'") from None
    return k, val


def load_file(path: str) -> dict[str, Any]:
    """A run config file (YAML or JSON) as a dict. A ``config`` key (as in a run's config.json) is unwrapped.

    Raises ConfigError (one line, naming the file and the line) for syntax errors, an empty file, or a
    file that does not hold a mapping; OSError if it cannot be read."""
    import json

    import yaml

    with open(path, encoding="utf-8") as fh:
        text = fh.read()
    if not text.strip() or all(not ln.strip() or ln.lstrip().startswith("#") for ln in text.splitlines()):
        raise ConfigError(str(path), "empty config file: give at least one key (e.g. `workers: 4`), or omit -c "
                                     "for the defaults")
    try:
        if str(path).endswith(".json"):
            d = json.loads(text)
        else:
            d = yaml.safe_load(text)
    except json.JSONDecodeError as e:
        raise ConfigError(str(path), f"not valid JSON at line {e.lineno} column {e.colno}: {e.msg}") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        at = f" at line {mark.line + 1} column {mark.column + 1}" if mark is not None else ""
        what = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise ConfigError(str(path), f"not valid YAML{at}: {what}") from None
    if d is None:
        raise ConfigError(str(path), "empty config file: give at least one key (e.g. `workers: 4`), or omit -c "
                                     "for the defaults")
    if not isinstance(d, dict):
        raise ConfigError(str(path), f"a run config file must hold a mapping of keys, got a {type(d).__name__}")
    if "config" in d and isinstance(d["config"], dict):
        d = d["config"]
    return d


def validate_grid(config: dict[str, Any]) -> int:
    """Check every training run of a workflow config (``experiments`` x ``grid`` x ``seeds``) before any job.

    Raises ConfigError naming the experiment, the run and the key. Returns the number of runs checked.
    """
    from lowbw.grid import encode, expand, run_config

    n = 0
    for name, exp in (config.get("experiments") or {}).items():
        for params in expand(exp, config.get("seeds") or [0]):
            d = run_config(config, name, params)
            try:
                RunConfig.from_dict(d)
            except ConfigError as e:
                raise ConfigError(e.key, f"experiment {name} run {encode(params)}: {e}") from e
            n += 1
    return n
