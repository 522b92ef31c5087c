"""One key of a run configuration, as the module that owns it declares it, and the error that names a bad one.

A key is a dataclass field whose metadata says what the CLI's help, the workflow's JSON Schema and the range
check read: ``help`` (its meaning), ``unit`` (of its value: ``steps``, ``s``, ``ms``, ``Mbit/s``, ...; "" for
a count or a name), ``enum`` (the allowed values), ``minimum`` / ``maximum`` / ``exclusive_minimum`` (its
range) and ``group`` (its section of the help). The engine's keys are declared in
:mod:`lowbw.train.config_fields`; a sync scheme declares its own in its keys module
(:mod:`lowbw.train.schemes.keys`), and :class:`~lowbw.train.config_fields.RunConfig` is assembled from both.

Torch-free: the workflow's planning and ``lowbw --help`` read the keys without torch.
"""

from __future__ import annotations

from dataclasses import field
from typing import Any

__all__ = ["ConfigError", "key"]


class ConfigError(ValueError):
    """An invalid run configuration; ``key`` names the offending key."""

    def __init__(self, key: str, message: str):
        super().__init__(f"{key}: {message}")
        self.key = key


def key(default: Any, help: str, *, unit: str = "", enum: list[str] | None = None, minimum: float | None = None,
        maximum: float | None = None, exclusive_minimum: float | None = None, group: str = "") -> Any:
    """A dataclass field for a config key with ``default`` and the metadata of the module docstring (lists and
    dicts get a fresh copy per config)."""
    meta = {"help": help, "unit": unit, "enum": enum, "minimum": minimum, "maximum": maximum,
            "exclusive_minimum": exclusive_minimum, "group": group}
    if isinstance(default, list | dict):
        return field(default_factory=lambda d=default: type(d)(d), metadata=meta)
    return field(default=default, metadata=meta)
