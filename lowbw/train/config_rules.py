"""Validation of a run config: each value's type and range, then the rules across keys, then the names
looked up in registries. Every error is a :class:`ConfigError` naming the key to change."""

from __future__ import annotations

import difflib
import math
from dataclasses import fields
from typing import Any

from lowbw.algorithms import ALLREDUCE_ALGORITHMS
from lowbw.net.trace import resolve_trace
from lowbw.net.units import keyed_number
from lowbw.train.faults import most_absent, parse_faults
from lowbw.train.targets import TargetError, parse_targets

__all__ = ["ConfigError", "json_type", "coerce", "check_range", "check", "check_registries"]


class ConfigError(ValueError):
    """An invalid run configuration; ``key`` names the offending key."""

    def __init__(self, key: str, message: str):
        super().__init__(f"{key}: {message}")
        self.key = key


# ----------------------------------------------------------------------------------------------- values
def json_type(f) -> str:
    """The JSON Schema type of a RunConfig field."""
    t = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", str(f.type))
    return {"str": "string", "int": "integer", "float": "number", "bool": "boolean", "list[float]": "array",
            "list[str]": "array", "dict": "object"}[t]


def coerce(f, v: Any) -> Any:
    kind = json_type(f)
    k = f.name
    if kind == "string":
        if k == "error_feedback" and isinstance(v, bool):  # YAML 1.1 reads on/off as booleans
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
    if kind in ("number", "array") and k.endswith(("_mbit", "_ms")):  # "10mbit" ok; "10mbps", "1gbit" refused

        try:
            v = [keyed_number(k, x) for x in v] if isinstance(v, list | tuple) else keyed_number(k, v)
        except ValueError as e:
            raise ConfigError(k, str(e).removeprefix(f"{k}: ")) from None
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
    if kind == "array" and k == "targets":  # accuracies as numbers, or "<metric><=|>=<value>" strings
        if not isinstance(v, list | tuple) or any(isinstance(x, bool) or not isinstance(x, int | float | str)
                                                  for x in v):
            raise ConfigError(k, f"expected a list of accuracies or \"val_loss<=1.9\"-style strings, got {v!r}")
        return [x if isinstance(x, str) else float(x) for x in v]
    if kind == "array" and f.type == "list[str]":
        if isinstance(v, str):
            v = [v]
        if not isinstance(v, list | tuple) or any(not isinstance(x, str) for x in v):
            raise ConfigError(k, f"expected a list of strings, got {v!r}")
        return list(v)
    if kind == "array":
        if not isinstance(v, list | tuple) or any(isinstance(x, bool) or not isinstance(x, int | float) for x in v):
            raise ConfigError(k, f"expected a list of numbers, got {v!r}")
        return [float(x) for x in v]
    if kind == "object":
        if not isinstance(v, dict):
            raise ConfigError(k, f"expected a mapping, got {v!r}")
        return dict(v)
    raise AssertionError(kind)


def check_range(f, v: Any) -> None:
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


# ----------------------------------------------------------------------------------------------- across keys
def check(cfg, *, registries: bool = True) -> None:
    """Every rule, in order: ranges, then the cross-key rules, then (with ``registries``) the registries."""
    for f in fields(cfg):
        check_range(f, getattr(cfg, f.name))
    _check_batches(cfg)
    _check_assignment(cfg)
    _check_sync(cfg)
    _check_backends_and_network(cfg)
    if registries:
        check_registries(cfg)


