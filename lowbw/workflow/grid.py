"""The experiment grid: expand config blocks into runs, and spell each run's parameters as its path.

A run directory is ``runs/<experiment>/<key>~<value>/.../seed~<s>`` (Snakemake's Paramspace convention):
keys in the order the grid lists them, seed last, so the path alone says what the run is. :func:`validate_grid`
checks every run's config before any job.
"""

from __future__ import annotations

import itertools
import re
from typing import Any

import yaml

from lowbw.train.clock_table import calibrated_clock
from lowbw.train.config import ConfigError, RunConfig

__all__ = ["expand", "encode", "decode", "run_config", "run_dirs", "validate_grid"]

_SAFE = re.compile(r"^[A-Za-z0-9_.+\-]+$")


def _fmt(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    s = str(v)
    if not _SAFE.match(s):
        raise ValueError(f"grid value {v!r} cannot be spelled in a path (allowed characters: A-Z a-z 0-9 _ . + -)")
    return s


def encode(params: dict[str, Any]) -> str:
    """``{"compressor": "topk", "seed": 0}`` -> ``"compressor~topk/seed~0"`` (insertion order kept)."""
    for k in params:
        if not _SAFE.match(k) or "~" in k:
            raise ValueError(f"grid key {k!r} cannot be spelled in a path")
    return "/".join(f"{k}~{_fmt(v)}" for k, v in params.items())


def decode(path: str) -> dict[str, Any]:
    """Inverse of ``encode``; values are parsed as YAML scalars (``10`` -> 10, ``true`` -> True)."""
    out: dict[str, Any] = {}
    for part in path.strip("/").split("/"):
        if "~" not in part:
            raise ValueError(f"path component {part!r} is not of the form key~value")
        k, v = part.split("~", 1)
        out[k] = yaml.safe_load(v)
    return out


def expand(experiment: dict[str, Any], seeds: list[int]) -> list[dict[str, Any]]:
    """All grid points of one experiment block (``base``, ``grid``, optional ``seeds``), seed last."""
    grid = dict(experiment.get("grid") or {})
    seeds = list(experiment.get("seeds") or seeds)
    keys = list(grid)
    runs = []
    for values in itertools.product(*(grid[k] for k in keys)):
        for s in seeds:
            runs.append({**dict(zip(keys, values)), "seed": s})
    return runs


def run_config(config: dict[str, Any], experiment: str, params: dict[str, Any]) -> dict[str, Any]:
    """The flat RunConfig dict for one run: train_defaults < experiment base < grid point < experiment fixed.

    A grid axis ``method`` names a preset in the config's ``methods`` block (e.g. ``topk1: {compressor: topk,
    compressor_args: {ratio: 0.01}}``), so that runs with nested settings still get a short path; the
    preset's keys are applied where the axis stands, and ``method`` itself is kept as the run's ``name``. An
    experiment's ``fixed`` keys hold for all its runs whatever a preset says (e.g. a workload's learning rate,
    which the presets written for another workload also set).
    With ``clock: model`` and a top-level ``clock_calibration`` file, the clock's compute and compression
    costs come from that file (:func:`lowbw.train.clock_table.calibrated_clock`).
    """
    if experiment not in config["experiments"]:
        raise ValueError(f"experiment={experiment!r} is not in the config; have: {sorted(config['experiments'])}")
    exp = config["experiments"][experiment]
    out = {**(config.get("train_defaults") or {}), **exp["base"]}
    for k, v in params.items():
        if k == "method":
            presets = config.get("methods") or {}
            if v not in presets:
                raise ValueError(f"method={v!r} (experiment {experiment}) is not in the config's methods: "
                                 f"{sorted(presets)}")
            out.update(presets[v])
            out["name"] = v
        else:
            out[k] = v
    out.update(exp.get("fixed") or {})
    if out.get("clock") == "model" and config.get("clock_calibration"):
        out.update(calibrated_clock(config["clock_calibration"], out, f"{experiment}/{encode(params)}"))
    return out


def run_dirs(config: dict[str, Any], root: str = "runs") -> list[str]:
    """Every training run directory of the config, in a stable order."""
    out = []
    for name, exp in config["experiments"].items():
        for p in expand(exp, config["seeds"]):
            out.append(f"{root}/{name}/{encode(p)}")
    return out


def validate_grid(config: dict[str, Any]) -> int:
    """Check every training run of a workflow config (``experiments`` x ``grid`` x ``seeds``) before any job.

    Raises ConfigError naming the experiment, the run and the key. Returns the number of runs checked.
    """
    n = 0
    for name, exp in (config.get("experiments") or {}).items():
        for params in expand(exp, config.get("seeds") or [0]):
            d = run_config(config, name, params)
            try:
                RunConfig.from_dict(d)
            except ConfigError as e:
                raise ConfigError(e.key, f"experiment {name} run {encode(params)}: {e}") from e
            n += 1
    return n
