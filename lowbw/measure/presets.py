"""The workflow config's method presets (``config/config.yaml``'s ``methods`` block: a name -> run-config keys)
as the benchmarks name them on their command lines (``NAME`` or ``NAME+ddp``)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

__all__ = ["load_methods", "method_config"]


def load_methods(path: str | os.PathLike = "config/config.yaml") -> dict[str, dict[str, Any]]:
    """The ``methods`` block of the workflow config at ``path`` (the checkout's ``config/config.yaml`` where
    ``path`` does not exist)."""
    import yaml

    p = Path(path)
    if not p.exists():
        p = Path(__file__).resolve().parents[2] / "config" / "config.yaml"
    return dict(yaml.safe_load(p.read_text())["methods"])


def method_config(name: str, methods: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The run-config keys of a method preset; ``NAME+ddp`` adds ``ddp_hook: true``."""
    base, _, suffix = name.partition("+")
    if base not in methods:
        raise ValueError(f"--methods: {base!r} is not a preset of config/config.yaml (known: "
                         f"{', '.join(sorted(methods))})")
    if suffix not in ("", "ddp"):
        raise ValueError(f"--methods: {name!r}: the only suffix is +ddp")
    out = dict(methods[base])
    if suffix == "ddp":
        out["ddp_hook"] = True
    return out
