"""GPU results kept in the repository (:mod:`lowbw.store`, ``paper/measured/gpu``) in the paper.

When the store holds runs, :func:`write` puts ``generated/gpu.tex`` (one table, label ``tab:gpu``, whose
caption says on which GPU, on which date, with which torch/CUDA and commit they were measured) and their tidy
tables under ``generated/stats/gpu_*.csv``; when it holds none it writes nothing and removes what an earlier
build wrote, so the paper builds without them (``paper/sections`` input the file only if it exists).

Per method (the grid axis ``method``, else the run's ``name``): seeds, final and best test accuracy (mean
+- std over seeds), measured wall seconds per training step (``t_step`` / steps: the GPU's own time, compute,
compression and simulated exchange), and the epochs to the target accuracy (mean over the seeds that reached
it, and how many did).
"""

from __future__ import annotations

from pathlib import Path

from lowbw.report.experiment import Stats
from lowbw.report.latex import booktabs, escape, fmt_num, fmt_pm
from lowbw.runio import atomic_write_text
from lowbw.store import DEFAULT_STORE, load_store

__all__ = ["TARGET", "stats", "table", "write"]

TARGET = 0.91  # ResNet-20 on CIFAR-10: He et al. 2016's 91.25% (the thesis' Table B.1 baseline)
_OUT_FILES = ("gpu.tex", "stats/gpu_runs.csv", "stats/gpu_methods.csv")


def _ttt_column(runs, target: float, field: str) -> str | None:
    for c in runs.columns:
        if c.startswith("ttt.") and c.endswith(f".{field}"):
            try:
                if abs(float(c.split(".", 1)[1].rsplit(".", 1)[0]) - target) < 1e-9:
                    return c
            except ValueError:
                continue
    return None


def stats(store: str | Path = DEFAULT_STORE, target: float = TARGET) -> Stats | None:
    """Tidy ``runs`` (one row per stored run) and ``methods`` (one row per method), or None (empty store)."""
    import pandas as pd

    df = load_store(store)
    if df.empty:
        return None
    method = df["method"] if "method" in df else df.get("name", pd.Series(["?"] * len(df)))
    ep = _ttt_column(df, target, "epoch")
    runs = pd.DataFrame({
        "run": df["run"], "experiment": df["experiment"], "method": method.astype(str),
        "seed": df.get("seed", 0), "model": df.get("model"), "dataset": df.get("dataset"),
        "workers": df.get("workers"), "batch_size": df.get("batch_size"),
        "final_test_acc": df["final_test_acc"], "best_test_acc": df["best_test_acc"], "epochs": df["epoch"],
        "steps": df["step"], "step_s": df["t_step"] / df["step"].where(df["step"] > 0),
        "bytes_per_worker_step": df["bytes_sent_per_worker"] / df["step"].where(df["step"] > 0),
        "epochs_to_target": df[ep] if ep else float("nan"),
        "gpu": df["gpu"], "measured_date": df["measured_date"], "cuda_version": df["cuda_version"],
        "torch_version": df.get("torch_version"), "git_commit": df.get("git_commit"),
    })
    g = runs.groupby("method", sort=False)
    methods = pd.DataFrame({
        "seeds": g["seed"].nunique(), "test_acc_mean": g["final_test_acc"].mean(),
        "test_acc_std": g["final_test_acc"].std(), "best_acc_mean": g["best_test_acc"].mean(),
        "step_s_mean": g["step_s"].mean(), "epochs_to_target_mean": g["epochs_to_target"].mean(),
        "seeds_reached": g["epochs_to_target"].count(),
    }).reset_index()
    where = sorted({(r.gpu, r.measured_date, r.torch_version, r.cuda_version) for r in runs.itertuples()})
    return Stats({"runs": runs, "methods": methods},
                 {"source": str(store), "target_acc": target, "measured": [list(w) for w in where],
                  "commits": sorted({str(c)[:12] for c in runs["git_commit"]})})


def measured_on(st: Stats) -> str:
    """'measured on <GPU> on <date> (torch ..., CUDA ...)', one clause per GPU and date."""
    by: dict[str, list[str]] = {}
    for gpu, date, torch_v, cuda in st.meta["measured"]:
        by.setdefault(f"{gpu}", []).append(f"{date} (torch {torch_v}, CUDA {cuda or 'unknown'})")
    return "; ".join(f"measured on {escape(g)} on {escape(', '.join(v))}" for g, v in by.items())


def table(st: Stats) -> str:
    runs, m = st.tables["runs"], st.tables["methods"]
    t = 100 * st.meta["target_acc"]
    rows = []
    for r in m.itertuples():
        reach = f"{fmt_num(r.epochs_to_target_mean, 3)} ({r.seeds_reached}/{r.seeds})" if r.seeds_reached else (
            f"-- (0/{r.seeds})")
        rows.append([escape(r.method), str(r.seeds), fmt_pm(100 * r.test_acc_mean, 100 * r.test_acc_std),
                     fmt_num(100 * r.best_acc_mean, 3), fmt_num(r.step_s_mean, 3), reach])
    first = runs.iloc[0]
    what = (f"{escape(first['model'])} on {escape(first['dataset'])}, {fmt_num(first['workers'])} simulated "
            f"workers, global batch {fmt_num(first['batch_size'])}")
    caption = (f"GPU runs kept in the repository ({what}), {measured_on(st)}, commit "
               f"{escape(', '.join(st.meta['commits']))}. Test accuracy in \\% (mean $\\pm$ std over seeds); "
               f"seconds per step measured on the GPU; epochs to {fmt_num(t, 3)}\\% test accuracy (seeds that "
               f"reached it).")
    return booktabs(rows, ["Method", "Seeds", "Final acc.", "Best acc.", "s / step", f"Epochs to {fmt_num(t, 3)}\\%"],
                    caption, "tab:gpu")


def write(out: str | Path, store: str | Path = DEFAULT_STORE) -> list[Path]:
    """Write ``gpu.tex`` and ``stats/gpu_*.csv`` under ``out`` from the store; with an empty store remove
    them (the paper then builds without GPU results). Returns the files written."""
    import json

    out = Path(out)
    st = stats(store)
    if st is None:
        for f in _OUT_FILES:
            (out / f).unlink(missing_ok=True)
        return []
    (out / "stats").mkdir(parents=True, exist_ok=True)
    head = "".join(f"# {k}: {json.dumps(v, default=str)}\n" for k, v in st.meta.items())
    files = [atomic_write_text(out / f"stats/gpu_{k}.csv", head + df.to_csv(index=False)) for k, df in
             st.tables.items()]
    files.append(atomic_write_text(out / "gpu.tex", f"% generated by lowbw.report.gpu from {escape(store)}\n"
                                   + table(st)))
    return files