def _check_batches(cfg) -> None:
    """Batch sizes, run length, learning-rate milestones, dynamic batch size and targets."""
    M = cfg.workers
    if cfg.local_batch_size and cfg.batch_size and cfg.batch_size != M * cfg.local_batch_size:
        raise ConfigError("batch_size",
                          f"{cfg.batch_size} != workers x local_batch_size = {M} x {cfg.local_batch_size}")
    if not cfg.local_batch_size and not cfg.effective_batch_size:
        B = cfg.batch_size or 128
        if B % M:
            raise ConfigError("batch_size", f"global batch {B} is not divisible by workers={M}")
    if cfg.effective_batch_size and cfg.sync != "hierarchical":
        raise ConfigError("effective_batch_size", "only meaningful with sync=hierarchical (thesis Appendix A)")
    if cfg.effective_batch_size and (cfg.batch_size or cfg.local_batch_size):
        raise ConfigError("effective_batch_size", "set either effective_batch_size or batch_size/local_batch_size")
    if cfg.epochs <= 0 and cfg.steps <= 0:
        raise ConfigError("epochs", "one of epochs or steps must be > 0")
    if cfg.dynamic_batch != "off" and cfg.dynamic_batch_max < cfg.global_batch:
        raise ConfigError("dynamic_batch_max", f"cap {cfg.dynamic_batch_max} is below the initial global batch "
                                               f"{cfg.global_batch}")
    if cfg.dynamic_batch != "off" and cfg.dynamic_batch_metric != "train_loss" and cfg.val_fraction == 0:
        raise ConfigError("dynamic_batch_metric",
                          f"{cfg.dynamic_batch_metric} needs a validation split (val_fraction > 0)")
    if cfg.dynamic_batch != "off" and cfg.sync in ("ssp", "async"):
        raise ConfigError("dynamic_batch", f"not supported with sync={cfg.sync}")
    ms = cfg.lr_milestones
    if any(not (0 < m < 1) for m in ms) or list(ms) != sorted(ms):
        raise ConfigError("lr_milestones", f"{ms}: must be increasing fractions in (0, 1)")
    try:
        parse_targets(cfg.targets)
    except TargetError as e:
        raise ConfigError("targets", str(e)) from None


def _check_assignment(cfg) -> None:
    """The data assignment's shards and copies."""
    M = cfg.workers
    a = cfg.assignment
    if a == "coarse":
        if not cfg.shards or M % cfg.shards:
            raise ConfigError("shards", f"coarse assignment needs shards S dividing workers={M} (got {cfg.shards})")
    elif cfg.shards:
        raise ConfigError("shards", f"only used with assignment=coarse (assignment={a})")
    if a in ("medium", "fine"):
        if not 1 <= cfg.copies <= M:
            raise ConfigError("copies", f"{a} assignment needs 1 <= copies <= workers={M} (got {cfg.copies})")
    elif cfg.copies:
        raise ConfigError("copies", f"only used with assignment=medium or fine (assignment={a})")
    if a == "household" and cfg.sync != "hierarchical":
        raise ConfigError("assignment", "household assignment needs sync=hierarchical")


