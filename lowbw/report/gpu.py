"""GPU results kept in the repository (:mod:`lowbw.workflow.store`, ``paper/measured/gpu``) in the paper.

When the store holds runs, :func:`write` puts ``generated/gpu.tex`` (one table, label ``tab:gpu``, whose
caption says on which GPU, on which date, with which torch/CUDA and commit they were measured) and their tidy
tables under ``generated/stats/gpu_*.csv``; when it holds none it writes nothing and removes what an earlier
build wrote, so the paper builds without them (``paper/sections`` input the file only if it exists).

Per workload, recipe (the run's dropout rate and length in steps: the runs of one method at another recipe are
another row) and method (the grid axis ``method``, else the run's ``name``): seeds, the final and best value of
the workload's quality (test accuracy for images, validation loss for the language model; mean +- std over
seeds), measured wall seconds per training step (``t_step`` / steps: the GPU's own time, compute, compression
and simulated exchange), and the epochs (images) or steps (text) to the target (the mean where every seed
reached it, else the median over all seeds, a seed that never arrived counting as the slowest, and how many
did). A method whose final value is worse than its best by more than ``OVERFIT`` is marked as overfitting, the
caption says which dropout rate and length the language-model runs have (against nanoGPT's GPU recipe,
``NANOGPT_GPU``), and how many seeds the runs have where the paper's other tables have three.
"""

from __future__ import annotations

from pathlib import Path

from lowbw.report.experiment import Stats
from lowbw.report.latex import booktabs, escape, fmt_num, fmt_pm
from lowbw.report.stats import censored
from lowbw.runs.io import atomic_write_text
from lowbw.train.targets import parse_target
from lowbw.train.workload_specs import WORKLOADS
from lowbw.workflow.store import DEFAULT_STORE, load_store

__all__ = ["TARGET", "GOALS", "stats", "table", "write"]

TARGET = 0.91  # ResNet-20 on CIFAR-10: He et al. 2016's 91.25% (the thesis' Table B.1 baseline)
# dataset -> (the target of the GPU table, how its quality is read); the language model: 1.6 nats/char, between
# nanoGPT's 1.47 (5,000 steps, dropout 0.2) and where gpt-medium without dropout starts to overfit
GOALS = {"cifar10": (TARGET, "test_acc"), "shakespeare": ("val_loss<=1.6", "val_loss")}
DATASET_WORDS = {"shakespeare": "Tiny Shakespeare", "cifar10": "CIFAR-10"}  # datasets as captions name them
_OUT_FILES = ("gpu.tex", "stats/gpu_runs.csv", "stats/gpu_methods.csv")
# final worse than the best evaluation by more than this (nats/char, or a fraction of test accuracy): overfitting
OVERFIT = {"val_loss": 0.05, "test_acc": 0.01}
SEEDS_PROMISED = 3  # the seeds the paper's other tables have
# nanoGPT's GPU recipe for gpt-medium (karpathy/nanoGPT config/train_shakespeare_char.py, README): dropout rate,
# steps, the validation loss it reports (nats/char)
NANOGPT_GPU = {"model": "gpt-medium", "dropout": 0.2, "steps": 5000, "val_loss": 1.47}


def _target_name(target) -> str:
    return parse_target(target).name


def stats(store: str | Path = DEFAULT_STORE, target: float = TARGET) -> Stats | None:
    """Tidy ``runs`` (one row per stored run) and ``methods`` (one row per workload and method), or None (empty
    store). A run's quality is its dataset's (``GOALS``): final and best test accuracy (images) or validation
    loss (text); ``steps_to_target``/``epochs_to_target``: its first evaluation at the target (NaN: never)."""
    import numpy as np
    import pandas as pd  # lazy: keeps `lowbw --help` free of pandas

    df = load_store(store)
    if df.empty:
        return None
    method = df["method"] if "method" in df else df.get("name", pd.Series(["?"] * len(df)))
    rows = []
    for i, r in df.iterrows():
        ds = str(r.get("dataset"))
        t, q = GOALS.get(ds, (target, "test_acc"))
        t = target if ds == "cifar10" else t
        name = _target_name(t)
        best = r.get("best_val_loss") if q == "val_loss" else r.get(f"best_{q}")
        p = r.get("dropout")  # absent from runs stored before the key existed: they had none
        rows.append({"run": r["run"], "experiment": r["experiment"], "method": str(method.iloc[i]),
                     "seed": r.get("seed", 0), "model": r.get("model"), "dataset": ds, "metric": q,
                     "dropout": float(p) if p is not None and p == p else 0.0,
                     "run_steps": int(r.get("steps") or r["step"]),
                     "target": name, "workers": r.get("workers"), "batch_size": r.get("batch_size"),
                     "final": r.get(f"final_{q}"), "best": best, "epochs": r["epoch"], "steps": r["step"],
                     "step_s": r["t_step"] / r["step"] if r["step"] > 0 else np.nan,
                     "bytes_per_worker_step": r["bytes_sent_per_worker"] / r["step"] if r["step"] > 0 else np.nan,
                     "epochs_to_target": r.get(f"ttt.{name}.epoch", np.nan),
                     "steps_to_target": r.get(f"ttt.{name}.step", np.nan),
                     "gpu": r["gpu"], "measured_date": r["measured_date"], "cuda_version": r["cuda_version"],
                     "torch_version": r.get("torch_version"), "git_commit": r.get("git_commit")})
    runs = pd.DataFrame(rows)
    g = runs.groupby(["dataset", "model", "dropout", "run_steps", "method"], sort=False)
    methods = pd.DataFrame({
        "metric": g["metric"].first(), "target": g["target"].first(), "seeds": g["seed"].nunique(),
        "final_mean": g["final"].mean(), "final_std": g["final"].std(), "best_mean": g["best"].mean(),
        "step_s_mean": g["step_s"].mean(), "epochs_to_target_mean": g["epochs_to_target"].mean(),
        "steps_to_target_mean": g["steps_to_target"].mean(), "seeds_reached": g["steps_to_target"].count(),
        # over all seeds, a seed that never arrived counting as the slowest (lowbw.report.stats.censored)
        "epochs_to_target_median": g["epochs_to_target"].agg(lambda x: censored(x).median),
        "steps_to_target_median": g["steps_to_target"].agg(lambda x: censored(x).median),
    }).reset_index()
    worse = np.where(methods["metric"] == "val_loss", methods["final_mean"] - methods["best_mean"],
                     methods["best_mean"] - methods["final_mean"])
    methods["overfits"] = worse > methods["metric"].map(OVERFIT).fillna(np.inf).to_numpy(float)
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


