"""The field table of a run configuration: every key of :class:`RunConfig` with its default, unit, help text,
allowed values and range, and the values derived from them by formula (local batch size, copies C of every
sample, overlap epochs ceil(E/C), total samples).

:class:`RunConfig` is assembled from the engine's keys (:class:`EngineKeys`, here) and the key sets every
registered sync scheme declares (:mod:`lowbw.train.schemes.keys`, read through
:func:`lowbw.train.schemes.registry.key_sets`), section by section; a scheme's keys are thus added by the
scheme, never listed here.

A :class:`RunConfig` is flat (every key a scalar, list or dict) so that the same keys work in ``run.yaml``,
``--set key=value``, Snakemake's grid (``runs/<exp>/<key>~<value>/...``) and papermill. Validation is
:mod:`lowbw.train.config_rules`; files, overrides and exports are :mod:`lowbw.train.config_files`.
"""

from __future__ import annotations

import difflib
import math
from dataclasses import asdict, dataclass, field, fields, make_dataclass
from typing import Any

from lowbw.comm.algorithms import OUTER_OPTIMIZERS
from lowbw.train.config_key import key
from lowbw.train.config_rules import ConfigError, check, coerce
from lowbw.train.schemes.registry import SCHEMES, key_sets

__all__ = ["RunConfig", "EngineKeys", "SYNC_SCHEMES", "ASSIGNMENTS", "OUTER_OPTIMIZERS", "GROUPS"]

_f = key  # the table below declares each key with lowbw.train.config_key.key


SYNC_SCHEMES = list(SCHEMES)  # the choices of ``sync``: the scheme registry's names, in its order
ASSIGNMENTS = ["disjoint", "full", "coarse", "medium", "fine", "household"]