def _check_sync(cfg) -> None:
    """Synchronisation schemes: households, neighbourhoods and their periods; what each scheme may be combined with."""
    M, s, a = cfg.workers, cfg.sync, cfg.assignment
    if s == "hierarchical":
        H = cfg.households
        if H < 1 or M % H:
            raise ConfigError("households", f"hierarchical needs households H dividing workers={M} (got {H})")
        if a not in ("disjoint", "household"):
            raise ConfigError("assignment",
                              "hierarchical uses household shards: assignment must be disjoint or household")
        SH = cfg.household_shards or H
        if H % SH:
            raise ConfigError("household_shards", f"S_H={SH} must divide households={H}")
        if a == "disjoint" and SH != H:
            raise ConfigError("household_shards", "S_H < H overlaps households: use assignment=household")
        NB = cfg.neighbourhoods
        if NB:
            if H % NB or NB >= H:
                raise ConfigError("neighbourhoods", f"NB={NB} must divide households={H} and be smaller")
            if not cfg.neighbourhood_period:
                raise ConfigError("neighbourhood_period", "set L_N when neighbourhoods > 0")
            if not (cfg.household_period <= cfg.neighbourhood_period <= cfg.world_period):
                raise ConfigError("neighbourhood_period", f"need L_H <= L_N <= L_W (got {cfg.household_period}, "
                                                          f"{cfg.neighbourhood_period}, {cfg.world_period})")
        elif cfg.neighbourhood_period:
            raise ConfigError("neighbourhood_period", "only used with neighbourhoods > 0")
        if cfg.household_period > cfg.world_period:
            raise ConfigError("household_period", f"L_H={cfg.household_period} > L_W={cfg.world_period}")
    else:
        for k in ("households", "neighbourhoods", "neighbourhood_period", "household_shards"):
            if getattr(cfg, k):
                raise ConfigError(k, f"only used with sync=hierarchical (sync={s})")
    if s != "diloco":
        for f in fields(cfg):
            if (f.name.startswith("outer_") and getattr(cfg, f.name) != f.default
                    and not (s == "noloco" and f.name in ("outer_lr", "outer_momentum"))
                    and not (s in ASYNC_OUTER and f.name in ("outer_lr", "outer_momentum"))
                    and not (s == "decoupled_diloco" and f.name == "outer_optimizer")):
                raise ConfigError(f.name, f"only used with sync=diloco (noloco: outer_lr, outer_momentum; "
                                          f"sync={s})")
    if cfg.compress_target == "update":
        if s != "sync" or cfg.compressor == "none":
            raise ConfigError("compress_target", f"update compresses each worker's optimiser step: needs sync=sync "
                                                 f"and a compressor (sync={s}, compressor={cfg.compressor})")
        if cfg.optimizer not in ("sgd", "adam", "adamw") or cfg.ddp_hook or cfg.adaptive != "off":
            raise ConfigError("compress_target", "update needs optimizer sgd, adam or adamw, no ddp_hook and "
                                                 "adaptive off")
    if s == "noloco" and (M < 2 or M % 2):
        raise ConfigError("workers", f"noloco pairs the workers: needs an even number >= 2, got {M}")
    _check_new_schemes(cfg)
    _check_async_outer(cfg)
    if s in ("sync", "ssp", "async", "sparta") and cfg.world_period != 1:
        raise ConfigError("world_period", f"not used with sync={s}")
    if s in ("ssp", "async") and cfg.backend != "sim":
        raise ConfigError("backend", f"sync={s} runs on the sim backend only")
    if s in ("ssp", "async", "local", "desloc", "sparta", "noloco") and cfg.compressor != "none":
        raise ConfigError("compressor", f"sync={s} averages models / pushes to a parameter server densely; "
                                        "compressors apply to gradient synchronisation (sync, post_local, "
                                        "hierarchical with household_period=1)")
    if s == "hierarchical" and cfg.compressor != "none" and cfg.household_period != 1:
        raise ConfigError("compressor", "hierarchical compresses the per-step household gradient average: needs "
                                        "household_period=1")
    if cfg.worker_speeds and (len(cfg.worker_speeds) != M or any(v <= 0 for v in cfg.worker_speeds)):
        raise ConfigError("worker_speeds", f"{cfg.worker_speeds}: needs {M} positive numbers (one per worker)")
    if s != "diloco":
        for k in ("diloco_fragments", "diloco_delay"):
            if getattr(cfg, k) != (1 if k == "diloco_fragments" else 0):
                raise ConfigError(k, f"only used with sync=diloco (sync={s})")
    elif cfg.world_period % cfg.diloco_fragments:
        raise ConfigError("diloco_fragments", f"{cfg.diloco_fragments} does not divide world_period="
                                              f"{cfg.world_period} (a fragment every H/F inner steps)")
    elif cfg.diloco_delay >= cfg.world_period:
        raise ConfigError("diloco_delay", f"{cfg.diloco_delay}: must be below world_period={cfg.world_period} "
                                          "(a fragment's update lands before its next exchange)")


ASYNC_OUTER = ("async_diloco", "decoupled_diloco", "halos")  # the schemes of lowbw.train.schemes.async_outer


