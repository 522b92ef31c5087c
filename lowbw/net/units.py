"""The one reader of link rates and delays: testbed flags, run configs, traces, workflow configs, ``advise``.

    parse_rate("10mbit")    -> 10_000_000.0   (bits per second)
    parse_delay("20ms")     -> 0.02           (seconds)

A rate or a delay written as text must carry an explicit, unambiguous unit, because tc (and people) read the
same letters differently: tc reads ``mbps`` as *megabytes* per second (``10mbps`` = 80 Mbit/s), and a bare
``10`` as 10 bit/s (a rate) or 10 microseconds (a delay). Accepted spellings (bit and time units
case-insensitive, a space between number and unit allowed):

* rates in bits per second: ``bit``, ``kbit``, ``mbit``, ``gbit``, ``tbit``, each also with ``/s``
  (``100mbit``, ``1gbit``, ``500kbit``, ``10 Mbit/s``; k = 1000 as in tc);
* rates in bytes per second, spelled out with a capital B and ``/s``: ``B/s``, ``kB/s`` (or ``KB/s``),
  ``MB/s``, ``GB/s``, ``TB/s`` (``10MB/s`` = 80 Mbit/s);
* delays: ``s``, ``sec``, ``ms``, ``msec``, ``us``, ``usec``, ``ns`` (``20ms``, ``500us``, ``0.2s``); a
  bare ``0`` is accepted (no delay).

Refused, each with one line saying how tc would read it and what to write instead: ``bps``/``kbps``/
``mbps``/``Mbps``/``MBps``/``gbps``... (tc: bytes per second), ``Mb/s``/``mb/s``/``Kb/s`` (bits or bytes?),
a bare number (tc: bit/s for a rate, microseconds for a delay), unknown units, rates <= 0, negative
delays. A Python ``int``/``float`` (not text) passed to the API is already in base units: bits per second
for a rate, seconds for a delay. Points in time of a run (``--schedule 0:100mbit,10:10mbit``, ``--fail
1@30``) are not delays: :func:`parse_seconds` reads a bare number there as seconds.

Run-config and workflow-config keys carry their unit in their name (``bandwidth_mbit: 10``,
``latency_ms: 0.5``) and stay numbers: :func:`keyed_number` accepts a number (or a numeric string, which
YAML 1.1 produces for ``1e-3``), and a string with a unit only when it is the key's own (``"10mbit"`` for a
``_mbit`` key); a unit that contradicts the key's, or an ambiguous one, is refused naming the number to
write. :func:`check_config_tree` applies that to every such key of a nested config (a workflow config).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from typing import Any

__all__ = ["parse_rate", "rate_mbit_arg", "parse_delay", "parse_seconds", "format_rate", "keyed_number", "key_unit",
           "check_config_tree", "RATE_UNITS", "DELAY_UNITS"]

#: bit rates (bits/s per unit), matched case-insensitively, with or without "/s"
_BIT_UNITS = {"bit": 1.0, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9, "tbit": 1e12}
#: byte rates (bits/s per unit), matched exactly: the capital B says bytes
_BYTE_UNITS = {"B/s": 8.0, "kB/s": 8e3, "KB/s": 8e3, "MB/s": 8e6, "GB/s": 8e9, "TB/s": 8e12}
#: what tc reads as bytes per second (it compares units case-insensitively): refused as ambiguous
_TC_BYTE_UNITS = {"bps": 8.0, "kbps": 8e3, "mbps": 8e6, "gbps": 8e9, "tbps": 8e12}
#: the bit unit someone writing ``<prefix>bps`` or ``<prefix>b/s`` most likely meant
_MEANT = {"": "bit", "k": "kbit", "m": "mbit", "g": "gbit", "t": "tbit"}
DELAY_UNITS = {"s": 1.0, "sec": 1.0, "secs": 1.0, "ms": 1e-3, "msec": 1e-3, "msecs": 1e-3, "us": 1e-6,
               "usec": 1e-6, "usecs": 1e-6, "ns": 1e-9}
RATE_UNITS = {**_BIT_UNITS, **{f"{u}/s": v for u, v in _BIT_UNITS.items()}, **_BYTE_UNITS}

_NUMBER = r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?"
_SPLIT = re.compile(rf"\s*({_NUMBER})\s*([A-Za-z/]*)\s*")
RATE_EXAMPLES = "e.g. 100mbit, 1gbit, 500kbit, 10MB/s"
DELAY_EXAMPLES = "e.g. 20ms, 500us, 0.2s"


def _num(v: float) -> str:
    return f"{v:g}"


def format_rate(bps: float) -> str:
    """``8e7`` -> ``"80 Mbit/s"`` (for messages)."""
    for unit, scale in (("Tbit/s", 1e12), ("Gbit/s", 1e9), ("Mbit/s", 1e6), ("kbit/s", 1e3)):
        if bps >= scale:
            return f"{bps / scale:.4g} {unit}"
    return f"{bps:.4g} bit/s"


def _split(text: str) -> tuple[float, str] | None:
    m = _SPLIT.fullmatch(text)
    if not m:
        return None
    return float(m.group(1)), m.group(2)


def _label(what: str, text: Any) -> str:
    return f"{what} {str(text)!r}"


def parse_rate(text: str | float | int, what: str = "rate") -> float:
    """A link rate in bits per second from text with an explicit unit (see the module docstring for the
    spellings); an ``int``/``float`` is taken as bits per second already. ``what`` names the value in the
    one-line ValueError (``"--rate"``, ``"bandwidth"``, ...)."""
    if isinstance(text, bool):
        raise ValueError(f"{_label(what, text)} is not a rate: write {RATE_EXAMPLES}")
    if isinstance(text, int | float):
        if not (math.isfinite(text) and text > 0):
            raise ValueError(f"{what} {text!r} must be a rate > 0 bits/s")
        return float(text)
    s = str(text)
    parts = _split(s)
    if parts is None:
        raise ValueError(f"{_label(what, s)} is not a rate: write {RATE_EXAMPLES}")
    v, unit = parts
    lo = unit.lower()
    if not v > 0:
        raise ValueError(f"{_label(what, s)} must be a rate > 0 (with its unit: {RATE_EXAMPLES})")
    if unit == "":
        raise ValueError(f"{_label(what, s)} has no unit: tc would read it as {_num(v)} bit/s; "
                         f"write {_num(v)}mbit for {_num(v)} Mbit/s (or kbit, gbit)")
    if lo in _TC_BYTE_UNITS:
        meant = _MEANT[lo[:-3]]
        raise ValueError(f"{_label(what, s)} is ambiguous: tc reads {unit!r} as bytes per second "
                         f"({format_rate(v * _TC_BYTE_UNITS[lo])}); write {_num(v)}{meant} for "
                         f"{format_rate(v * _BIT_UNITS[meant])}, or {_num(v)}{lo[:-3].upper()}B/s if you mean bytes")
    if lo.endswith("b/s") and lo[:-3] in _MEANT and unit not in _BYTE_UNITS:
        meant = _MEANT[lo[:-3]]
        raise ValueError(f"{_label(what, s)} is ambiguous (bits or bytes?): write {_num(v)}{meant} for "
                         f"{format_rate(v * _BIT_UNITS[meant])}, or {_num(v)}{lo[:-3].upper()}B/s if you mean bytes")
    if unit in _BYTE_UNITS:
        scale = _BYTE_UNITS[unit]
    elif lo in _BIT_UNITS or (lo.endswith("/s") and lo[:-2] in _BIT_UNITS):
        scale = _BIT_UNITS[lo.removesuffix("/s")]
    elif lo in DELAY_UNITS:
        raise ValueError(f"{_label(what, s)} is a time, not a rate: write {RATE_EXAMPLES}")
    else:
        raise ValueError(f"{_label(what, s)}: unknown rate unit {unit!r}; write {RATE_EXAMPLES}")
    bps = v * scale
    if not (math.isfinite(bps) and bps > 0):
        raise ValueError(f"{_label(what, s)} must be a rate > 0")
    return bps


def rate_mbit_arg(flag: str):
    """An argparse ``type`` for a command-line rate flag (``--rate``, ``--rates``): text with its unit, read by
    :func:`parse_rate` (``10mbit``, ``1gbit``), returned in Mbit/s; a bare number or an ambiguous unit
    (``100mbps``) is refused with parse_rate's one line naming ``flag``. Every command's rate flags use it,
    so they all read the same forms."""
    import argparse  # lazy: only command lines need it

    def parse(text: str) -> float:
        try:
            return parse_rate(text, flag) / 1e6
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None

    parse.__name__ = "rate"  # argparse names the type in its messages
    return parse


def parse_delay(text: str | float | int | None, what: str = "delay") -> float:
    """A delay (or another duration of a link: jitter, queue) in seconds from text with an explicit unit
    (``20ms``, ``500us``, ``0.2s``; a bare ``0`` is no delay); an ``int``/``float`` is seconds already;
    None is 0. ``what`` names the value in the one-line ValueError."""
    if text is None:
        return 0.0
    if isinstance(text, bool):
        raise ValueError(f"{_label(what, text)} is not a delay: write {DELAY_EXAMPLES}")
    if isinstance(text, int | float):
        if not (math.isfinite(text) and text >= 0):
            raise ValueError(f"{what} {text!r} must be >= 0 seconds")
        return float(text)
    s = str(text)
    parts = _split(s)
    if parts is None:
        raise ValueError(f"{_label(what, s)} is not a delay: write {DELAY_EXAMPLES}")
    v, unit = parts
    lo = unit.lower()
    if unit == "":
        if v == 0:
            return 0.0
        us = "microsecond" if v == 1 else "microseconds"
        raise ValueError(f"{_label(what, s)} has no unit: tc would read it as {_num(v)} {us}; "
                         f"write {_num(v)}ms, {_num(v)}us or {_num(v)}s")
    if lo not in DELAY_UNITS:
        kind = "is a rate, not a delay" if (lo in _BIT_UNITS or lo in _TC_BYTE_UNITS or unit in _BYTE_UNITS
                                            or lo.endswith("/s")) else f"has an unknown delay unit {unit!r}"
        raise ValueError(f"{_label(what, s)} {kind}: write {DELAY_EXAMPLES}")
    sec = v * DELAY_UNITS[lo]
    if not (math.isfinite(sec) and sec >= 0):
        raise ValueError(f"{_label(what, s)} must be >= 0")
    return sec


def parse_seconds(text: str | float | int, what: str = "time") -> float:
    """A point in time or a duration of a run (schedule times, ``--fail 1@30``): a bare number is seconds
    (as those flags document), else a delay unit (``500ms``). Not for link delays: use :func:`parse_delay`."""
    parts = _split(text) if isinstance(text, str) else None
    if parts is not None and parts[1] == "":
        if not (math.isfinite(parts[0]) and parts[0] >= 0):
            raise ValueError(f"{_label(what, text)} must be >= 0 seconds")
        return parts[0]
    return parse_delay(text, what)


# ------------------------------------------------------------------------------------- keys with units
#: a config key's unit from its name's suffix: (kind, the unit's spelling, its size in base units)
_KEY_UNITS = {"_mbit": ("rate", "mbit", 1e6, "Mbit/s"), "_ms": ("delay", "ms", 1e-3, "ms")}


def key_unit(key: str) -> tuple[str, str, float, str] | None:
    """``(kind, unit, base units per unit, readable unit)`` of a config key whose name ends in its unit
    (``bandwidth_mbit``, ``rates_mbit``, ``latency_ms``, ``delay_ms``), or None."""
    for suffix, unit in _KEY_UNITS.items():
        if key.endswith(suffix) or key == suffix[1:]:
            return unit
    return None


def keyed_number(key: str, value: Any, what: str | None = None) -> Any:
    """The number a config key with its unit in its name (``bandwidth_mbit``, ``latency_ms``) holds: a
    number, a numeric string, or a string in the key's own unit (``"10mbit"``, ``"0.5ms"``). A string with
    another unit (``"1gbit"``, ``"5ms"`` for a rate) or an ambiguous one (``"10mbps"``) is refused with a
    one-line ValueError naming the number to write. ``what`` starts the message (default ``"KEY:"``, and
    the fix reads ``write KEY: N``; give e.g. ``"trace line 3: mbit"`` to get ``write N``). Values other
    than strings are returned as they are (the caller checks their type)."""
    unit = key_unit(key)
    if unit is None or not isinstance(value, str):
        return value
    kind, spelling, size, readable = unit
    label = f"{key}:" if what is None else what
    parts = _split(value)
    if parts is None:
        return value  # not a number at all: the caller says so
    if parts[1] == "":
        return parts[0]  # "10", "1e-3": the unit is the key's (YAML 1.1 reads 1e-3 as a string)
    fix = f"{key}: " if what is None else ""
    lo = parts[1].lower()
    if kind == "rate" and (
            lo in _TC_BYTE_UNITS or (lo.endswith("b/s") and lo[:-3] in _MEANT and parts[1] not in _BYTE_UNITS)):
        bits = parts[0] * _BIT_UNITS[_MEANT[lo[:-3]]]
        how = f"tc reads {parts[1]!r} as bytes per second" if lo in _TC_BYTE_UNITS else "bits or bytes?"
        as_bytes = f"{_num(parts[0])} {lo[:-3].upper()}B/s"
        raise ValueError(f"{_label(label, value)} is ambiguous ({how}): write {fix}{_num(bits / size)} for "
                         f"{format_rate(bits)}, or {fix}{_num(8 * bits / size)} for {as_bytes}")
    base = parse_rate(value, label) if kind == "rate" else parse_delay(value, label)
    if lo.removesuffix("/s") == spelling:
        return parts[0]
    fix += _num(base / size)
    raise ValueError(f"{_label(label, value)} is not in the unit of {key} ({readable}): write {fix}")


def _walk(obj: Any, path: str) -> Iterator[tuple[str, str, Any]]:
    if isinstance(obj, dict):
        for k, v in obj.items():
            p = f"{path}.{k}" if path else str(k)
            if isinstance(k, str) and key_unit(k) is not None:
                for x in (v if isinstance(v, list | tuple) else [v]):
                    yield p, k, x
            yield from _walk(v, p)
    elif isinstance(obj, list | tuple):
        for i, v in enumerate(obj):
            yield from _walk(v, f"{path}[{i}]")


def check_config_tree(config: Any) -> None:
    """Every value of a key with its unit in its name (``*_mbit``, ``*_ms``) anywhere in a nested config (a
    workflow config: bench options, run keys in ``base``/``grid``/``methods``) checked by
    :func:`keyed_number`; the first bad one is a one-line ValueError naming its path."""
    for path, key, value in _walk(config, ""):
        try:
            keyed_number(key, value)
        except ValueError as e:
            raise ValueError(f"{path.removesuffix(key)}{e}") from None
