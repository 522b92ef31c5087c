"""The methods the advisor ranks, and what each puts on the wire for a given model.

A candidate is one of the workflow's method presets (``methods:`` in ``config/config.yaml``, the one
definition of each method's settings, so that the efficiency table's measured runs and the advisor name the
same thing): every compressor at its usual setting with its error feedback, fp16/bf16 and dense fp32 as
baselines, and every sync scheme (local SGD, hierarchical, DiLoCo at two periods and with compressed
pseudo-gradients, Streaming DiLoCo, DeMo, SparseLoCo). The collective is not a candidate axis of its own:
each call of an exchange takes the fastest collective the cost model knows for it (step time).

Payload sizes per (compressor, shape) are cached in ``$LOWBW_CACHE_DIR`` (default ``~/.cache/lowbw``)
``/advise_parts.json`` (:mod:`lowbw.advise.cache`) while lowbw.compress's sources are unchanged.

Bytes are exact: each parameter shape is compressed with the preset's compressor (a seeded Gaussian
stand-in for the gradient; only thresholding's count depends on the values), and an exchange is the calls
``Compressor.aggregate`` makes: per layer, one all-reduce per payload part if the payload is summable,
else one all-gather per part; with buckets (``bucket_mb``, default 25 MB as DDP's ``bucket_cap_mb``: the
trainer's ``granularity: bucket``) one call per bucket and round instead; dense training all-reduces the flat
gradient (one DDP bucket). A shape of more
than ``CAP`` elements is compressed at three down-scaled shapes and each part's bytes fitted as
``a + b numel + c (sum of dims)`` (exact for every compressor whose payload is affine in those, which is all
of lowbw's but thresholding).
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from lowbw.advise.cache import load_cache, save_cache
from lowbw.buckets import DEFAULT_BUCKET_MB, assign

__all__ = ["Candidate", "Call", "Exchange", "FAMILIES", "candidates", "candidate_from_config", "compressor_of",
           "exchange", "CAP",
           "CONFIG_FILE", "MODELLED_SYNC"]

CONFIG_FILE = Path(__file__).resolve().parents[2] / "config" / "config.yaml"
CAP = 1 << 20  # largest shape (elements) compressed as it is
_COMPRESS_DIR = Path(__file__).resolve().parents[1] / "compress"  # cached sizes hold while its sources do

# preset name -> family (the efficiency table's fallback grouping and the reasons' words)
FAMILIES: dict[str, str] = {
    "dense": "dense", "fp16": "precision", "bf16": "precision",
    "q8lin": "quantize", "q8nl": "quantize", "q16lin": "quantize", "qsgd": "quantize", "terngrad": "quantize",
    "twobit": "quantize", "thresh": "sparsify", "topk10": "sparsify", "topk1": "sparsify", "topk01": "sparsify",
    "randk1": "sparsify", "dgc": "sparsify", "artopk": "sparsify", "powersgd": "lowrank", "signsgd": "sign",
    "efsign": "sign", "onebit": "sign", "local4": "local", "local16": "local", "hh2": "hierarchical",
    "diloco16": "diloco", "diloco64": "diloco", "diloco16q8": "diloco", "diloco16q4": "diloco",
    "sdiloco16": "streaming", "demo": "demo", "sparseloco16": "sparseloco",
}
# families whose dense exchange overlaps the backward pass (DDP's buckets; lowbw's fp16/bf16 DDP hooks)
OVERLAP = ("dense", "precision")


@dataclass(frozen=True)
class Candidate:
    """One method, as the workflow's preset of the same name sets it."""

    name: str  # the preset's name (config/config.yaml methods), also the efficiency table's key
    family: str  # FAMILIES' word for it
    compressor: str  # lowbw.compress name; "none" = the dense fp32 gradient
    compressor_args: tuple[tuple[str, Any], ...]  # the preset's compressor_args, sorted
    error_feedback: bool | None  # None: the compressor's own default
    period: int  # H: steps between world exchanges (1: every step)
    fragments: int  # Streaming DiLoCo: parameter fragments, one exchanged every period / fragments steps
    delay: int  # Streaming DiLoCo: steps a fragment's exchange may overlap before it is applied
    households: int  # hierarchical: groups that also average every step among themselves (0: none)
    overlap: bool  # the exchange may hide behind the backward pass

    @property
    def label(self) -> str:
        """Short words for the table: the compressor and how often."""
        what = {"none": "fp32"}.get(self.compressor, self.compressor)
        args = ",".join(f"{k}={v}" for k, v in self.compressor_args)
        every = f" every {self.period}" if self.period > 1 else ""
        return f"{what}{'(' + args + ')' if args else ''}{every}"