def _check_async_outer(cfg) -> None:
    """async_diloco, decoupled_diloco and halos (issue 48): their own keys only where used; what they run on."""
    s, M = cfg.sync, cfg.workers
    shared = ("async_dylu", "async_grace_s")  # the engine's; the rest each policy's own
    own = {"async_diloco": ("async_",), "decoupled_diloco": (*shared, "decoupled_"), "halos": (*shared, "halos_")}
    for f in fields(cfg):
        if (f.name.startswith(("async_", "decoupled_", "halos_")) and getattr(cfg, f.name) != f.default
                and not f.name.startswith(own.get(s, ()))):
            raise ConfigError(f.name, f"not used with sync={s}")
    try:
        churn = parse_faults(cfg.faults, M)
    except ValueError as e:
        raise ConfigError("faults", str(e)) from None
    if churn and most_absent(churn) >= M:
        raise ConfigError("faults", f"all {M} workers are away at once")
    if churn and s not in ASYNC_OUTER:
        raise ConfigError("faults", f"churn needs sync async_diloco, decoupled_diloco or halos (sync={s} waits for "
                                    "every worker at its exchanges)")
    if churn and s == "decoupled_diloco" and (cfg.decoupled_quorum or M) > M - most_absent(churn):
        raise ConfigError("decoupled_quorum", f"{cfg.decoupled_quorum or M} learners can not meet while "
                                              f"{most_absent(churn)} of {M} are away (faults): set it lower")
    if s not in ASYNC_OUTER:
        return
    if cfg.backend != "sim" and cfg.clock != "model":
        raise ConfigError("clock", f"sync={s} on {cfg.backend} needs clock=model (every process replays one event "
                                   "schedule)")
    if cfg.compressor != "none":
        raise ConfigError("compressor", f"sync={s} pushes dense Deltas to its server (got {cfg.compressor!r})")
    if cfg.dynamic_batch != "off":
        raise ConfigError("dynamic_batch", f"not supported with sync={s}")
    if s == "async_diloco" and cfg.async_momentum_activation and (cfg.async_buffer or M) == 1:
        raise ConfigError("async_momentum_activation", "needs a buffer async_buffer > 1 (with N = 1 c does nothing)")
    if s == "decoupled_diloco" and cfg.decoupled_quorum > M:
        raise ConfigError("decoupled_quorum", f"{cfg.decoupled_quorum} is above workers={M}")
    if s == "halos" and M % cfg.halos_regions:
        raise ConfigError("halos_regions", f"{cfg.halos_regions} does not divide workers={M}")
    if s == "halos" and cfg.halos_region_latency_ms < 0 and cfg.halos_region_latency_ms != -1:
        raise ConfigError("halos_region_latency_ms", f"{cfg.halos_region_latency_ms}: >= 0, or -1 (latency_ms)")


def _check_new_schemes(cfg) -> None:
    """Muon, DES-LOC, SPARTA and Streaming DiLoCo's own keys (issue 35): each only where it is used."""
    s = cfg.sync
    if cfg.optimizer == "muon" and s in ("ssp", "async"):
        raise ConfigError("optimizer", f"muon is not wired into the parameter server (sync={s})")
    if s == "desloc" and cfg.optimizer not in ("adam", "adamw"):
        raise ConfigError("optimizer", f"desloc averages Adam's moments: needs adam or adamw, got {cfg.optimizer!r}")
    if s != "desloc":
        for k in ("desloc_m1_period", "desloc_m2_period"):
            if getattr(cfg, k):
                raise ConfigError(k, f"only used with sync=desloc (sync={s})")
    if s == "sparta" and cfg.sparta_density <= 0:
        raise ConfigError("sparta_density", "sync=sparta needs a density p in (0, 1] (e.g. 0.001)")
    if cfg.sparta_density and s not in ("sparta", "diloco"):
        raise ConfigError("sparta_density", f"only used with sync=sparta or sync=diloco (sync={s})")
    if s != "diloco":
        for k, v in (("diloco_fragment_layout", "contiguous"), ("diloco_alpha", 0.0),
                     ("diloco_schedule", "start_at_slot"), ("diloco_overlap", "none")):
            if getattr(cfg, k) != v:
                raise ConfigError(k, f"only used with sync=diloco (sync={s})")
    elif cfg.diloco_overlap != "none" and (cfg.diloco_fragments != 1 or cfg.diloco_delay or cfg.diloco_alpha):
        raise ConfigError("diloco_overlap", f"{cfg.diloco_overlap} overlaps whole outer steps: needs "
                                            "diloco_fragments 1, diloco_delay 0 and diloco_alpha 0")


