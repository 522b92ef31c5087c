"""The compressor registry: names -> factories, and ``make``/``available`` over it.

A compressor module registers its compressors at import with ``@register(name, ...)`` (or
``register(name, ...)(factory)``); ``lowbw/compress/__init__.py`` imports every compressor module, which is the
one list of them, in its order. Any import of this module runs the package's ``__init__`` first, so the registry
is complete whenever ``make``/``available`` can be called. A name is registered once (a second registration
raises).

Besides the factory, a registration says what the rest of lowbw needs to know about the method, so that nothing
else names it: its ``family`` (the advisor's and the efficiency table's word for it), whether it is a whole
training method (``whole_method``), whether its payload's size depends on the values (``value_sized``) and the
settings the compressor benchmark measures it at (``bench``; :func:`bench_settings`, E2's rows in this order) and
whether ``adaptive: moo`` may choose its top-k density (``adaptive_density``).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from lowbw.compress.base import Compressor, ErrorFeedback

__all__ = ["Entry", "FAMILIES", "register", "make", "available", "entry", "bench_settings"]

# the families a compressor belongs to (the advisor's reasons and the efficiency table's fallback grouping);
# "dense" is the uncompressed fp32 gradient, "precision" a cast to a narrower float
FAMILIES = ("dense", "precision", "quantize", "sparsify", "lowrank", "sign", "demo", "sparseloco")


@dataclass(frozen=True)
class Entry:
    factory: Callable[..., Compressor]
    error_feedback: bool  # whether make(name) wraps the compressor in ErrorFeedback by default
    configurable_ef: bool  # whether make(name, error_feedback=...) may change that
    doc: str
    family: str = ""  # one of FAMILIES
    whole_method: bool = False  # a training method of its own (DeMo, SparseLoCo): its family names any run it is in
    value_sized: bool = False  # its payload's size depends on the values, not only on the shape (thresholding)
    bench: tuple[dict[str, Any], ...] = ()  # the settings the compressor benchmark (E2) measures, in its row order
    adaptive_density: bool = False  # adaptive: moo may choose its top-k density (lowbw.train.adaptive.ChosenTopK)


_REGISTRY: dict[str, Entry] = {}


def register(
    name: str, *, family: str, error_feedback: bool = False, configurable_ef: bool = True, doc: str = "",
    whole_method: bool = False, value_sized: bool = False, bench: tuple[dict[str, Any], ...] = (),
    adaptive_density: bool = False
) -> Callable[[Callable[..., Compressor]], Callable[..., Compressor]]:
    """Register a factory under ``name``. ``error_feedback``: whether ``make(name)`` wraps it in
    :class:`ErrorFeedback` by default; ``configurable_ef``: whether ``make(name, error_feedback=...)`` may
    change that (False for methods whose memory is part of their definition, e.g. ``ef_signsgd``); the other
    keywords: :class:`Entry`'s fields (``family`` one of :data:`FAMILIES`)."""
    if family not in FAMILIES:
        raise ValueError(f"compressor {name!r}: family={family!r} is not known; allowed: {', '.join(FAMILIES)}")

    def deco(factory: Callable[..., Compressor]) -> Callable[..., Compressor]:
        if name in _REGISTRY:
            raise ValueError(f"compressor {name!r} registered twice")
        _REGISTRY[name] = Entry(factory, error_feedback, configurable_ef, doc, family, whole_method, value_sized,
                                tuple(dict(b) for b in bench), adaptive_density)
        return factory

    return deco


def available() -> list[str]:
    """Names accepted by :func:`make`, sorted."""
    return sorted(_REGISTRY)


def make(name: str, **params: Any) -> Compressor:
    """A compressor by name. ``error_feedback=True/False`` overrides the method's default where allowed.

    Unknown names and bad parameters raise ``ValueError`` naming the parameter, the value and what is allowed.
    """
    entry = _REGISTRY.get(name)
    if entry is None:
        raise ValueError(f"unknown compressor name={name!r}; allowed: {', '.join(sorted(_REGISTRY))}")
    accepted = [p for p in inspect.signature(entry.factory).parameters if p != "self"]
    ef = entry.error_feedback
    if "error_feedback" in params and "error_feedback" not in accepted:
        v = params.pop("error_feedback")
        if not isinstance(v, bool):
            raise ValueError(f"{name}: invalid parameter error_feedback={v!r}; allowed: True | False")
        if not entry.configurable_ef and v != ef:
            raise ValueError(
                f"{name}: invalid parameter error_feedback={v!r}; allowed: {ef!r} (part of the method's definition)"
            )
        ef = v
    for k in params:
        if k not in accepted:
            extra = ["error_feedback"] if entry.configurable_ef and "error_feedback" not in accepted else []
            allowed = ", ".join(accepted + extra)
            raise ValueError(f"{name}: unknown parameter {k!r}={params[k]!r}; allowed parameters: {allowed or 'none'}")
    comp = entry.factory(**params)
    return ErrorFeedback(comp) if ef else comp


def entry(name: str) -> Entry:
    """The registration of compressor ``name``; a ValueError naming it and the known ones if there is none."""
    e = _REGISTRY.get(name)
    if e is None:
        raise ValueError(f"unknown compressor name={name!r}; allowed: {', '.join(sorted(_REGISTRY))}")
    return e


def bench_settings() -> list[tuple[str, dict[str, Any]]]:
    """(compressor name, params) of every setting the compressor benchmark measures: each registration's
    ``bench``, in the registry's order (``lowbw/compress/__init__.py``'s import line, then each module's)."""
    return [(name, dict(b)) for name, e in _REGISTRY.items() for b in e.bench]
