"""Run configs from outside: files (YAML/JSON), ``--set key=value`` overrides, the JSON Schema and the
CLI's key list exported from the field table.

* :func:`json_schema` exports the field table's rules as JSON Schema (draft 2020-12) for the workflow's
  config schema; cross-key rules that JSON Schema cannot express are checked by
  :func:`lowbw.workflow.grid.validate_grid`.
"""

from __future__ import annotations

import json
from dataclasses import MISSING, fields
from typing import Any

import yaml

from lowbw.train.config_fields import RunConfig
from lowbw.train.config_rules import ConfigError, json_type

__all__ = ["json_schema", "keys_help", "parse_override", "load_file"]


def json_schema() -> dict[str, Any]:
    """JSON Schema (draft 2020-12) of a run config: types, defaults, enums, ranges, no unknown keys.

    Cross-key rules (divisibility, combinations) are not expressible here;
    :func:`lowbw.workflow.grid.validate_grid` runs them.
    """
    props: dict[str, Any] = {}
    for f in fields(RunConfig):
        m = f.metadata
        kind = json_type(f)
        unit = f" [{m['unit']}]" if m.get("unit") else ""
        p: dict[str, Any] = {"type": kind, "description": m["help"] + unit}
        default = f.default if f.default is not MISSING else f.default_factory()
        p["default"] = default
        if kind == "array":
            p["items"] = {"type": "string" if f.type == "list[str]" else "number"}
        if m.get("enum"):
            p["enum"] = list(m["enum"])
        for key, sk in (("minimum", "minimum"), ("maximum", "maximum"), ("exclusive_minimum", "exclusiveMinimum")):
            if m.get(key) is not None:
                p[sk] = m[key]
        props[f.name] = p
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "lowbw.train RunConfig",
        "type": "object",
        "additionalProperties": False,
        "properties": props,
    }


def keys_help() -> str:
    """Every key with its default and meaning, grouped (the CLI's --help epilog)."""
    lines: list[str] = []
    group = None
    titles = {"run": "run", "data": "data", "optim": "model and optimisation", "sync": "synchronisation",
              "clock": "network and virtual clock", "log": "evaluation and logging"}
    for f in fields(RunConfig):
        m = f.metadata
        if m["group"] != group:
            group = m["group"]
            lines.append(f"\n{titles.get(group, group)}:")
        default = f.default if f.default is not MISSING else f.default_factory()
        extra = f" {{{', '.join(m['enum'])}}}" if m.get("enum") else ""
        extra += f" [{m['unit']}]" if m.get("unit") else ""
        lines.append(f"  {f.name} = {default!r}{extra}\n      {m['help']}")
    return "\n".join(lines)


def parse_override(s: str) -> tuple[str, Any]:
    """``key=value`` with the value parsed as YAML (``lr=0.1``, ``targets=[0.5,0.6]``, ``ddp_hook=true``).

    Raises ConfigError naming the override when it is not ``key=value`` or its value is not valid YAML."""
    if "=" not in s:
        raise ConfigError(s, "override must look like key=value")
    k, v = s.split("=", 1)
    k = k.strip()
    if not k:
        raise ConfigError(s, "override has no key before '=' (use key=value)")
    try:
        val = yaml.safe_load(v) if v.strip() else ""
    except yaml.YAMLError as e:
        where = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise ConfigError(k, f"--set {s}: value {v!r} is not valid YAML ({where}); quote strings, "
                             f"e.g. {k}='{v}'") from None
    return k, val


def load_file(path: str) -> dict[str, Any]:
    """A run config file (YAML or JSON) as a dict. A ``config`` key (as in a run's config.json) is unwrapped.

    Raises ConfigError (one line, naming the file and the line) for syntax errors, an empty file, or a
    file that does not hold a mapping; OSError if it cannot be read."""
    with open(path, encoding="utf-8") as fh:
        text = fh.read()
    if not text.strip() or all(not ln.strip() or ln.lstrip().startswith("#") for ln in text.splitlines()):
        raise ConfigError(str(path), "empty config file: give at least one key (e.g. `workers: 4`), or omit -c "
                                     "for the defaults")
    try:
        if str(path).endswith(".json"):
            d = json.loads(text)
        else:
            d = yaml.safe_load(text)
    except json.JSONDecodeError as e:
        raise ConfigError(str(path), f"not valid JSON at line {e.lineno} column {e.colno}: {e.msg}") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        at = f" at line {mark.line + 1} column {mark.column + 1}" if mark is not None else ""
        what = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise ConfigError(str(path), f"not valid YAML{at}: {what}") from None
    if d is None:
        raise ConfigError(str(path), "empty config file: give at least one key (e.g. `workers: 4`), or omit -c "
                                     "for the defaults")
    if not isinstance(d, dict):
        raise ConfigError(str(path), f"a run config file must hold a mapping of keys, got a {type(d).__name__}")
    if "config" in d and isinstance(d["config"], dict):
        d = d["config"]
    return d
