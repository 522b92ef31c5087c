"""Load run directories into tidy pandas DataFrames.

A run directory (see runs/README.md) holds ``config.json``, ``metrics.jsonl`` and — once complete —
``summary.json``. Under a root (``runs/`` or ``runs/<experiment>``) every directory holding any of the three
is a run; ``runs/bench`` and checkpoint folders are skipped.

* :func:`load_runs` — one row per run: ``run`` (path below the root), ``experiment``, the grid parameters
  spelled in the path (``key~value``), every config key (``compressor_args`` also flattened as
  ``compressor_args.<k>``), ``derived.*``, every summary field (``time_to_target`` flattened as
  ``ttt.<target>.<field>``) and provenance (``git_commit``, ``host``, ``torch_version``).
* :func:`load_metrics` — one row per metrics.jsonl line, with the run's identifying columns.

A run without ``summary.json`` is incomplete; by default that is an error naming the run (``incomplete=
"skip"`` leaves it out, ``"include"`` keeps it with ``complete=False``). A corrupt file is always an error
naming the file: a metrics.jsonl whose line count or sha256 differs from what summary.json recorded
(truncated, emptied, appended to), or whose steps go backwards or repeat (two runs interleaved), naming the
line.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from lowbw.runs.io import check_steps, metrics_digest, read_jsonl

__all__ = ["RunError", "find_runs", "load_run", "load_runs", "load_metrics"]

_FILES = ("config.json", "metrics.jsonl", "summary.json")
_SKIP = {"bench", "checkpoint", "report", ".ipynb_checkpoints"}


class RunError(ValueError):
    """A run directory that cannot be loaded (incomplete or corrupt); ``run`` is its path."""

    def __init__(self, run: Path, message: str):
        super().__init__(f"{run}: {message}")
        self.run = run


def find_runs(root: str | Path = "runs") -> list[Path]:
    """Every run directory below ``root`` (``root`` itself included), sorted."""
    root = Path(root)
    if not root.exists():
        raise FileNotFoundError(f"{root}: no such directory")
    out = []
    stack = [root]
    while stack:
        d = stack.pop()
        if any((d / f).exists() for f in _FILES):
            out.append(d)
        for c in d.iterdir():
            if c.is_dir() and c.name not in _SKIP and not c.name.startswith("."):
                stack.append(c)
    return sorted(out)


def _read_json(path: Path, run: Path) -> dict[str, Any]:
    try:
        d = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise RunError(run, f"{path.name} is corrupt ({e}); delete the run directory and rerun it") from e
    if not isinstance(d, dict):
        raise RunError(run, f"{path.name} does not hold a JSON object")
    return d


def _path_params(run: Path, root: Path) -> tuple[str, dict[str, Any]]:
    import yaml

    rel = run.relative_to(root).parts if run != root else ()
    params: dict[str, Any] = {}
    exp_parts = []
    for part in rel:
        if "~" in part:
            k, v = part.split("~", 1)
            try:
                params[k] = yaml.safe_load(v)
            except yaml.YAMLError:
                params[k] = v
        elif not params:
            exp_parts.append(part)
    experiment = exp_parts[0] if exp_parts else root.name
    return experiment, params


def _check_metrics_digest(run: Path, summ: dict[str, Any]) -> None:
    """A complete run's metrics.jsonl must have monotonic steps and be the file its summary.json sealed
    (line count and sha256; summaries written before the seal existed carry neither)."""
    mp = run / "metrics.jsonl"
    if mp.exists():
        try:
            check_steps(read_jsonl(mp), mp)
        except ValueError as e:
            raise RunError(run, f"metrics.jsonl is corrupt ({e})") from e
    if "metrics_lines" not in summ:
        return
    if not mp.exists():
        raise RunError(run, f"{mp.name} is missing but summary.json records {summ['metrics_lines']} lines")
    got = metrics_digest(mp)
    if got["metrics_lines"] != summ["metrics_lines"]:
        raise RunError(run, f"{mp} has {got['metrics_lines']} lines, summary.json recorded "
                            f"{summ['metrics_lines']} (truncated or edited; delete the run directory and rerun it)")
    if summ.get("metrics_sha256") and got["metrics_sha256"] != summ["metrics_sha256"]:
        raise RunError(run, f"{mp} does not match the sha256 summary.json recorded (edited after the run; delete "
                            f"the run directory and rerun it)")


def load_run(run: str | Path, root: str | Path | None = None, incomplete: str = "error") -> dict[str, Any] | None:
    """One run as a flat dict (the row :func:`load_runs` makes)."""
    run = Path(run)
    root = Path(root) if root is not None else run.parent
    summ_p, cfg_p = run / "summary.json", run / "config.json"
    complete = summ_p.exists()
    if not complete:
        if incomplete == "error":
            raise RunError(run, "summary.json is missing: the run is incomplete (rerun it, e.g. with snakemake)")
        if incomplete == "skip":
            return None
    experiment, params = _path_params(run, root)
    row: dict[str, Any] = {"run": str(run.relative_to(root)) if run != root else ".", "experiment": experiment}
    row.update(params)
    if cfg_p.exists():
        c = _read_json(cfg_p, run)
        cfg = c.get("config", c)
        for k, v in cfg.items():
            row[k] = json.dumps(v, sort_keys=True) if isinstance(v, list | dict) else v
            if k == "compressor_args" and isinstance(v, dict):
                for kk, vv in v.items():
                    row[f"compressor_args.{kk}"] = vv
        for k, v in (c.get("derived") or {}).items():
            row[f"derived.{k}"] = v
        prov = c.get("provenance") or {}
        for k in ("git_commit", "host", "torch_version", "cpu"):
            if k in prov:
                row[k] = prov[k]
        if "emulation" in c:
            row["emulation"] = c["emulation"]
    if complete:
        s = _read_json(summ_p, run)
        _check_metrics_digest(run, s)
        for k, v in s.items():
            if k == "time_to_target" and isinstance(v, dict):
                for t, rec in v.items():
                    for kk in ("step", "samples", "epoch", "t_virtual", "t_wall"):
                        row[f"ttt.{t}.{kk}"] = (rec or {}).get(kk)
            elif isinstance(v, list | dict):
                row[k] = json.dumps(v, sort_keys=True)
            else:
                row[k] = v
    row["complete"] = complete and bool(row.get("complete", True))
    return row


def load_runs(root: str | Path = "runs", incomplete: str = "error"):
    """All runs below ``root`` as a DataFrame, one row per run (see the module docstring)."""
    import pandas as pd  # lazy: keeps `lowbw --help` free of pandas

    if incomplete not in ("error", "skip", "include"):
        raise ValueError(f"incomplete={incomplete!r}: use error, skip or include")
    root = Path(root)
    rows = [r for r in (load_run(d, root, incomplete) for d in find_runs(root)) if r is not None]
    return pd.DataFrame(rows)


def load_metrics(root: str | Path = "runs", incomplete: str = "error", id_columns: tuple[str, ...] = ()):
    """Every metrics.jsonl line below ``root`` as a DataFrame with ``run``, ``experiment``, the path's grid
    parameters and ``id_columns`` taken from each run's config (e.g. ``("compressor", "workers")``)."""
    import pandas as pd  # lazy: keeps `lowbw --help` free of pandas

    root = Path(root)
    frames = []
    for d in find_runs(root):
        row = load_run(d, root, incomplete)
        if row is None:
            continue
        mp = d / "metrics.jsonl"
        if not mp.exists():
            raise RunError(d, "metrics.jsonl is missing")
        try:
            lines = read_jsonl(mp)
            check_steps(lines, mp)
        except ValueError as e:
            raise RunError(d, f"metrics.jsonl is corrupt ({e})") from e
        df = pd.DataFrame(lines)
        _, params = _path_params(d, root)
        for k in ("run", "experiment", *params, *id_columns):
            if k in row:
                df[k] = row[k]
        frames.append(df)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
