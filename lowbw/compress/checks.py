"""Argument checks of the compressors' constructors: a one-line ``ValueError`` naming the compressor, the
parameter, the bad value and what is allowed, raised before any work."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

__all__ = ["check_choice", "check_int", "check_float", "check_bool"]


def _bad(cls_name: str, param: str, value: Any, allowed: str) -> ValueError:
    return ValueError(f"{cls_name}: invalid parameter {param}={value!r}; allowed: {allowed}")


def check_choice(cls_name: str, param: str, value: Any, allowed: Iterable[Any]) -> Any:
    allowed = tuple(allowed)
    if isinstance(value, bool) and not any(isinstance(a, bool) for a in allowed):
        raise _bad(cls_name, param, value, " | ".join(map(repr, allowed)))
    if value not in allowed:
        raise _bad(cls_name, param, value, " | ".join(map(repr, allowed)))
    return value


def check_int(cls_name: str, param: str, value: Any, lo: int, hi: int | None = None) -> int:
    ok = isinstance(value, int) and not isinstance(value, bool) and value >= lo and (hi is None or value <= hi)
    if not ok:
        rng = f"an integer >= {lo}" if hi is None else f"an integer in [{lo}, {hi}]"
        raise _bad(cls_name, param, value, rng)
    return int(value)


def check_float(
    cls_name: str, param: str, value: Any, lo: float, hi: float | None = None, lo_open: bool = True,
    hi_open: bool = False,
) -> float:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if ok:
        ok = (value > lo if lo_open else value >= lo) and (hi is None or (value < hi if hi_open else value <= hi))
    if not ok:
        left = "(" if lo_open else "["
        right = ("inf)" if hi is None else f"{hi}" + (")" if hi_open else "]"))
        raise _bad(cls_name, param, value, f"a finite number in {left}{lo}, {right}")
    return float(value)


def check_bool(cls_name: str, param: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise _bad(cls_name, param, value, "True | False")
    return value
