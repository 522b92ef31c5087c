"""``python -m lowbw compare RUN_DIR...``: your runs side by side, by the workload's own metric.

    python -m lowbw compare runs/my_dense runs/my_topk runs/my_diloco
    python -m lowbw compare 'runs/mine/*'            # a glob (quoted or expanded by the shell)

Every argument is a run directory, a directory holding runs (:func:`lowbw.runs.results.find_runs`), or a glob of
them. Runs whose configs differ only in ``seed`` are one method; a method is named by its grid path
(``method~NAME``) or by its config (sync scheme, period, compressor and arguments, error feedback, workers).

The table (printed, and written as ``compare.csv``): per method the seeds, the bytes one worker sends per step
(``bytes_sent_per_worker / step``), for each target the mean virtual time to reach it over the seeds that did
and how many did (``3/3``), and the mean final and best value of the workload's metric (:mod:`lowbw.runs.metric`:
test accuracy for a classifier, validation loss for a language model, the metric a dataset file declares).
The figure ``compare.png`` (seaborn): that metric against virtual time and against the bytes a worker sent,
one line per method (the mean over seeds, the band their range). Both go next to the runs (their common
parent directory) unless ``--out`` names a directory.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import sys
from pathlib import Path
from typing import Any

from lowbw.runs.io import check_steps, read_jsonl
from lowbw.runs.metric import headline, run_metric
from lowbw.runs.results import RunError, find_runs, load_run

__all__ = ["Comparison", "collect", "method_label", "compare", "add_parser", "main"]

_NOT_METHOD = {"seed", "progress", "checkpoint_every", "max_wall_s", "threads", "master_port"}


def _expand(args: list[str]) -> list[Path]:
    """The run directories named by ``args`` (directories, roots of runs, globs), sorted, without repeats."""
    out: list[Path] = []
    for a in args:
        hits = sorted(h for h in glob.glob(a) if Path(h).is_dir()) if glob.has_magic(a) else [a]
        if not hits:
            raise FileNotFoundError(f"{a}: matches no directory")
        for h in hits:
            p = Path(h)
            if not p.is_dir():
                raise FileNotFoundError(f"{h}: no such directory")
            runs = find_runs(p)
            if not runs:
                raise FileNotFoundError(f"{h}: holds no run (config.json, metrics.jsonl or summary.json)")
            out += [r.resolve() for r in runs]
    return sorted(dict.fromkeys(out))


def method_label(cfg: dict[str, Any], path_params: dict[str, Any]) -> str:
    """A method's name: its grid path's ``method`` or, for a run of one's own, what its config says."""
    if path_params.get("method"):
        return str(path_params["method"])
    parts = [cfg.get("sync", "sync")]
    if cfg.get("world_period", 1) not in (None, 1):  # H where not its default 1 (a scheme that reads no H keeps 1)
        parts[0] += f" H={cfg['world_period']}"
    if cfg.get("compressor", "none") != "none":
        args = ",".join(f"{k}={v}" for k, v in sorted((cfg.get("compressor_args") or {}).items()))
        parts.append(f"{cfg['compressor']}({args})" + (" +EF" if cfg.get("error_feedback") == "on" else ""))
    parts.append(f"M={cfg.get('workers')}")
    return " ".join(parts)


class Comparison:
    """Loaded runs: ``runs`` (one row per run), ``curves`` (one row per evaluation), ``metric``/``direction``
    (the workload's), ``targets`` (every target any run had)."""

    def __init__(self, runs, curves, metric: str, direction: str, targets: list[str], root: Path):
        self.runs, self.curves = runs, curves  # pandas DataFrames
        self.metric, self.direction = metric, direction  # e.g. "val_loss", "down"
        self.targets = targets  # target names as in summary.json's time_to_target
        self.root = root  # the runs' common parent directory

    def table(self):
        """Per method: seeds, bytes per step, time to each target with arrivals, final and best metric."""
        import pandas as pd  # lazy: keeps `lowbw --help` free of pandas

        rows = []
        for label, g in self.runs.groupby("method", sort=False):
            row: dict[str, Any] = {"method": label, "seeds": len(g),
                                   "bytes/step": float((g["bytes_sent_per_worker"] / g["step"]).mean())}
            for t in self.targets:
                col = f"ttt.{t}.t_virtual"
                reached = g[col].dropna() if col in g else pd.Series(dtype=float)
                row[f"to {t} (s)"] = float(reached.mean()) if len(reached) else None
                row[f"{t} reached"] = f"{len(reached)}/{len(g)}"
            row[f"final {self.metric}"] = float(g[f"final_{self.metric}"].mean())
            row[f"best {self.metric}"] = float(g[f"best_{self.metric}"].mean())
            if self.metric.endswith("_loss"):
                row["best ppl"] = float(g[f"best_{self.metric[:-5]}_ppl"].mean())
            rows.append(row)
        return pd.DataFrame(rows)

    def figure(self, path: Path) -> Path:
        """``path``: the metric against virtual time and against the bytes one worker sent, per method."""
        import matplotlib  # lazy: plotting libraries load only when a figure is drawn

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # lazy: after choosing the Agg backend
        import seaborn as sns  # lazy: as matplotlib

        d = self.curves.dropna(subset=[self.metric])
        fig, axes = plt.subplots(1, 2, figsize=(10, 3.8), sharey=True)
        for ax, x, xl in ((axes[0], "t_virtual", "virtual time (s)"), (axes[1], "mbytes_per_worker",
                                                                       "MB sent per worker")):
            sns.lineplot(data=d, x=x, y=self.metric, hue="method", errorbar=("pi", 100), ax=ax)
            ax.set_xlabel(xl)
            ax.set_ylabel(self.metric.replace("_", " "))
            if ax is axes[1] and ax.get_legend() is not None:
                ax.get_legend().remove()
        fig.suptitle(f"{self.metric} ({'higher' if self.direction == 'up' else 'lower'} is better)")
        fig.tight_layout()
        fig.savefig(path, dpi=120)
        plt.close(fig)
        return path


