"""The records a run writes from its :class:`~lowbw.train.state.RunState`: ``config.json``, the lines of
``metrics.jsonl``, ``summary.json``, and the console's progress bar.

Units: samples and bytes are counts, ``epoch`` = samples / training-split size, times are seconds
(``t_virtual*`` on the virtual clock, the others measured), accuracies are fractions.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

from lowbw.runs.io import atomic_write_json, provenance
from lowbw.train.state import RunState
from lowbw.train.targets import parse_targets
from lowbw.train.userfiles import user_files
from lowbw.train.world import bandwidth_at, has_worker_links

__all__ = ["finite", "note_eval", "metrics_line", "summary", "write_config", "truncate_metrics", "progress_bar",
           "progress_postfix"]


def finite(ev: dict[str, Any]) -> dict[str, Any]:
    """An evaluation's results with NaN (an empty split) as None."""
    return {k: (None if (v is None or (isinstance(v, float) and math.isnan(v))) else v) for k, v in ev.items()}


def note_eval(st: RunState, ev: dict[str, Any], targets, n_train: int, wall_s: float) -> None:
    """Record evaluation ``ev`` of step ``st.step``: best accuracies and validation loss, the first time each
    target (:mod:`lowbw.train.targets`) is reached, and the last evaluation."""
    for key in ("val_acc", "test_acc", "val_loss"):
        v = ev.get(key)
        best = st.best.get(key)
        if v is not None and (best is None or (v < best if key.endswith("loss") else v > best)):
            st.best[key] = v
    for t in parse_targets(targets):
        if st.ttt.get(t.name) is None and t.reached(ev):
            st.ttt[t.name] = {"step": st.step, "samples": st.samples, "epoch": st.samples / n_train,
                              "t_virtual": st.clock["t_virtual"], "t_wall": wall_s}
    st.last_eval = dict(ev)
    st.last_eval_step = st.step


def metrics_line(st: RunState, cfg, n_train: int, lr: float, wall_s: float, ev: dict[str, Any] | None,
                 density: float | None) -> dict[str, Any]:
    """One metrics.jsonl line: progress, the interval's mean training loss and accuracy, bytes, the
    evaluation ``ev`` if any, measured and virtual times. ``density``: the adaptive top-k density."""
    iv = st.interval
    line: dict[str, Any] = {
        "step": st.step,
        "epoch": st.samples / n_train,
        "samples": st.samples,
        "lr": lr,
        "batch_size": st.batch,
        "loss": iv.loss / iv.n if iv.n else None,
        "acc": iv.correct / iv.count if iv.count else None,
        "bytes_sent": st.bytes_sent,
        "messages": st.messages,
    }
    if cfg.bandwidth_schedule or has_worker_links(cfg):  # the slowest worker's link on unequal links
        line["bandwidth_mbit"] = bandwidth_at(cfg, st.clock["t_virtual"])
    if density is not None:
        line["density"] = density
    if ev:
        line.update(ev)
    line.update(st.meas)
    line["t_wall"] = wall_s
    line.update(st.clock)
    return line


def summary(st: RunState, cfg, n_train: int, params: int, wall_s: float, stopped: str | None) -> dict[str, Any]:
    """summary.json: final and best accuracies, times to target, totals. ``stopped``: why the run ended
    early (None: complete)."""
    le = st.last_eval
    return {
        "complete": stopped is None,
        "stopped": stopped,
        "backend": cfg.backend,
        "step": st.step,
        "samples": st.samples,
        "epoch": st.samples / n_train,
        "final_val_acc": le.get("val_acc"),
        "final_val_loss": le.get("val_loss"),
        "final_test_acc": le.get("test_acc"),
        "final_test_loss": le.get("test_loss"),
        "final_val_ppl": le.get("val_ppl"),
        "best_val_acc": st.best["val_acc"],
        "best_test_acc": st.best["test_acc"],
        "best_val_loss": st.best.get("val_loss"),
        "time_to_target": st.ttt,
        "bytes_sent_total": st.bytes_sent,
        "bytes_sent_per_worker": st.bytes_sent / cfg.workers,
        "messages_total": st.messages,
        "messages_per_step": st.messages / st.step if st.step else 0.0,
        "final_batch_size": st.batch,
        **st.clock,
        **st.meas,
        "t_wall": wall_s,
        "params": params,
        "grad_bytes": params * 4,
    }


def write_config(path: Path, cfg, resumed: bool, *, data: dict[str, Any], model: dict[str, Any], device) -> None:
    """config.json: the config, its derived values, the data and model as built, the device, the emulation,
    how often the run was resumed, and provenance."""
    resumes = 0
    if resumed and path.exists():
        try:
            resumes = int(json.loads(path.read_text()).get("resumes", 0)) + 1
        except (ValueError, OSError):
            resumes = 1
    atomic_write_json(path, {
        "config": cfg.to_dict(),
        "seed": cfg.seed,
        "derived": cfg.derived(data["train"]),
        "data": data,
        "model": model,
        "device": str(device),
        "emulation": os.environ.get("LOWBW_EMULATION"),
        "resumes": resumes,
        "provenance": {**provenance(), "user_files": user_files(cfg)},
    })


def truncate_metrics(path: Path, lines: int) -> None:
    """Keep the first ``lines`` lines of metrics.jsonl (those a checkpoint counted)."""
    have = path.read_text(encoding="utf-8").splitlines(keepends=True) if path.exists() else []
    if len(have) < lines:
        raise RuntimeError(f"{path} has fewer lines than its checkpoint recorded")
    path.write_text("".join(have[:lines]), encoding="utf-8")


def progress_bar(cfg, total: int, initial: int):
    """A tqdm bar over the run's samples."""
    from tqdm.auto import tqdm  # only with progress: true (tqdm.auto probes the notebook environment)

    return tqdm(total=total, initial=initial, unit="sample", unit_scale=True,
                desc=f"{cfg.backend} M={cfg.workers} {cfg.model}", leave=False, dynamic_ncols=True)


def progress_postfix(pbar, line: dict[str, Any], ev: dict[str, Any] | None) -> None:
    """Show the last training loss (and test accuracy) on the bar."""
    if line["loss"] is None:
        return
    post = {"loss": f"{line['loss']:.3f}"}
    if ev and ev.get("test_acc") is not None:
        post["test"] = f"{ev['test_acc']:.3f}"
    pbar.set_postfix(post)
