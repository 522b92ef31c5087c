"""Validation of a run config: each value's type and range, then the rules across keys, then the names
looked up in registries. Every error is a :class:`ConfigError` naming the key to change.

A rule here spans extensions: the engine's keys, and what the schemes' declarations
(:class:`~lowbw.train.schemes.spec.SchemeSpec`) and the compressors' registrations say about themselves. A
scheme's own rules are its declaration's ``check`` (:mod:`lowbw.train.schemes.keys`), a compressor's its
registration's; nothing here names a scheme or a compressor."""

from __future__ import annotations

import difflib
import math
from dataclasses import fields
from typing import Any

from lowbw.comm.algorithms import ALLREDUCE_ALGORITHMS
from lowbw.net.trace import resolve_trace
from lowbw.net.units import keyed_number
from lowbw.train.config_key import ConfigError
from lowbw.train.faults import most_absent, parse_faults
from lowbw.train.schemes.registry import SCHEMES, key_sets, spec_of, users_of
from lowbw.train.schemes.spec import key_names
from lowbw.train.targets import TargetError, parse_targets
from lowbw.train.workload_specs import WORKLOADS

__all__ = ["ConfigError", "json_type", "coerce", "check_range", "check", "check_registries"]


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
    _check_scheme_keys(cfg)
    _check_batches(cfg)
    _check_assignment(cfg)
    _check_sync(cfg)
    _check_backends_and_network(cfg)
    _check_dropout(cfg)
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
    if cfg.epochs <= 0 and cfg.steps <= 0:
        raise ConfigError("epochs", "one of epochs or steps must be > 0")
    if cfg.dynamic_batch != "off" and cfg.dynamic_batch_max < cfg.global_batch:
        raise ConfigError("dynamic_batch_max", f"cap {cfg.dynamic_batch_max} is below the initial global batch "
                                               f"{cfg.global_batch}")
    if cfg.dynamic_batch != "off" and cfg.dynamic_batch_metric != "train_loss" and cfg.val_fraction == 0:
        raise ConfigError("dynamic_batch_metric",
                          f"{cfg.dynamic_batch_metric} needs a validation split (val_fraction > 0)")
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


def _check_scheme_keys(cfg) -> None:
    """A key that sync schemes declare (:mod:`lowbw.train.schemes.keys`) keeps its default under a scheme that
    does not read it: a value there would be ignored silently."""
    own = set(key_names(spec_of(cfg.sync)))
    for ks in key_sets():
        for f in fields(ks):
            if f.name not in own and getattr(cfg, f.name) != f.default:
                raise ConfigError(f.name, f"not used with sync={cfg.sync} (only with "
                                          f"{', '.join(users_of(f.name))})")


def _check_sync(cfg) -> None:
    """The rules that span schemes, read off the schemes' declarations: which schemes a compressed update, a
    DDP hook, churn or household shards need; per-worker speeds; then the run's scheme's own rules."""
    M, s = cfg.workers, cfg.sync
    spec = spec_of(s)
    if cfg.assignment == "household" and "households" not in key_names(spec):
        raise ConfigError("assignment", f"household assignment needs sync={' or '.join(users_of('households'))}")
    if cfg.compress_target == "update":
        if not spec.compress_updates or cfg.compressor == "none":
            raise ConfigError("compress_target", f"update compresses each worker's optimiser step: needs sync="
                                                 f"{' or '.join(_with('compress_updates'))} and a compressor "
                                                 f"(sync={s}, compressor={cfg.compressor})")
        if cfg.optimizer not in ("sgd", "adam", "adamw") or cfg.ddp_hook or cfg.adaptive != "off":
            raise ConfigError("compress_target", "update needs optimizer sgd, adam or adamw, no ddp_hook and "
                                                 "adaptive off")
    if cfg.worker_speeds and (len(cfg.worker_speeds) != M or any(v <= 0 for v in cfg.worker_speeds)):
        raise ConfigError("worker_speeds", f"{cfg.worker_speeds}: needs {M} positive numbers (one per worker)")
    try:
        churn = parse_faults(cfg.faults, M)
    except ValueError as e:
        raise ConfigError("faults", str(e)) from None
    if churn and most_absent(churn) >= M:
        raise ConfigError("faults", f"all {M} workers are away at once")
    if churn and not spec.tolerates_churn:
        raise ConfigError("faults", f"churn needs sync {', '.join(_with('tolerates_churn'))} (sync={s} waits for "
                                    "every worker at its exchanges)")
    if spec.check is not None:
        spec.check(cfg)