def _check_backends_and_network(cfg) -> None:
    """Backends, the virtual clock, compressor arguments and the network."""
    s = cfg.sync
    if cfg.ddp_hook:
        if cfg.backend == "sim":
            raise ConfigError("ddp_hook", "DDP communication hooks need real processes (backend procs or torchrun)")
        if s != "sync":
            raise ConfigError("ddp_hook", "DDP hooks implement sync=sync")
        if cfg.grad_clip and cfg.compressor in ("demo", "signsgd", "ef_signsgd"):
            # these clip each worker's raw gradient before compression (Compressor.clip_at), which a DDP hook,
            # running inside backward, cannot do
            raise ConfigError("grad_clip", f"{cfg.grad_clip}: {cfg.compressor} clips each worker's gradient before "
                                           "compression, which a DDP hook cannot: ddp_hook=false or grad_clip=0")
    if cfg.testbed and cfg.backend != "procs":
        raise ConfigError("testbed", "the tc testbed launches real processes: backend=procs")
    if cfg.testbed_realtime and not cfg.testbed:
        raise ConfigError("testbed_realtime", f"{cfg.testbed_realtime}: schedules the testbed's workers: needs "
                                              "testbed=true")
    if cfg.clock == "model" and cfg.clock_sample_s <= 0:
        raise ConfigError("clock_sample_s", "clock=model needs seconds per sample > 0")
    if cfg.compressor == "none" and cfg.compressor_args:
        raise ConfigError("compressor_args", "given but compressor=none")
    for k in ("worker_bandwidth_mbit", "worker_uplink_mbit", "worker_latency_ms"):
        v = getattr(cfg, k)
        if v and (len(v) != cfg.workers or min(v) < 0 or (k != "worker_latency_ms" and min(v) <= 0)):
            raise ConfigError(k, f"{v}: needs {cfg.workers} numbers (one per worker), "
                                 + ("each >= 0" if k == "worker_latency_ms" else "each > 0"))
    if cfg.link_loss >= 0.5:
        raise ConfigError("link_loss", f"{cfg.link_loss}: a fraction below 0.5 (0.01 = 1% of packets lost)")
    if cfg.tcp_congestion != "bbr" and not cfg.link_loss:
        raise ConfigError("tcp_congestion", f"{cfg.tcp_congestion}: only used with link_loss > 0")
    if cfg.bandwidth_trace and cfg.bandwidth_schedule:
        raise ConfigError("bandwidth_trace", "give a trace or a bandwidth_schedule, not both")
    if cfg.bandwidth_trace:
        try:
            resolve_trace(cfg.bandwidth_trace, cfg.workers)
        except ValueError as e:  # the file's own message starts with the testbed's flag: name the key instead
            raise ConfigError("bandwidth_trace", str(e).removeprefix("--trace ")) from None
    sched = cfg.bandwidth_schedule
    if sched:
        ts, bs = sched[0::2], sched[1::2]
        if len(sched) % 2 or min(ts) < 0 or min(bs) <= 0 or any(a >= b for a, b in zip(ts, ts[1:])):
            raise ConfigError("bandwidth_schedule",
                              f"{sched}: needs flat pairs [t0, mbit0, t1, mbit1, ...], t >= 0 increasing, mbit > 0")
    if cfg.adaptive != "off":
        if cfg.compressor not in ("topk", "artopk"):
            raise ConfigError("adaptive", f"moo adapts a top-k density: compressor must be topk or artopk, got "
                                          f"{cfg.compressor!r}")
        if cfg.adaptive_c_low > cfg.adaptive_c_high:
            raise ConfigError("adaptive_c_low", f"{cfg.adaptive_c_low} > adaptive_c_high={cfg.adaptive_c_high}")


