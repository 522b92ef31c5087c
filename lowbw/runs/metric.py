"""The metric that judges a run, as its workload defines it, and the summary fields that show it.

A classifier (lowbw's image datasets) is judged by test accuracy (``test_acc``, up); a language model
(lowbw's text corpora) by validation loss (``val_loss`` in nats per character, down), shown with its
perplexity exp(loss); a user's dataset file (``dataset: my.py:build``) by the metric its ``build()``
declares (``val_acc`` up or ``val_loss`` down). The train command's console summary, ``store list``,
``compare`` and the report read the same fields through :func:`headline`.
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["run_metric", "headline", "better"]


def run_metric(config: dict[str, Any]) -> tuple[str, str]:
    """(metric, direction) of a run from its config.json content: direction ``"up"`` or ``"down"``."""
    data = config.get("data") or {}
    if data.get("metric"):
        return data["metric"], data.get("direction") or ("down" if data["metric"].endswith("loss") else "up")
    if data.get("kind") == "text":
        return "val_loss", "down"
    if data.get("kind") is None:  # an older config.json: the dataset's name tells
        from lowbw.data.text import TEXT_SPECS  # lazy: text specs are plain data, no torch

        if (config.get("config") or {}).get("dataset") in TEXT_SPECS:
            return "val_loss", "down"
    return "test_acc", "up"


def better(direction: str, a: float, b: float) -> bool:
    """Whether ``a`` is better than ``b`` in ``direction``."""
    return a > b if direction == "up" else a < b


def headline(summary: dict[str, Any], metric: str) -> dict[str, Any]:
    """The summary fields of ``metric``: ``final_<metric>``, ``best_<metric>``, and for a loss the final and
    best perplexity (exp of the loss)."""
    out = {f"final_{metric}": summary.get(f"final_{metric}"), f"best_{metric}": summary.get(f"best_{metric}")}
    if metric.endswith("_loss"):
        split = metric[: -len("_loss")]
        for which in ("final", "best"):
            v = out[f"{which}_{metric}"]
            out[f"{which}_{split}_ppl"] = math.exp(v) if isinstance(v, (int, float)) and v < 700 else None
    return out
