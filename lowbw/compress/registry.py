"""The compressor registry: names -> factories, and ``make``/``available`` over it.

A compressor module registers its compressors at import with ``@register(name, ...)`` (or
``register(name, ...)(factory)``); ``lowbw/compress/__init__.py`` imports every compressor module, which is the
one list of them. Any import of this module runs the package's ``__init__`` first, so the registry is complete
whenever ``make``/``available`` can be called. A name is registered once (a second registration raises).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from lowbw.compress.base import Compressor, ErrorFeedback

__all__ = ["Entry", "register", "make", "available"]


@dataclass(frozen=True)
class Entry:
    factory: Callable[..., Compressor]
    error_feedback: bool  # whether make(name) wraps the compressor in ErrorFeedback by default
    configurable_ef: bool  # whether make(name, error_feedback=...) may change that
    doc: str


_REGISTRY: dict[str, Entry] = {}


def register(
    name: str, *, error_feedback: bool = False, configurable_ef: bool = True, doc: str = ""
) -> Callable[[Callable[..., Compressor]], Callable[..., Compressor]]:
    """Register a factory under ``name``. ``error_feedback``: whether ``make(name)`` wraps it in
    :class:`ErrorFeedback` by default; ``configurable_ef``: whether ``make(name, error_feedback=...)`` may
    change that (False for methods whose memory is part of their definition, e.g. ``ef_signsgd``)."""

    def deco(factory: Callable[..., Compressor]) -> Callable[..., Compressor]:
        if name in _REGISTRY:
            raise ValueError(f"compressor {name!r} registered twice")
        _REGISTRY[name] = Entry(factory, error_feedback, configurable_ef, doc)
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
