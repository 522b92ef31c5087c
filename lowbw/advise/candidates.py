"""The methods the advisor ranks, and what each puts on the wire for a given model.

A candidate is one of the workflow's method presets (``methods:`` in ``config/config.yaml``, the one
definition of each method's settings, so that the efficiency table's measured runs and the advisor name the
same thing), those the config's ``advise: candidates:`` lists: every compressor at its usual setting with its
error feedback, fp16/bf16 and dense fp32 as baselines, and every sync scheme (local SGD, hierarchical, DiLoCo
at two periods and with compressed pseudo-gradients, Streaming DiLoCo, DeMo, SparseLoCo). A candidate's
family is derived (:func:`family_of`): its compressor's registered family (``lowbw.compress.registry``) under
plain synchronous training or where the compressor is a whole method, else its sync scheme's. The collective
is not a candidate axis of its own: each call of an exchange takes the fastest collective the cost model
knows for it (step time).

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
from dataclasses import dataclass, fields
from functools import cache
from pathlib import Path
from typing import Any

from lowbw.advise.cache import load_cache, save_cache
from lowbw.collective.buckets import DEFAULT_BUCKET_MB, assign
from lowbw.train.config_fields import RunConfig
from lowbw.train.schemes.registry import advised, reads
from lowbw.train.schemes.registry import family_of as scheme_family

__all__ = ["Candidate", "Call", "Exchange", "candidates", "candidate_from_config", "family_of", "compressor_of",
           "exchange", "CAP",
           "CONFIG_FILE", "MODELLED_SYNC"]

CONFIG_FILE = Path(__file__).resolve().parents[2] / "config" / "config.yaml"
CAP = 1 << 20  # largest shape (elements) compressed as it is
_COMPRESS_DIR = Path(__file__).resolve().parents[1] / "compress"  # cached sizes hold while its sources do

# families whose dense exchange overlaps the backward pass (DDP's buckets; lowbw's fp16/bf16 DDP hooks)
OVERLAP = ("dense", "precision")
# a preset's inner optimiser where it names none: the run config's default
INNER_OPTIMIZER = next(f.default for f in fields(RunConfig) if f.name == "optimizer")


@dataclass(frozen=True)
class Candidate:
    """One method, as the workflow's preset of the same name sets it."""

    name: str  # the preset's name (config/config.yaml methods), also the efficiency table's key
    family: str  # its family (family_of): the efficiency table's fallback grouping and the reasons' words
    compressor: str  # lowbw.compress name; "none" = the dense fp32 gradient
    compressor_args: tuple[tuple[str, Any], ...]  # the preset's compressor_args, sorted
    error_feedback: bool | None  # None: the compressor's own default
    period: int  # H: steps between world exchanges (1: every step)
    fragments: int  # Streaming DiLoCo: parameter fragments, one exchanged every period / fragments steps
    delay: int  # Streaming DiLoCo: steps a fragment's exchange may overlap before it is applied
    households: int  # hierarchical: groups that also average every step among themselves (0: none)
    overlap: bool  # the exchange may hide behind the backward pass
    optimizer: str = INNER_OPTIMIZER  # the inner optimiser updating the parameters every step (config's optimizer)
    outer_step: bool = False  # DiLoCo: an outer optimiser's step of the parameters at every exchange

    @property
    def label(self) -> str:
        """Short words for the table: the compressor and how often."""
        what = {"none": "fp32"}.get(self.compressor, self.compressor)
        args = ",".join(f"{k}={v}" for k, v in self.compressor_args)
        every = f" every {self.period}" if self.period > 1 else ""
        return f"{what}{'(' + args + ')' if args else ''}{every}"


def _compressors() -> dict[str, dict[str, Any]]:
    """Each registered compressor's ``family``, ``whole_method`` and ``value_sized`` (lowbw.compress.registry),
    kept in the payload-size cache while lowbw.compress's sources are unchanged: reading the registry imports
    the compressors and torch, which advice from a warm cache does not need."""
    cache_ = load_cache("parts", _COMPRESS_DIR)
    if "|registry" not in cache_:
        from lowbw.compress.registry import available, entry  # lazy: imports torch (a cache miss only)

        cache_["|registry"] = {n: {"family": e.family, "whole_method": e.whole_method, "value_sized": e.value_sized}
                               for n, e in ((n, entry(n)) for n in available())}
        save_cache("parts", _COMPRESS_DIR, cache_)
    return cache_["|registry"]