def collect(args: list[str]) -> Comparison:
    """Load the runs that ``args`` name (complete ones; an incomplete or corrupt run is an error naming it)."""
    import pandas as pd  # lazy: keeps `lowbw --help` free of pandas

    dirs = _expand(args)
    root = Path(os.path.commonpath([str(d) for d in dirs]))
    root = root.parent if root in dirs else root
    rows, curves, metrics = [], [], set()
    for d in dirs:
        row = load_run(d, root)
        c = json.loads((d / "config.json").read_text())
        cfg = c.get("config", c)
        metric, direction = run_metric(c)
        metrics.add((metric, direction))
        params = {k: row[k] for k in row if k == "method"}
        key = json.dumps({k: v for k, v in cfg.items() if k not in _NOT_METHOD}, sort_keys=True)
        row.update(headline(json.loads((d / "summary.json").read_text()), metric))
        row["method"], row["_key"] = method_label(cfg, params), key
        rows.append(row)
        lines = read_jsonl(d / "metrics.jsonl")
        try:
            check_steps(lines, d / "metrics.jsonl")
        except ValueError as e:
            raise RunError(d, f"metrics.jsonl is corrupt ({e})") from e
        m = pd.DataFrame([x for x in lines if x.get(metric) is not None])
        m["mbytes_per_worker"] = m["bytes_sent"] / cfg["workers"] / 1e6
        m["run"], m["_key"] = row["run"], key
        curves.append(m[["run", "_key", "step", "t_virtual", "mbytes_per_worker", metric]])
    if len(metrics) > 1:
        raise ValueError(f"the runs are judged by different metrics ({', '.join(sorted(m for m, _ in metrics))}): "
                         f"compare runs of one workload")
    runs = pd.DataFrame(rows)
    # two configs with the same name (e.g. another lr): name them apart by their run directories
    for label, g in runs.groupby("method"):
        if g["_key"].nunique() > 1:
            for _, gg in g.groupby("_key"):
                runs.loc[gg.index, "method"] = f"{label} [{gg['run'].iloc[0]}]"
    curves_df = pd.concat(curves, ignore_index=True).merge(runs[["run", "method"]], on="run")
    targets = sorted({k[len("ttt."):-len(".t_virtual")] for k in runs.columns
                      if k.startswith("ttt.") and k.endswith(".t_virtual")})
    (metric, direction), = metrics
    return Comparison(runs, curves_df, metric, direction, targets, root)


def compare(args: list[str], out: str | Path | None = None) -> tuple[Any, Path, Path]:
    """The table, and the paths of ``compare.csv`` and ``compare.png`` written to ``out`` (default: next to
    the runs)."""
    c = collect(args)
    out = Path(out) if out else c.root
    out.mkdir(parents=True, exist_ok=True)
    t = c.table()
    csv = out / "compare.csv"
    t.to_csv(csv, index=False)
    return t, csv, c.figure(out / "compare.png")


# ------------------------------------------------------------------------------------------------ CLI
def add_parser(sub) -> None:
    p = sub.add_parser("compare", help="runs side by side: table of time to target, bytes, metric; a figure",
                       description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 2)[2],
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("runs", nargs="+", help="run directories, directories of runs, or globs")
    p.add_argument("--out", help="directory for compare.csv and compare.png (default: the runs' common parent)")


def main(args) -> int:
    try:
        t, csv, png = compare(args.runs, args.out)
    except (FileNotFoundError, RunError, ValueError) as e:
        print(f"lowbw compare: {e}", file=sys.stderr)
        return 2
    import pandas as pd  # lazy: keeps `lowbw --help` free of pandas

    with pd.option_context("display.width", 200, "display.max_columns", 50):
        print(t.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    print(f"wrote {csv} and {png}")
    return 0
