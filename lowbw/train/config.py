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
  for the workflow's config schema and the CLI's :func:`keys_help`; the check of a workflow's whole grid
  before any job is :func:`lowbw.workflow.grid.validate_grid`.
"""

from __future__ import annotations

from lowbw.train.config_fields import ASSIGNMENTS, SYNC_SCHEMES, RunConfig
from lowbw.train.config_files import json_schema, keys_help, load_file, parse_override
from lowbw.train.config_rules import ConfigError

__all__ = ["RunConfig", "ConfigError", "json_schema", "keys_help", "parse_override", "load_file",
           "SYNC_SCHEMES", "ASSIGNMENTS"]