def _check_workload(cfg) -> None:
    """A model that fits its data: text models on text, image models on images; a context that fits the
    validation split; targets that the workload's evaluation reports."""
    # lazy: keeps the Snakefile's planning free of torch
    from lowbw.data.text import TEXT_SPECS
    from lowbw.train.models import GPT_SIZES, model_kind
    from lowbw.train.userfiles import is_file_spec

    text = cfg.dataset in TEXT_SPECS
    kind = "file" if is_file_spec(cfg.model) else model_kind(cfg.model)
    if is_file_spec(cfg.dataset):
        _no_test_targets(cfg, "a dataset file", "\"val_acc>=0.9\" or \"val_loss<=1.9\"")
        if cfg.block_size:
            raise ConfigError("block_size", f"{cfg.block_size}: only lowbw's text datasets have a context length")
        return
    if text and kind == "image":
        raise ConfigError("model", f"{cfg.model!r} is an image model; dataset={cfg.dataset!r} is text "
                                   f"(use one of {', '.join(GPT_SIZES)})")
    if not text and kind == "text":
        raise ConfigError("dataset", f"{cfg.dataset!r} holds images; model={cfg.model!r} is a language model "
                                     f"(use dataset: {', '.join(TEXT_SPECS)})")
    if text:
        spec = TEXT_SPECS[cfg.dataset]
        val_chars = spec.chars - int(spec.chars * spec.train_fraction)
        T = cfg.block_size or (GPT_SIZES[cfg.model].block_size if cfg.model in GPT_SIZES else 64)
        if val_chars <= T:  # a window is T + 1 characters
            raise ConfigError("block_size", f"{T} is longer than the validation split of {cfg.dataset} "
                                            f"({val_chars} characters)")
        _no_test_targets(cfg, cfg.dataset, "\"val_loss<=1.9\"")
    elif cfg.block_size:
        raise ConfigError("block_size", f"{cfg.block_size}: only text datasets have a context length")


def _no_test_targets(cfg, what: str, example: str) -> None:
    """A dataset without a test split (``what``) takes validation targets only: a one-line error naming the rest."""
    bad = [t.name for t in parse_targets(cfg.targets) if t.metric.startswith("test")]
    if bad:
        raise ConfigError("targets", f"{bad}: {what} has no test split; write a validation target such as {example}")


def check_registries(cfg) -> None:
    """Names looked up in registries: model, dataset, collective, compressor and its arguments."""
    # lazy: the registries import torch and the data layer, which the Snakefile's planning does without
    from lowbw.compress import registry
    from lowbw.data import available as datasets
    from lowbw.data.text import text_available
    from lowbw.train.aggregate import make_compressor
    from lowbw.train.models import MODELS
    from lowbw.train.userfiles import check_spec, is_file_spec

    for key in ("model", "dataset"):  # the user's own file: it exists, imports and defines the callable
        spec = getattr(cfg, key)
        if is_file_spec(spec):
            try:
                check_spec(spec, key)
            except ValueError as e:
                raise ConfigError(key, str(e).removeprefix(f"{key} ")) from None
    if cfg.model not in MODELS and not cfg.model.startswith("torchvision:") and not is_file_spec(cfg.model):
        raise ConfigError("model", f"{cfg.model!r} is unknown; allowed: {', '.join(MODELS)}, or "
                                   f"path/to/module.py:build")
    all_datasets = [*datasets(), *text_available()]
    if cfg.dataset != "synthetic" and cfg.dataset not in all_datasets and not is_file_spec(cfg.dataset):
        raise ConfigError("dataset", f"{cfg.dataset!r} is unknown; allowed: {', '.join(all_datasets)}, or "
                                     f"path/to/module.py:build")
    _check_workload(cfg)
    if cfg.collective not in ALLREDUCE_ALGORITHMS:
        raise ConfigError("collective", f"{cfg.collective!r} is unknown; allowed: {', '.join(ALLREDUCE_ALGORITHMS)}")
    if cfg.compressor == "none":
        return
    names = registry.available()
    if cfg.compressor not in names:
        raise ConfigError("compressor", f"{cfg.compressor!r} is unknown; allowed: {', '.join(names)}")
    try:  # the arguments alone first, so a bad argument is blamed on compressor_args, not on error_feedback
        registry.make(cfg.compressor, **dict(cfg.compressor_args))
    except (ValueError, TypeError) as e:
        raise ConfigError("compressor_args", str(e)) from e
    try:
        make_compressor(cfg)
    except (ValueError, TypeError) as e:
        raise ConfigError("error_feedback", str(e)) from e