def _with(prop: str) -> list[str]:
    """The schemes whose declaration has property ``prop`` (:class:`~lowbw.train.schemes.spec.SchemeSpec`)."""
    return [name for name, spec in SCHEMES.items() if getattr(spec, prop)]


def _check_backends_and_network(cfg) -> None:
    """Backends, the virtual clock, compressor arguments and the network."""
    s = cfg.sync
    if cfg.ddp_hook:
        if cfg.backend == "sim":
            raise ConfigError("ddp_hook", "DDP communication hooks need real processes (backend procs or torchrun)")
        if not spec_of(s).ddp_hook:
            raise ConfigError("ddp_hook", f"DDP hooks implement sync={' or '.join(_with('ddp_hook'))}")
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
    if cfg.adaptive != "off" and cfg.adaptive_c_low > cfg.adaptive_c_high:
        raise ConfigError("adaptive_c_low", f"{cfg.adaptive_c_low} > adaptive_c_high={cfg.adaptive_c_high}")


def _check_dropout(cfg) -> None:
    """A dropout rate below 1, for a model that has dropout (its workload spec says so), drawn on an engine that
    gives each worker its own mask stream (lowbw.train.masks)."""
    p = cfg.dropout
    if not p:
        return
    if p >= 1:
        raise ConfigError("dropout", f"{p}: a rate 0 <= p < 1 (nanoGPT's GPU recipe: 0.2)")
    spec = WORKLOADS.get(cfg.model)
    if spec is None or not spec.dropout:
        raise ConfigError("dropout", f"{p}: model={cfg.model!r} has no dropout (models with dropout: "
                                     f"{', '.join(n for n, w in WORKLOADS.items() if w.dropout)})")
    if cfg.backend == "sim" and cfg.sim_engine == "vmap":
        raise ConfigError("sim_engine", "vmap draws every replica's dropout masks from one stream; with "
                                        f"dropout={p} use loop (or auto)")


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
    names = registry.available()
    if cfg.compressor != "none" and cfg.compressor not in names:
        raise ConfigError("compressor", f"{cfg.compressor!r} is unknown; allowed: {', '.join(names)}")
    if cfg.adaptive != "off":  # the registrations say whose density the policy may choose
        adaptable = [n for n in names if registry.entry(n).adaptive_density]
        if cfg.compressor not in adaptable:
            raise ConfigError("adaptive", f"moo adapts a top-k density: compressor must be {' or '.join(adaptable)}, "
                                          f"got {cfg.compressor!r}")
    if cfg.compressor == "none":
        return
    try:  # the arguments alone first, so a bad argument is blamed on compressor_args, not on error_feedback
        comp = registry.make(cfg.compressor, **dict(cfg.compressor_args))
    except (ValueError, TypeError) as e:
        raise ConfigError("compressor_args", str(e)) from e
    if cfg.ddp_hook and cfg.grad_clip and comp.clip_at == "worker":
        # the method clips each worker's raw gradient before compression (Compressor.clip_at), which a DDP hook,
        # running inside backward, cannot do
        raise ConfigError("grad_clip", f"{cfg.grad_clip}: {cfg.compressor} clips each worker's gradient before "
                                       "compression, which a DDP hook cannot: ddp_hook=false or grad_clip=0")
    try:
        make_compressor(cfg)
    except (ValueError, TypeError) as e:
        raise ConfigError("error_feedback", str(e)) from e
