"""Targets of time-to-target: a metric of an evaluation, a direction and a value.

Written in a config as a number (a test accuracy to reach: ``0.9`` means ``test_acc>=0.9``) or as a string
``"<metric><op><value>"`` with ``op`` one of ``>=`` (accuracies: higher is better) or ``<=`` (losses,
perplexities: lower is better), e.g. ``"val_loss<=1.9"``. A target's ``name`` keys ``time_to_target`` in
``summary.json``: the number itself for an accuracy written as a number (``"0.9"``), else the canonical
string.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

__all__ = ["Target", "parse_target", "parse_targets", "TargetError", "METRICS"]

# evaluation metrics a target may name, with the direction that is better
METRICS = {"test_acc": ">=", "val_acc": ">=", "test_loss": "<=", "val_loss": "<=", "val_ppl": "<=",
           "test_ppl": "<="}
_FORM = re.compile(r"^\s*([a-z_][a-z0-9_]*)\s*(>=|<=)\s*([0-9.eE+-]+)\s*$")


class TargetError(ValueError):
    """A target that cannot be read; the message names it and says what to write."""


@dataclass(frozen=True)
class Target:
    metric: str  # key of an evaluation, e.g. "test_acc", "val_loss"
    op: str  # ">=": reached when metric >= value; "<=": when metric <= value
    value: float  # the threshold, in the metric's unit (fraction, nats per character)
    plain: bool = False  # written as a bare accuracy (its name is then the number, as before)

    @property
    def name(self) -> str:
        return f"{self.value:g}" if self.plain else f"{self.metric}{self.op}{self.value:g}"

    def reached(self, ev: dict[str, Any]) -> bool:
        v = ev.get(self.metric)
        if v is None:
            return False
        return v >= self.value if self.op == ">=" else v <= self.value

    def better(self, a: float, b: float) -> bool:
        """Is ``a`` better than ``b`` for this target's metric."""
        return a > b if self.op == ">=" else a < b


def parse_target(t: Any) -> Target:
    """A target from a config value (see the module docstring)."""
    if isinstance(t, int | float) and not isinstance(t, bool):
        if not 0 < t <= 1:
            raise TargetError(f"{t}: a bare number is a test accuracy in (0, 1]; for a loss write "
                              f"\"val_loss<={t}\"")
        return Target("test_acc", ">=", float(t), plain=True)
    m = _FORM.match(str(t))
    if not m:
        raise TargetError(f"{t!r}: write a test accuracy (0.9) or \"<metric><=|>=<value>\" "
                          f"(e.g. \"val_loss<=1.9\")")
    metric, op, value = m.group(1), m.group(2), m.group(3)
    if metric not in METRICS:
        raise TargetError(f"{t!r}: metric {metric!r} is unknown; allowed: {', '.join(METRICS)}")
    if op != METRICS[metric]:
        raise TargetError(f"{t!r}: {metric} is better {'higher' if METRICS[metric] == '>=' else 'lower'}, so "
                          f"its target is {metric}{METRICS[metric]}{value}")
    try:
        v = float(value)
    except ValueError:
        raise TargetError(f"{t!r}: {value!r} is not a number") from None
    if metric.endswith("acc") and not 0 < v <= 1:
        raise TargetError(f"{t!r}: an accuracy lies in (0, 1]")
    if v <= 0:
        raise TargetError(f"{t!r}: the value must be > 0")
    return Target(metric, op, v)


def parse_targets(ts) -> list[Target]:
    return [parse_target(t) for t in ts or []]
