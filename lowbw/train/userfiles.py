"""A user's own model or dataset file in a run config: ``model: path/to/module.py:build`` and
``dataset: path/to/module.py:build``.

The file is Python and is executed when the run loads it (by design: it is the user's code, run with the
user's rights, exactly as ``python module.py`` would). A relative path is read from the directory the run
was started in (``LOWBW_FILES_BASE``, which the launcher passes to workers that start elsewhere, e.g. in the
testbed's namespaces).

* ``model: my_model.py:build``: ``build()`` returns a ``torch.nn.Module`` whose output is logits over
  classes (``[batch, classes]``, or ``[batch, ..., classes]`` for one prediction per element). The template
  is built once per process after ``torch.manual_seed(seed)``, so every worker starts from the same weights.
* ``dataset: my_data.py:build``: ``build()`` returns a :class:`UserDataset` (below). It must return the same
  tensors every call: every worker process calls it.

The sha256 of each file is recorded in ``config.json`` (``provenance.user_files``); a rerun or resume into
the same run directory whose file changed is refused, naming the file (:func:`changed_files`).
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["UserDataset", "is_file_spec", "resolve", "file_sha256", "load_callable", "check_spec", "build_model",
           "build_dataset", "user_files", "changed_files", "FILES_BASE_ENV"]

FILES_BASE_ENV = "LOWBW_FILES_BASE"  # directory a relative file path is read from (default: the cwd)

# (metric, direction) pairs a dataset may declare: the Trainer evaluates cross-entropy and accuracy
METRICS = {"val_acc": "up", "val_loss": "down"}


@dataclass(frozen=True)
class UserDataset:
    """What a dataset file's ``build()`` returns: training and validation data and how to judge a run.

    The loss is the cross-entropy of the model's logits against integer class targets, over every target
    element (one per sample, or one per position for a sequence model), as for lowbw's own workloads.
    """

    x_train: Any  # training inputs: a tensor (or array) whose first dimension indexes the samples
    y_train: Any  # training targets: int64 class indices, [n] or [n, ...] (one class per output element)
    x_val: Any  # validation inputs, shaped like x_train after the first dimension
    y_val: Any  # validation targets, shaped like y_train after the first dimension
    metric: str = "val_acc"  # the run's own metric: "val_acc" (accuracy) or "val_loss" (cross-entropy, nats)
    direction: str = "up"  # "up" (higher is better: accuracy) or "down" (lower is better: loss)


def is_file_spec(name: str) -> bool:
    """Whether a config's ``model``/``dataset`` value names a file (``path.py:callable``)."""
    path, sep, attr = str(name).rpartition(":")
    return bool(sep) and path.endswith(".py") and bool(attr)


def resolve(spec: str) -> tuple[Path, str]:
    """(absolute path, callable name) of ``spec``; a relative path is read from ``LOWBW_FILES_BASE`` (or the cwd)."""
    path, _, attr = spec.rpartition(":")
    p = Path(path).expanduser()
    if not p.is_absolute():
        p = Path(os.environ.get(FILES_BASE_ENV) or os.getcwd()) / p
    return p, attr


def file_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def load_callable(spec: str, what: str) -> Callable:
    """Import the file of ``spec`` and return its callable; ``what`` names the key or flag in every error,
    one line (ValueError)."""
    if not is_file_spec(spec):
        raise ValueError(f"{what} {spec!r}: expected path/to/module.py:callable")
    p, attr = resolve(spec)
    if not p.is_file():
        raise ValueError(f"{what} {spec!r}: no such file {p}")
    s = importlib.util.spec_from_file_location(f"_lowbw_user_{p.stem}", p)
    mod = importlib.util.module_from_spec(s)
    try:
        s.loader.exec_module(mod)
    except Exception as e:  # the user's module: any error it raises is reported in one line
        raise ValueError(f"{what} {spec!r}: importing {p} failed: {type(e).__name__}: {e}") from e
    fn = getattr(mod, attr, None)
    if not callable(fn):
        raise ValueError(f"{what} {spec!r}: {p} defines no callable {attr!r}")
    return fn