@dataclass(frozen=True)
class EngineKeys:
    """The engine's keys: every key of a training run that no one sync scheme owns (a scheme's own are in its
    keys module, :mod:`lowbw.train.schemes.keys`)."""

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
                        "virtual clock uses; with more than 2 workers not procs' sums, which the ring takes in "
                        "another order), collective = the collective's own sums in one thread (ring: "
                        "lowbw.train.batched; other collectives: their threads), threads = the collective's own "
                        "threaded implementation (collective and threads: bit-identical to procs)",
                        enum=["direct", "collective", "threads"], group="run")
    sim_compress: str = _f("batched", "sim, compressed exchanges over the ring: batched = every replica's layer in "
                           "one batched call of the compressor (lowbw.train.batched; same outputs, call records, "
                           "bytes and virtual clock), threads = rank by rank in the collective's threads (the "
                           "path procs takes); compressors without a batched path always take threads",
                           enum=["batched", "threads"], group="run")
    progress: bool = _f(True, "tqdm progress bar on the console", group="run")
    max_wall_s: float = _f(0.0, "stop after this many wall-clock seconds (0: no limit); summary.json says "
                           "stopped=max_wall_s", minimum=0, group="run")
    checkpoint_every: int = _f(0, "save a checkpoint every K steps (atomic; a rerun resumes from it); 0: never",
                               minimum=0, group="run")
    master_port: int = _f(0, "procs: TCP port of the rendezvous (0: pick a free one)", minimum=0, maximum=65535,
                          group="run")
    testbed: bool = _f(False, "procs: each worker in its own network namespace behind a tc-shaped link at "
                       "bandwidth_mbit / latency_ms (needs root, ip, tc)", group="run")
    testbed_realtime: int = _f(0, "testbed: run the workers under SCHED_RR at this priority (1-99), as if each "
                               "emulated machine had its CPU to itself: co-located workers under the fair "
                               "scheduler wait for a core when their data arrives, milliseconds per message; "
                               "0: the fair scheduler", minimum=0, maximum=99, group="run")
    faults: list[str] = _f([], "faults of the run on the virtual clock (lowbw.train.faults): churn:RANK@STEP:REJOIN "
                           "= worker RANK leaves after step STEP and rejoins after step REJOIN (churn:RANK@STEP: "
                           "for good); only async_diloco, decoupled_diloco (quorum below the workers present) and "
                           "halos tolerate it", group="run")
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
    test_limit: int = _f(0, "evaluate on only this many test/validation samples (0: all; text: the first this "
                         "many validation windows)", minimum=0, group="data")
    block_size: int = _f(0, "text: context length T in characters, a window being T + 1 characters (0: the "
                         "model's own, gpt-small 64)", minimum=0, group="data")
    augment: str = _f("auto", "batched tensor augmentation: crop_flip (pad 4 + random 32x32 crop + horizontal "
                      "flip), crop, none; auto = crop_flip for colour images, none for greyscale",
                      enum=["auto", "crop_flip", "crop", "none"], group="data")
    assignment: str = _f("disjoint", "data assignment (thesis ch. 4): disjoint (C=1), full (C=M), coarse (S "
                         "shards, worker i gets shard i mod S), medium (M shards, worker i gets C consecutive), "
                         "fine (every sample to C workers, near-equal pairwise intersections), household "
                         "(hierarchical: S_H household shards)", enum=ASSIGNMENTS, group="data")
    shards: int = _f(0, "coarse: number of shards S (divides workers)", minimum=0, group="data")
    copies: int = _f(0, "medium/fine: copies C of every sample (1..workers)", minimum=0, group="data")

    # --- model and optimisation
    model: str = _f("cnn", "model name (lowbw.train.models.MODELS)", group="optim")
    dropout: float = _f(0.0, "dropout rate p (0 <= p < 1) of the models that have dropout (the GPTs: embedding, "
                        "attention and residual dropout as nanoGPT; its GPU recipe 0.2, its CPU recipe 0); each "
                        "worker draws its masks from its own stream seeded by (seed, worker) (lowbw.train.masks); "
                        "evaluation runs without dropout", minimum=0, group="optim")
    workers: int = _f(4, "number of data-parallel workers M", minimum=1, maximum=1024, group="optim")
    batch_size: int = _f(0, "global batch size B per step (sum of local batches); 0: workers x "
                         "local_batch_size, or 128 if that is 0 too", minimum=0, group="optim")
    local_batch_size: int = _f(0, "per-worker batch size b (0: batch_size / workers)", minimum=0, group="optim")
    epochs: float = _f(10.0, "target epochs E over the training split; with C copies per sample the run does "
                       "ceil(E/C) overlap epochs (thesis 5.2.1)", minimum=0, group="optim")
    steps: int = _f(0, "total steps; overrides epochs (0: use epochs)", minimum=0, group="optim")
    optimizer: str = _f("sgd", "sgd (momentum, weight decay), adam, adamw, muon (Newton-Schulz orthogonalised "
                        "momentum for hidden weight matrices, AdamW for the rest; lowbw.train.muon; as diloco's "
                        "inner optimiser: MuLoCo)", enum=["sgd", "adam", "adamw", "muon"], group="optim")
    lr: float = _f(0.05, "learning rate at base_batch_size", exclusive_minimum=0, group="optim")
    momentum: float = _f(0.9, "sgd momentum", minimum=0, maximum=0.999999, group="optim")
    nesterov: bool = _f(False, "sgd: Nesterov momentum", group="optim")
    weight_decay: float = _f(1e-4, "L2 weight decay (decoupled for adamw)", minimum=0, group="optim")
    adam_beta1: float = _f(0.9, "adam beta1", minimum=0, maximum=0.999999, group="optim")
    adam_beta2: float = _f(0.999, "adam beta2", minimum=0, maximum=0.999999, group="optim")
    adam_eps: float = _f(1e-8, "adam epsilon", exclusive_minimum=0, group="optim")
    muon_momentum: float = _f(0.95, "muon: momentum mu (Nesterov; Jordan et al. 2024's default 0.95)", minimum=0,
                              maximum=0.999999, group="optim")
    muon_ns_steps: int = _f(5, "muon: Newton-Schulz iterations (Jordan et al. 2024: 5)", minimum=1, maximum=20,
                            group="optim")
    muon_scale: str = _f("rms", "muon: update scale of an A x B matrix: rms = 0.2 sqrt(max(A, B)) (Liu et al. "
                         "2025: AdamW's update RMS, so one lr serves the Muon and AdamW parts), shape = "
                         "sqrt(max(1, A/B)) (Jordan et al. 2024; Muon lr then ~0.02)", enum=["rms", "shape"],
                         group="optim")
    lr_schedule: str = _f("step", "step (x lr_gamma at each milestone), cosine (to 0), constant",
                          enum=["step", "cosine", "constant"], group="optim")
    lr_milestones: list[float] = _f([0.5, 0.75], "step: fractions of training at which lr is multiplied by "
                                    "lr_gamma (thesis: 32k and 48k of 64k iterations)", group="optim")
    lr_gamma: float = _f(0.1, "step: factor at each milestone", exclusive_minimum=0, maximum=1, group="optim")
    lr_scaling: str = _f("none", "linear: lr x B / base_batch_size (Goyal et al. 2017); sqrt: lr x sqrt(B / "
                         "base_batch_size) (Krizhevsky 2014, Hoffer et al. 2017: where the linear rule's rate "
                         "exceeds what the model trains stably at)", enum=["none", "linear", "sqrt"],
                         group="optim")
    base_batch_size: int = _f(128, "batch size at which lr is given (linear scaling rule)", minimum=1,
                              group="optim")
    warmup_epochs: float = _f(0.0, "linear warm-up of the learning rate over this many epochs", minimum=0,
                              group="optim")
    warmup_steps: int = _f(0, "linear warm-up over this many steps; overrides warmup_epochs (0: use "
                           "warmup_epochs); nanoGPT: 100", minimum=0, group="optim")
    lr_min: float = _f(0.0, "cosine: the learning rate at the end of the decay (nanoGPT: lr / 10)", minimum=0,
                       group="optim")
    grad_clip: float = _f(0.0, "clip each replica's update gradient to this L2 norm over all its parameters (0: "
                          "off; nanoGPT: 1.0)", minimum=0, group="optim")
    weight_decay_on: str = _f("all", "which parameters weight decay applies to: all, or matrices (every "
                              "parameter of >= 2 dimensions: weights and embeddings, not norms and biases; "
                              "nanoGPT/GPT-2)", enum=["all", "matrices"], group="optim")
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
                   "ssp: stale-synchronous parameter server (sim); async: asynchronous parameter server (sim); "
                   "diloco: world_period local steps, then an outer optimiser step on the averaged (and, with a "
                   "compressor, compressed) pseudo-gradient (Douillard et al. 2023); desloc: local adam, "
                   "parameters averaged every world_period steps and Adam's moments every desloc_m1_period / "
                   "desloc_m2_period (Iacob et al. 2025); sparta: local steps, sparta_density of the "
                   "parameters averaged every step (Beton et al. 2025); noloco: world_period local steps, then "
                   "each worker averages with one seeded peer and takes NoLoCo's momentum step (Kolehmainen et al. "
                   "2025; outer_lr, outer_momentum; an even number of workers); async_diloco (Liu et al. 2024), "
                   "decoupled_diloco (Douillard et al. 2026), halos (Kim et al. 2025): world_period inner steps, "
                   "then outer steps at a server that no worker waits for (sim; the async_*, decoupled_*, "
                   "halos_* keys); qsr: local SGD whose rounds last max(world_period, (qsr_alpha / lr)^2) "
                   "steps (Gu et al. 2024)",
                   enum=SYNC_SCHEMES, group="sync")
    collective: str = _f("ring", "collective algorithm (lowbw.comm: ring, tree, ps, butterfly, native, ...)",
                         group="sync")
    compressor: str = _f("none", "gradient compressor (lowbw.compress.available()); none = dense", group="sync")
    compressor_args: dict = _f({}, "keyword arguments of the compressor, e.g. {ratio: 0.01}", group="sync")
    error_feedback: str = _f("auto", "wrap the compressor in error feedback: auto (when the method wants it), "
                             "on, off", enum=["auto", "on", "off"], group="sync")
    compress_target: str = _f("gradient", "sync with a compressor: what each worker compresses (with its error "
                              "feedback) and the group averages: gradient (then one optimiser step on the "
                              "average) or update (each worker's own optimiser direction from its uncompressed "
                              "gradient, e.g. Adam's m/sqrt(v), applied averaged: error feedback on the update, "
                              "so that no residual enters Adam's second moment; the 1-bit Adam line's remedy)",
                              enum=["gradient", "update"], group="sync")
    granularity: str = _f("auto", "aggregate each parameter tensor separately, one call each (layer), the whole "
                          "gradient as one flat vector (flat), or per DDP bucket of bucket_mb MB (bucket: each "
                          "tensor compressed alone, the bucket's payloads in one call per round); auto: bucket "
                          "with a compressor or an outer step (diloco), else flat",
                          enum=["auto", "layer", "flat", "bucket"], group="sync")
    bucket_mb: float = _f(25.0, "granularity bucket: MB of fp32 parameters per bucket (DDP's bucket_cap_mb)",
                          exclusive_minimum=0, group="sync")
    ddp_hook: bool = _f(False, "procs/torchrun: torch DDP with the compressor as a communication hook",
                        group="sync")
    average_buffers: bool = _f(True, "model averaging also averages BatchNorm running statistics (diloco's outer "
                               "step moves parameters only)", group="sync")
    worker_speeds: list[float] = _f([], "virtual clock: relative compute time of each worker (len = workers; [] = "
                                    "all equal; a straggler at 3 computes 3x as long); synchronous schemes wait "
                                    "for the slowest, ssp/async let the others run ahead", group="sync")

    # --- network and virtual clock
    bandwidth_mbit: float = _f(10.0, "link bandwidth (Mbit/s) of every worker for the virtual clock / testbed",
                               exclusive_minimum=0, group="clock")
    latency_ms: float = _f(0.0, "one-way link latency (ms)", minimum=0, group="clock")
    link_loss: float = _f(0.0, "fraction of packets every worker's uplink drops at random (the testbed's --loss; "
                          "below 0.5): TCP resends them, so loss costs time, never data; the virtual clock charges "
                          "the expected resent bytes, tail-loss probes and timeouts of lowbw.net.tcploss",
                          minimum=0, group="clock")
    tcp_congestion: str = _f("bbr", "under link_loss: the TCP congestion control the clock models and the testbed "
                             "sets on its links; reno and cubic cap the rate at Mathis et al.'s window sqrt(3/(2p)) "
                             "segments per round trip, bbr does not", enum=["bbr", "cubic", "reno"], group="clock")
    worker_bandwidth_mbit: list[float] = _f([], "per-worker link rate (Mbit/s) each way, one per worker (the "
                                            "testbed's --rates); []: bandwidth_mbit for every worker",
                                            group="clock")
    worker_uplink_mbit: list[float] = _f([], "per-worker uplink rate (Mbit/s) where it is below the downlink (the "
                                         "testbed's --up); []: the worker's rate both ways", group="clock")
    worker_latency_ms: list[float] = _f([], "per-worker one-way latency (ms) (the testbed's --delays); []: "
                                        "latency_ms for every worker", group="clock")
    bandwidth_trace: str = _f("", "every worker's rate (and delay) follows this trace in virtual time: a CSV "
                              "t_s,worker,mbit[,delay_ms] or Mahimahi file (lowbw.net.trace), or a packaged "
                              "trace by name (wifi, lte; wifi10: 20 min of WiFi at a 10 Mbit/s median); '': "
                              "fixed links", group="clock")
    bandwidth_schedule: list[float] = _f([], "fluctuating network: flat pairs [t0_s, mbit0, t1_s, mbit1, ...] in "
                                         "virtual time; from t_i on the world link has mbit_i (before t0: "
                                         "bandwidth_mbit)", group="clock")
    adaptive: str = _f("off", "moo: choose the top-k density each step by the multi-objective rule of Tyagi & "
                       "Swany 2023 (lowbw.train.adaptive) at the current bandwidth; needs compressor topk or artopk",
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
    clock_shaper_burst_bytes: float = _f(0.0, "virtual clock: the testbed's tbf bucket (bytes on the wire): "
                                         "after the link idles (compute, each message's alpha) up to that many "
                                         "bytes leave at line rate; 0 = a plain link (python -m lowbw bench e2e "
                                         "sets the testbed's). On per-worker links: on the slowest hop where every "
                                         "step waits for it (ring, pipeline, tree with alike latencies), else none",
                                         minimum=0, group="clock")
    clock_compute_scale: float = _f(1.0, "virtual clock: factor on each worker's compute and (de)compression "
                                    "time, for workers that share cores (N processes on C < N cores: about "
                                    "N/C); 1: one machine per worker", exclusive_minimum=0, group="clock")
    clock_compress_scale: float = _f(0.0, "virtual clock: factor on each worker's (de)compression time alone, "
                                     "where sharing cores slows it otherwise than compute; 0: "
                                     "clock_compute_scale", minimum=0, group="clock")

    # --- evaluation and logging
    log_every: int = _f(10, "write a metrics line every this many steps", minimum=1, group="log")
    eval_every: float = _f(1.0, "evaluate on validation and test every this many epochs (local schemes: at the "
                           "next world synchronisation)", exclusive_minimum=0, group="log")
    eval_batch_size: int = _f(1000, "batch size of evaluation", minimum=1, group="log")
    targets: list[float] = _f([], "time-to-target in summary.json: test accuracies (0..1], or \"<metric><=|>="
                              "<value>\" strings such as \"val_loss<=1.9\" (lowbw.train.targets)", group="log")


class _RunConfig:
    """What a run config does with its keys (the base of :class:`RunConfig`): construction from a dict, export,
    the values derived by formula, validation."""

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
        kw = {k: coerce(known[k], v) for k, v in d.items()}
        cfg = cls(**kw)
        cfg.validate(check_registries=check_registries)
        return cfg

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def replace(self, **kw) -> RunConfig:
        return type(self).from_dict({**self.to_dict(), **kw})

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
        """Peak learning rate (after linear or square-root scaling)."""
        if self.lr_scaling == "linear":
            return self.lr * self.global_batch / self.base_batch_size
        if self.lr_scaling == "sqrt":
            return self.lr * math.sqrt(self.global_batch / self.base_batch_size)
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
        """Every rule of :mod:`lowbw.train.config_rules`; raises ConfigError naming the key to change."""
        check(self, registries=check_registries)


GROUPS = ("run", "data", "optim", "sync", "clock", "log")  # the sections of the keys, in the help's order


def _assembled_fields() -> list[tuple[str, str, Any]]:
    """RunConfig's fields: the engine's keys, then every registered scheme's key sets (registry order), sorted
    stably by section so that the help lists each section once."""
    fs = sorted([*fields(EngineKeys), *(f for ks in key_sets() for f in fields(ks))],
                key=lambda f: GROUPS.index(f.metadata["group"]))
    return [(f.name, f.type, field(default=f.default, default_factory=f.default_factory, metadata=f.metadata))
            for f in fs]


RunConfig = make_dataclass("RunConfig", _assembled_fields(), bases=(_RunConfig,))
RunConfig.__module__ = __name__  # make_dataclass (Python 3.11) does not set it; pickling and the docs need it
RunConfig.__doc__ = ("Every key of a training run: the engine's (:class:`EngineKeys`) and every sync scheme's "
                     "(:mod:`lowbw.train.schemes.keys`). ``python -m lowbw train --help`` lists them with their "
                     "defaults.")
