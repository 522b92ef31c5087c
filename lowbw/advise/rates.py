"""The advisor's one call site for link rates and delays (``--rate 10mbit``, ``--latency 20ms``): the
project's parser, :mod:`lowbw.net.units`, which refuses bare numbers and byte rates in one line."""

from __future__ import annotations

from lowbw.net.units import parse_delay, parse_rate

__all__ = ["rate_bps", "delay_s"]


def rate_bps(text: str) -> float:
    """``"10mbit"`` -> 1e7 bits/s."""
    return float(parse_rate(text, "rate"))


def delay_s(text: str) -> float:
    """``"20ms"`` -> 0.02 s (one-way latency per message)."""
    return float(parse_delay(text, "latency"))