def check_spec(spec: str, what: str) -> None:
    """A config check before any work: the file exists, imports and defines the callable."""
    load_callable(spec, what)


def build_model(spec: str, device) -> Any:
    """The user's model from ``spec`` on ``device`` (a ``torch.nn.Module`` with trainable parameters)."""
    import torch  # lazy: reading a config needs no torch

    model = load_callable(spec, "model")()
    if not isinstance(model, torch.nn.Module):
        raise ValueError(f"model {spec!r}: build() returned {type(model).__name__}, not a torch.nn.Module")
    if not any(p.requires_grad for p in model.parameters()):
        raise ValueError(f"model {spec!r}: the model has no trainable parameters")
    return model.to(device)


def build_dataset(spec: str) -> UserDataset:
    """The user's dataset from ``spec``, checked: a :class:`UserDataset` of tensors, equal lengths, integer
    targets, validation shaped like training, a known metric and its direction."""
    import torch  # lazy: reading a config needs no torch

    what = f"dataset {spec!r}"
    ds = load_callable(spec, "dataset")()
    if not isinstance(ds, UserDataset):
        raise ValueError(f"{what}: build() returned {type(ds).__name__}, not lowbw.train.userfiles.UserDataset")
    if ds.metric not in METRICS:
        raise ValueError(f"{what}: metric={ds.metric!r}; allowed: {', '.join(METRICS)}")
    if METRICS[ds.metric] != ds.direction:
        raise ValueError(f"{what}: direction={ds.direction!r} for metric {ds.metric}; it is {METRICS[ds.metric]!r}")
    t = {k: torch.as_tensor(getattr(ds, k)) for k in ("x_train", "y_train", "x_val", "y_val")}
    for split in ("train", "val"):
        x, y = t[f"x_{split}"], t[f"y_{split}"]
        if x.dim() == 0 or y.dim() == 0 or len(x) != len(y) or len(y) == 0:
            raise ValueError(f"{what}: x_{split} and y_{split} need the same number of samples (> 0), got "
                             f"{tuple(x.shape)} and {tuple(y.shape)}")
        if y.dtype.is_floating_point or y.dtype == torch.bool or y.dtype.is_complex:
            raise ValueError(f"{what}: y_{split} holds {y.dtype}; targets are integer class indices")
    for k in ("x", "y"):
        if t[f"{k}_train"].shape[1:] != t[f"{k}_val"].shape[1:]:
            raise ValueError(f"{what}: {k}_val is shaped {tuple(t[f'{k}_val'].shape)}, {k}_train "
                             f"{tuple(t[f'{k}_train'].shape)}: they differ after the first dimension")
    return UserDataset(t["x_train"], t["y_train"].long(), t["x_val"], t["y_val"].long(), ds.metric, ds.direction)


def user_files(cfg) -> dict[str, dict[str, str]]:
    """The run's user files for its provenance: ``{key: {"spec", "path", "sha256"}}``."""
    out = {}
    for key in ("model", "dataset"):
        spec = getattr(cfg, key)
        if is_file_spec(spec):
            p, _ = resolve(spec)
            out[key] = {"spec": spec, "path": str(p), "sha256": file_sha256(p) if p.is_file() else ""}
    return out


def changed_files(recorded: dict[str, Any] | None, cfg) -> list[str]:
    """The user files of ``cfg`` whose sha256 differs from what a run directory's config.json recorded, one
    phrase each ("model file my.py changed (sha256 1a2b3c4d -> 5e6f7a8b)")."""
    recorded = recorded or {}
    out = []
    for key, now in user_files(cfg).items():
        old = (recorded.get(key) or {}).get("sha256")
        if old and old != now["sha256"]:
            out.append(f"{key} file {now['path']} changed (sha256 {old[:8]} -> {now['sha256'][:8] or 'missing'})")
    return out