def _registered(compressor: str) -> dict[str, Any]:
    """:func:`_compressors`' entry of ``compressor``; a ValueError naming it and the known ones if none."""
    table = _compressors()
    if compressor not in table:
        raise ValueError(f"unknown compressor name={compressor!r}; allowed: {', '.join(sorted(table))}")
    return table[compressor]


def family_of(cfg: dict[str, Any]) -> str:
    """The family of a method preset's (or run's) settings: its compressor's registered family under plain
    synchronous training (``sync: sync``) or where the compressor is a whole method (DeMo, SparseLoCo: also
    inside DiLoCo); else the sync scheme's, as its declaration gives it
    (:func:`lowbw.train.schemes.registry.family_of`: ``local``, ``hierarchical``, ``diloco``, or
    ``streaming`` for DiLoCo in fragments)."""
    comp = _registered(cfg.get("compressor", "none"))
    fam = None if comp["whole_method"] else scheme_family(cfg.get("sync", "sync"), cfg)
    return fam or comp["family"]


def _candidate(name: str, preset: dict[str, Any], family: str) -> Candidate:
    sync = preset.get("sync", "sync")
    ef = {"on": True, "off": False}.get(str(preset.get("error_feedback", "auto")))
    # the period and households of a scheme the advisor models that reads them (its declaration's keys)
    modelled = sync in MODELLED_SYNC
    period = int(preset.get("world_period", 1)) if modelled and reads(sync, "world_period") else 1
    return Candidate(name, family, preset.get("compressor", "none"),
                     tuple(sorted((preset.get("compressor_args") or {}).items())), ef, period,
                     int(preset.get("diloco_fragments", 1) or 1), int(preset.get("diloco_delay", 0) or 0),
                     int(preset.get("households", 0) or 0) if modelled and reads(sync, "households") else 0,
                     family in OVERLAP, preset.get("optimizer", INNER_OPTIMIZER),
                     modelled and reads(sync, "outer_lr"))


# sync schemes whose step the advisor models (lowbw.advise.steptime): those whose declaration says so (advised)
MODELLED_SYNC = advised()


def _family(name: str, cfg: dict[str, Any]) -> str:
    """A candidate preset's family (:func:`candidates`), else one derived from the settings (a method outside
    the candidates): the sync scheme's (its declaration's) where its steps are not world gradient averages; else
    ``dense`` and ``precision`` by the compressor's family, any other compressor (or one no longer registered)
    ``compressed``."""
    known = {c.name: c.family for c in candidates()}
    if name in known:
        return known[name]
    fam = scheme_family(cfg.get("sync", "sync"), cfg)
    if fam:
        return fam
    fam = _compressors().get(cfg.get("compressor", "none"), {}).get("family")
    return fam if fam in ("dense", "precision") else "compressed"


def candidate_from_config(name: str, cfg: dict[str, Any]) -> Candidate | None:
    """The candidate a run's (or preset's) settings describe, named ``name``; None for a sync scheme whose step
    the advisor does not model (:data:`MODELLED_SYNC`) or a per-step choice of compressor (``adaptive``)."""
    if cfg.get("sync", "sync") not in MODELLED_SYNC or str(cfg.get("adaptive") or "off") not in ("off", "none"):
        return None
    return _candidate(name, cfg, _family(name, cfg))


@cache
def candidates(config_file: Path = CONFIG_FILE) -> tuple[Candidate, ...]:
    """Every candidate the config's ``advise: candidates:`` lists, in that order, from the presets in
    ``config_file`` (a candidate without its preset is an error naming it: the advisor and the runs must mean
    the same method), each of its derived family (:func:`family_of`)."""
    import yaml  # lazy only for symmetry with the rest: yaml imports in milliseconds

    cfg = yaml.safe_load(config_file.read_text()) or {}
    presets = cfg.get("methods") or {}
    names = (cfg.get("advise") or {}).get("candidates") or []
    if not names:
        raise ValueError(f"{config_file}: advise: candidates: lists no method preset to rank")
    missing = [n for n in names if n not in presets]
    if missing:
        raise ValueError(f"{config_file}: no method preset for candidate(s) {', '.join(missing)}")
    return tuple(_candidate(n, presets[n], family_of(presets[n])) for n in names)


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
    exact = not _registered(c.compressor)["value_sized"]  # thresholding's count depends on the values
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
    """The calls of a bucketed exchange (:mod:`lowbw.comm.packing`): per bucket (:func:`lowbw.collective.buckets.assign`
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