def dropout_words(m) -> str:
    """The caption's sentence on the language-model rows' recipes: which dropout rate and length each has, against
    nanoGPT's GPU recipe (``NANOGPT_GPU``); "" where the table has no model with dropout."""
    m = m[[bool(WORKLOADS.get(x) and WORKLOADS[x].dropout) for x in m["model"]]]
    if m.empty:
        return ""
    ref = NANOGPT_GPU
    parts = []
    for (model, p, steps), g in m.groupby(["model", "dropout", "run_steps"], sort=False):
        what = "without dropout" if not p else f"with dropout {p:g}"
        recipe = " (nanoGPT's GPU recipe)" if (model, p, steps) == (ref["model"], ref["dropout"], ref["steps"]) else ""
        parts.append(f"{escape(model)} {what} over {fmt_num(int(steps))} steps{recipe}: {len(g)} "
                     f"method{'s' if len(g) > 1 else ''}")
    return (f" Language-model rows by recipe: {'; '.join(parts)}. nanoGPT's GPU recipe trains {ref['model']} with "
            f"dropout {ref['dropout']:g} for {fmt_num(ref['steps'])} steps to a validation loss of "
            f"{ref['val_loss']:g}.")


def table(st: Stats) -> str:
    import numpy as np

    runs, m = st.tables["runs"], st.tables["methods"]
    rows = []
    for r in m.itertuples():
        acc = r.metric.endswith("_acc")
        scale = 100 if acc else 1
        if r.seeds_reached == r.seeds:
            reach = f"{fmt_num(r.epochs_to_target_mean if acc else r.steps_to_target_mean, 3)} ({r.seeds}/{r.seeds})"
        else:
            med = r.epochs_to_target_median if acc else r.steps_to_target_median
            reach = (f"median {fmt_num(med, 3)}" if np.isfinite(med) else "--") + f" ({r.seeds_reached}/{r.seeds})"
        std = r.final_std if r.final_std == r.final_std else 0.0
        rows.append([escape(f"{r.model} / {r.method}"),
                     f"{r.dropout:g}" if WORKLOADS.get(r.model) and WORKLOADS[r.model].dropout else "--",
                     fmt_num(int(r.run_steps)), str(r.seeds),
                     fmt_pm(scale * r.final_mean, scale * std) + (r"$^\dagger$" if r.overfits else ""),
                     fmt_num(scale * r.best_mean, 3), fmt_num(r.step_s_mean, 3), reach])
    parts = []
    for (ds, model), g in runs.groupby(["dataset", "model"], sort=False):
        first = g.iloc[0]
        t = parse_target(GOALS.get(ds, (TARGET, ""))[0] if ds != "cifar10" else st.meta["target_acc"])
        goal = (f"test accuracy in \\% (epochs to {fmt_num(100 * t.value, 3)}\\%)" if t.metric == "test_acc"
                else f"validation loss in nats/char (steps to {fmt_num(t.value)})")
        parts.append(f"{escape(model)} on {escape(DATASET_WORDS.get(ds, ds))}, {int(first['workers'])} simulated "
                     f"workers, global batch "
                     f"{int(first['batch_size'])}: {goal}")
    caption = (f"GPU runs kept in the repository ({'; '.join(parts)}), {measured_on(st)}, commit "
               f"{escape(', '.join(st.meta['commits']))}. Final value (mean $\\pm$ std over seeds), the best "
               f"evaluation of the run, seconds per step measured on the GPU, and the epochs or steps to the target "
               f"(the mean where every seed reached it, else the median over all seeds; (k/n): k of n seeds reached "
               f"it).")
    if m["overfits"].any():
        caption += (" $^\\dagger$: the run ends worse than its best evaluation (by more than "
                    f"{OVERFIT['val_loss']:g} nats/char or {100 * OVERFIT['test_acc']:g} percentage point): it "
                    "overfits, and its final and best values are both stated.")
    caption += dropout_words(m)
    few = m[m["seeds"] < SEEDS_PROMISED]
    if not few.empty:
        caption += (f" {len(few)} of the {len(m)} methods have fewer than the {SEEDS_PROMISED} seeds the paper's "
                    f"other tables have ({' or '.join(sorted({str(int(s)) for s in few['seeds']}))}).")
    return booktabs(rows, ["Model / method", "Dropout", "Steps", "Seeds", "Final", "Best", "s / step", "To target"],
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
