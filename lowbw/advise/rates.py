"""The advisor's one call site for link rates and delays (``--rate 10mbit``, ``--latency 20ms``).

The project's public parser is ``lowbw.net.units`` (``parse_rate``/``parse_delay``) where it exists; until it
lands this module defers to :mod:`lowbw.net.costmodel`'s parsers and only adds what the advisor must refuse
there (a bare number, and ``mbps``-style byte rates, which tc reads as bytes/s and users as bits/s).
"""

from __future__ import annotations

import re

__all__ = ["rate_bps", "delay_s"]

_UNIT = re.compile(r"\s*[0-9]*\.?[0-9]+(?:e[+-]?\d+)?\s*([a-zA-Z]*)\s*")


def rate_bps(text: str) -> float:
    """``"10mbit"`` -> 1e7 bits/s; a one-line ValueError naming ``text`` if it has no bit-rate unit."""
    try:
        from lowbw.net.units import parse_rate  # the project's parser, once it exists
    except ImportError:
        from lowbw.net.costmodel import parse_rate
        m = _UNIT.fullmatch(str(text))
        if not m or not m.group(1).lower().endswith("bit"):
            raise ValueError(f"bad rate {text!r}: give a unit, e.g. 10mbit, 1gbit, 500kbit") from None
    return float(parse_rate(text))


def delay_s(text: str) -> float:
    """``"20ms"`` -> 0.02 s (one-way latency per message); a one-line ValueError naming ``text`` if bad."""
    try:
        from lowbw.net.units import parse_delay
    except ImportError:
        from lowbw.net.costmodel import parse_time as parse_delay
        m = _UNIT.fullmatch(str(text))
        if not m or not m.group(1):
            raise ValueError(f"bad latency {text!r}: give a unit, e.g. 20ms, 500us, 0.1s") from None
    v = float(parse_delay(text))
    if v < 0:
        raise ValueError(f"bad latency {text!r}: must be >= 0")
    return v