def _candidate(name: str, preset: dict[str, Any], family: str | None = None) -> Candidate:
    family = family or FAMILIES[name]
    sync = preset.get("sync", "sync")
    ef = {"on": True, "off": False}.get(str(preset.get("error_feedback", "auto")))
    period = int(preset.get("world_period", 1)) if sync in ("local", "diloco", "hierarchical") else 1
    return Candidate(name, family, preset.get("compressor", "none"),
                     tuple(sorted((preset.get("compressor_args") or {}).items())), ef, period,
                     int(preset.get("diloco_fragments", 1) or 1), int(preset.get("diloco_delay", 0) or 0),
                     int(preset.get("households", 0) or 0) if sync == "hierarchical" else 0,
                     family in OVERLAP)


# sync schemes whose step the advisor models (lowbw.advise.steptime); ssp, async, desloc, sparta, post_local: none
MODELLED_SYNC = ("sync", "local", "diloco", "hierarchical")


def _family(name: str, cfg: dict[str, Any]) -> str:
    """FAMILIES' word for a preset name, else one derived from the settings (a method outside the presets)."""
    if name in FAMILIES:
        return FAMILIES[name]
    sync, comp = cfg.get("sync", "sync"), cfg.get("compressor", "none")
    if sync == "diloco":
        return "streaming" if int(cfg.get("diloco_fragments", 1) or 1) > 1 else "diloco"
    if sync in ("local", "hierarchical"):
        return sync
    return "dense" if comp == "none" else "precision" if comp in ("fp16", "bf16") else "compressed"


def candidate_from_config(name: str, cfg: dict[str, Any]) -> Candidate | None:
    """The candidate a run's (or preset's) settings describe, named ``name``; None for a sync scheme whose step
    the advisor does not model (:data:`MODELLED_SYNC`) or a per-step choice of compressor (``adaptive``)."""
    if cfg.get("sync", "sync") not in MODELLED_SYNC or str(cfg.get("adaptive") or "off") not in ("off", "none"):
        return None
    return _candidate(name, cfg, _family(name, cfg))


@cache
def candidates(config_file: Path = CONFIG_FILE) -> tuple[Candidate, ...]:
    """Every candidate, from the presets in ``config_file`` (one that lacks a candidate's preset is an error
    naming it: the advisor and the runs must mean the same method)."""
    import yaml  # lazy only for symmetry with the rest: yaml imports in milliseconds

    presets = (yaml.safe_load(config_file.read_text()) or {}).get("methods") or {}
    missing = [n for n in FAMILIES if n not in presets]
    if missing:
        raise ValueError(f"{config_file}: no method preset for candidate(s) {', '.join(missing)}")
    return tuple(_candidate(n, presets[n]) for n in FAMILIES)


@dataclass(frozen=True)
class Call:
    """One collective call of an exchange."""

    op: str  # "all_reduce" (summable payload or dense) | "all_gather"
    nbytes: float  # this rank's input, bytes
    group: str  # "world" | "household"
    sizes_known: bool = False  # all_gather of fixed-size payloads in a bucket: no size exchange first


@dataclass(frozen=True)
class Exchange:
    """What one exchange of a candidate sends, for the whole model."""

    calls: tuple[Call, ...]  # in order
    bytes_sent: float  # sum of the calls' inputs (bytes per worker, before the collective's own traffic)
    compress_s: float  # compression + decompression of the whole model once, timed here (s)
    exact: bool  # False where a shape was extrapolated or the payload depends on the values (thresholding)


def compressor_of(c: Candidate):
    """The candidate's compressor as its preset sets it (``lowbw.compress.make``; error feedback where set)."""
    from lowbw.compress import make  # lazy: lowbw.compress imports torch

    kw: dict[str, Any] = dict(c.compressor_args)
    if c.error_feedback is not None:
        kw["error_feedback"] = c.error_feedback
    try:
        return make(c.compressor, **kw)
    except ValueError:  # a compressor whose error feedback is fixed by its definition
        kw.pop("error_feedback", None)
        return make(c.compressor, **kw)


def _parts(comp, shape: tuple[int, ...]) -> tuple[list[float], bool, float]:
    """(bytes of each payload part, summable, seconds to compress and decompress) for one tensor."""
    import torch  # lazy: see compressor_of

    from lowbw.compress import State  # lazy: the compressors import torch (a cache miss only)

    g = torch.Generator().manual_seed(math.prod(shape) % 100_003)
    x = torch.randn(shape, generator=g)
    t = time.perf_counter()
    p = comp.compress(x, name="advise", state=State(seed=0))
    comp.decompress(p)
    dt = time.perf_counter() - t
    return [float(q.numel() * q.element_size()) for q in p.parts], bool(comp.summable), dt


