"""One validated run configuration for every training run (all backends, all schemes).

Three modules, one job each, behind this one import:

* :mod:`lowbw.train.config_fields`: the field table, :class:`RunConfig` (every key with its default, unit,
  help, allowed values and range; the engine's keys and every sync scheme's declared ones,
  :mod:`lowbw.train.schemes.keys`) and what the sources define by formula (:meth:`RunConfig.derived`: local batch
  size, B/M or the thesis' Appendix A household formula; copies C of every sample; overlap epochs ceil(E/C);
  total samples).
* :mod:`lowbw.train.config_rules`: :meth:`RunConfig.from_dict` rejects unknown keys (with a suggestion),
  wrong types, out-of-range values and impossible combinations *before any work*, always naming the key
  (:class:`ConfigError`.key).
* :mod:`lowbw.train.config_files`: YAML/JSON files, ``--set`` overrides, :func:`json_schema` (draft 2020-12)
  for the workflow's config schema, the CLI's :func:`keys_help`, and :func:`validate_grid`, which checks
  every run of a workflow grid (the cross-key rules JSON Schema cannot express) before any job.
"""

from __future__ import annotations

from lowbw.train.config_fields import ASSIGNMENTS, SYNC_SCHEMES, RunConfig
from lowbw.train.config_files import json_schema, keys_help, load_file, parse_override, validate_grid
from lowbw.train.config_rules import ConfigError

__all__ = ["RunConfig", "ConfigError", "json_schema", "validate_grid", "keys_help", "parse_override", "load_file",
           "SYNC_SCHEMES", "ASSIGNMENTS"]
