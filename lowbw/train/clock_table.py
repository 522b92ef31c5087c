"""The virtual clock's calibration table (``config/clock.json``, written by ``python -m lowbw bench clock``):
the key of a run in it (:func:`clock_key`) and a ``clock: model`` run's clock values from it
(:func:`calibrated_clock`, which :func:`lowbw.workflow.grid.run_config` applies).

A key is the run-config keys that decide a worker's compute and (de)compression seconds per step
(``KEY_FIELDS``, plus ``TEXT_KEY_FIELDS`` for a text dataset), resolved through :class:`RunConfig`, as
canonical JSON: two configs with the same key get the same clock. A table is read once per process and path.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from lowbw.train.config_fields import RunConfig

__all__ = ["KEY_FIELDS", "TEXT_KEY_FIELDS", "clock_key", "calibrated_clock", "busy_keys"]

# the run-config keys that decide a worker's compute and (de)compression time per step
KEY_FIELDS = ("model", "dataset", "local_batch", "optimizer", "compressor", "compressor_args", "error_feedback",
              "granularity")
# and, for a text dataset, the context length (a sample is a window of block_size characters); resolved, so that
# block_size 0 (the model's own) and the model's own value share an entry; image keys stay as they were
TEXT_KEY_FIELDS = ("block_size",)


def clock_key(cfg: dict[str, Any]) -> str:
    """The calibration table's key of a (flat, validated) run config."""
    # lazy: keeps the Snakefile's planning free of torch
    from lowbw.train.workload import is_text_dataset, text_block_size  # imports torch: only when a key is made

    rc = RunConfig.from_dict({**cfg, "clock": "measured"})  # the key does not depend on the clock's values
    d = rc.to_dict()
    d["local_batch"] = rc.local_batch
    fields = KEY_FIELDS
    if is_text_dataset(rc.dataset):
        d["block_size"] = text_block_size(rc)
        fields += TEXT_KEY_FIELDS
    return json.dumps({k: d[k] for k in fields}, sort_keys=True, separators=(",", ":"))


def calibrated_clock(path: str, cfg: dict[str, Any], run: str) -> dict[str, float]:
    """``clock_sample_s`` and ``clock_compress_mbyte_s`` of a run from the calibration table at ``path``
    (written by ``python -m lowbw bench clock``); keys the run sets itself are kept."""
    table = _table(path)
    key = clock_key(cfg)
    if key not in table:
        raise ValueError(f"run {run}: {path} has no calibration for {key}; rerun `python -m lowbw bench clock "
                         f"--config <this config> --out {path}`")
    e = table[key]
    return {k: cfg.get(k) or e[k] for k in ("clock_sample_s", "clock_compress_mbyte_s")}


def busy_keys(path: str | Path) -> dict[str, str]:
    """key -> the date of its last measurement, for every entry of the table at ``path`` last measured while the
    machine was busy (``bench clock`` records the conditions of each measurement: the table's own for the keys
    it wrote, an ``added`` record for the keys ``--add`` measured later; the latest record of a key counts)."""
    doc = json.loads(Path(path).read_text())
    last: dict[str, dict[str, Any]] = {k: doc.get("conditions") or {} for k in doc["entries"]}
    for rec in doc.get("added") or []:
        for k in rec.get("keys") or []:
            if k in last:
                last[k] = rec.get("conditions") or {}
    return {k: str(c.get("date", "?"))[:10] for k, c in last.items() if c.get("busy")}


_TABLES: dict[str, dict[str, Any]] = {}


def _table(path: str) -> dict[str, Any]:
    if path not in _TABLES:
        p = Path(path)
        if not p.is_file():
            raise ValueError(f"clock_calibration: {path} does not exist; write it with `python -m lowbw bench clock "
                             f"--out {path}`")
        _TABLES[path] = json.loads(p.read_text())["entries"]
    return _TABLES[path]