def _fitted_parts(comp, shape: tuple[int, ...]) -> tuple[list[float], bool, float]:
    """:func:`_parts` of a shape above ``CAP``, fitted from three down-scaled shapes (module docstring)."""
    import numpy as np

    n = math.prod(shape)
    f = math.ceil((n / CAP) ** (1.0 / len(shape)))
    rows, ys, summable, dts = [], [], True, []
    for k in (4 * f, 2 * f, f):
        s = tuple(max(1, math.ceil(d / k)) for d in shape)
        parts, summable, dt = _parts(comp, s)
        rows.append([1.0, math.prod(s), sum(s)])
        ys.append(parts)
        dts.append(dt / math.prod(s))
    if len({len(y) for y in ys}) != 1:
        raise ValueError(f"{comp!r}: payload parts vary with the shape; cannot extrapolate {shape}")
    coef = np.linalg.lstsq(np.array(rows), np.array(ys), rcond=None)[0]
    want = np.array([1.0, n, sum(shape)])
    return [max(0.0, float(v)) for v in want @ coef], summable, dts[-1] * n


def exchange(c: Candidate, shapes: tuple[tuple[str, tuple[int, ...]], ...],
             bucket_mb: float | None = DEFAULT_BUCKET_MB) -> Exchange:
    """The calls of one world exchange of candidate ``c`` for a model with parameter ``shapes``: per DDP bucket
    of ``bucket_mb`` MB (``granularity: bucket``, the trainer's default with a compressor), else per tensor."""
    n = sum(math.prod(s) for _, s in shapes)
    if c.compressor == "none":  # the flat fp32 gradient (or parameters), one bucket
        return Exchange((Call("all_reduce", 4.0 * n, "world"),), 4.0 * n, 0.0, True)
    cache_ = load_cache("parts", _COMPRESS_DIR)
    spec = json.dumps([c.compressor, c.compressor_args, c.error_feedback], default=str)
    comp = None
    calls: list[Call] = []
    total_s = 0.0
    exact = c.compressor != "threshold"
    dirty = False
    per_tensor = []
    for _, shape in shapes:
        big = math.prod(shape) > CAP
        exact = exact and not big
        key = f"{spec}|{shape}"
        if key not in cache_:
            comp = comp or compressor_of(c)
            cache_[key] = (_fitted_parts if big else _parts)(comp, shape)
            dirty = True
        parts, summable, dt = cache_[key]
        total_s += dt
        per_tensor.append((parts, summable))
    if f"{spec}|fixed" not in cache_:
        comp = comp or compressor_of(c)
        cache_[f"{spec}|packs"] = bool(comp.packs)
        cache_[f"{spec}|fixed"] = bool(comp.fixed_size)
        dirty = True
    if dirty:
        save_cache("parts", _COMPRESS_DIR, cache_)
    if bucket_mb is None or not cache_[f"{spec}|packs"]:
        calls = [Call("all_reduce" if summable else "all_gather", b, "world") for parts, summable in per_tensor
                 for b in parts]
    else:
        calls = _bucket_calls(per_tensor, [4 * math.prod(s) for _, s in shapes], bucket_mb, cache_[f"{spec}|fixed"])
    return Exchange(tuple(calls), sum(x.nbytes for x in calls), total_s, exact)


def _bucket_calls(per_tensor: list[tuple[list[float], bool]], nbytes: list[int], bucket_mb: float,
                  fixed: bool) -> list[Call]:
    """The calls of a bucketed exchange (:mod:`lowbw.compress.packing`): per bucket (:func:`lowbw.buckets.assign`
    of the fp32 sizes), summable payloads one all-reduce per round (part j of every tensor: PowerSGD's Ps, then
    its Qs), the rest one all-gather of every part and its 8-byte length; ``fixed`` (payloads of fixed
    lengths: top-k) one all-gather of the parts alone, with no size exchange before it."""
    calls: list[Call] = []
    for b in sorted(assign(nbytes, bucket_mb)):
        gathered = [p for i in b if not per_tensor[i][1] for p in per_tensor[i][0]]
        rounds = max((len(per_tensor[i][0]) for i in b if per_tensor[i][1]), default=0)
        for j in range(rounds):
            calls.append(Call("all_reduce", sum(per_tensor[i][0][j] for i in b
                                                if per_tensor[i][1] and j < len(per_tensor[i][0])), "world"))
        if gathered:
            calls.append(Call("all_gather", sum(gathered) + (0.0 if fixed else 8.0 * len(gathered)), "world", fixed))
    return calls
