"""The System section's engineering numbers: one-off checks made while building the testbed and the
collectives, kept with their setting and commit in ``paper/measured/system.json`` (not re-measured by the
workflow). The report writes each as a ``\\Sys...`` macro of ``numbers.tex``, so the section types none of them
and a corrected record changes the paper."""

from __future__ import annotations

import json
import re
from pathlib import Path

from lowbw.report.catalog import SYSTEM

__all__ = ["SYSTEM_RECORD", "numbers"]

# the source tree's record, wherever the report runs from
SYSTEM_RECORD = Path(__file__).resolve().parents[2] / "paper" / "measured" / "system.json"
_NUMBER = re.compile(r"-?\d+(\.\d+)?")


def _fmt(value, name: str) -> str:
    """A recorded value as the prose prints it: its digits as recorded, a [low, high] range as ``low--high``."""
    parts = value if isinstance(value, list) else [value]
    if not 1 <= len(parts) <= 2 or not all(isinstance(p, str) and _NUMBER.fullmatch(p) for p in parts):
        raise ValueError(f"{SYSTEM_RECORD}: {name} must be a number string or a [low, high] pair, not {value!r}")
    return "--".join(parts)


def numbers(path: Path = SYSTEM_RECORD) -> dict[str, str]:
    """Every macro of ``lowbw.report.catalog.SYSTEM`` from the record; a missing or extra name is an error."""
    checks = json.loads(Path(path).read_text(encoding="utf-8"))["checks"]
    out: dict[str, str] = {}
    for check in checks:
        if not check.get("commit") or not check.get("what"):
            raise ValueError(f"{path}: every check names what it measured and the commit: {check}")
        for name, value in check["values"].items():
            if name in out:
                raise ValueError(f"{path}: {name} is recorded twice")
            out[name] = _fmt(value, name)
    if set(out) != set(SYSTEM):
        raise ValueError(f"{path} and lowbw.report.catalog.SYSTEM differ: record only "
                         f"{sorted(set(out) - set(SYSTEM))}, "
                         f"catalogue only {sorted(set(SYSTEM) - set(out))}")
    return out
