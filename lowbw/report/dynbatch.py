"""E5's two dynamic batch-size rules trained side by side: the corrected rule of eq. (dynbatch), ``dynamic_batch:
text``, B = B0 2^floor(log2(E0/Ee)), and the draft's formula as printed, ``literal``, B = B0 max(1, 2^(floor(E0/Ee)
- 1)); both capped at ``dynamic_batch_max`` and never shrinking (:func:`lowbw.train.schedule.dynamic_factor`). The
runs compared differ in the rule only: the same optimiser, learning rate, initial batch, cap, error metric, workers
and seeds.

:func:`schedules` reads, per run, how its batch grew: the error ratio E0/Ee at the first evaluation after training
began (the batch changes only at evaluations), what the rule asked for there before the cap and the batch it set,
the epochs trained before the batch reached the cap, the steps (exchanges) of the whole run; and its final accuracy
and time to the target. :func:`numbers` turns them into the prose's macros and chooses every comparative word from
the numbers, so that a regenerated result cannot contradict its sentence.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from lowbw.report.catalog import E5_RULES
from lowbw.report.common import fmt_duration
from lowbw.report.latex import escape, fmt_num
from lowbw.report.stats import censored, welch
from lowbw.report.training import eval_lines
from lowbw.train.schedule import dynamic_factor

__all__ = ["SAME", "COLUMNS", "schedules", "numbers"]

# the settings the compared runs share (only dynamic_batch differs)
SAME = ("optimizer", "lr", "batch_size", "dynamic_batch_max", "dynamic_batch_metric", "workers")
# per run: rule (dynamic_batch), seed, run, initial_batch and cap (global batches), first_epoch (epochs trained at
# the first evaluation after step 0), first_ratio (E0/Ee there, NaN for the train_loss metric, which the metrics do
# not keep), first_asked (the rule's factor there, uncapped), first_batch (the global batch set there), cap_epoch
# (epochs trained when the batch reached the cap; NaN: never), steps (of the whole run), final_test_acc (fraction),
# ttt_s (virtual seconds to the target at the focus bandwidth; NaN: never)
# the optimiser's name in the prose (another is printed as its config value)
OPTIMIZER_NAMES = {"sgd": "SGD", "adam": "Adam", "adamw": "AdamW"}
COLUMNS = ["rule", "seed", "run", "optimizer", "initial_batch", "cap", "first_epoch", "first_ratio", "first_asked",
           "first_batch", "cap_epoch", "steps", "final_test_acc", "ttt_s"]


def _error(ev: pd.Series, metric: str) -> float:
    """The error E_e the rule was driven by at evaluation ``ev`` (``dynamic_batch_metric``)."""
    if metric == "val_loss":
        return float(ev["val_loss"])
    if metric == "val_error":
        return 1.0 - float(ev["val_acc"])
    return math.nan  # train_loss: an interval's mean the metrics lines do not keep


def _compared(runs: pd.DataFrame) -> pd.DataFrame:
    """The runs of both rules that share every setting of :data:`SAME`; none where no such pair ran. Two or more
    such pairs (e.g. both rules with SGD and with Adam) are an error: the prose compares one."""
    if "dynamic_batch" not in runs:
        return runs.iloc[0:0]
    dyn = runs[runs["dynamic_batch"].isin(list(E5_RULES))]
    keys = [k for k in SAME if k in dyn]
    pairs = [g for _, g in dyn.groupby(keys, sort=True, dropna=False) if set(g["dynamic_batch"]) == set(E5_RULES)]
    if len(pairs) > 1:
        settings = [dict(zip(keys, g[keys].iloc[0])) for g in pairs]
        raise ValueError(f"E5 ran both dynamic batch rules at {len(pairs)} settings {settings}; the prose compares "
                         "one (lowbw.report.dynbatch)")
    return pairs[0] if pairs else runs.iloc[0:0]


def schedules(runs: pd.DataFrame, mets: pd.DataFrame, per_run: pd.DataFrame) -> pd.DataFrame:
    """One row per compared run (:data:`COLUMNS`). ``runs``/``mets``: the experiment's runs and metrics lines
    (lowbw.report.common.training_runs); ``per_run``: their times to the target at the focus bandwidth (run, ttt_s)."""
    rows = []
    ttt = per_run.set_index("run")["ttt_s"] if not per_run.empty else pd.Series(dtype=float)
    for _, r in _compared(runs).iterrows():
        m = mets[mets["run"] == r["run"]].sort_values("step")
        metric = str(r.get("dynamic_batch_metric", "val_loss"))
        ev = eval_lines(m, "val_acc" if metric == "val_error" else "val_loss")
        start, after = ev[ev["step"] == 0], ev[ev["step"] > 0]
        workers = int(r["workers"])
        cap = int(r["dynamic_batch_max"]) - int(r["dynamic_batch_max"]) % workers  # lowbw.train.schedule
        at_cap = m[m["batch_size"] >= cap]
        first = after.iloc[0] if not after.empty else None
        e0 = _error(start.iloc[0], metric) if not start.empty else math.nan
        ee = _error(first, metric) if first is not None else math.nan
        ratio = e0 / ee if ee > 0 else math.nan
        rows.append({"rule": r["dynamic_batch"], "seed": int(r["seed"]), "run": r["run"], "optimizer": r["optimizer"],
                     "initial_batch": int(r["batch_size"]), "cap": cap,
                     "first_epoch": float(first["epoch"]) if first is not None else math.nan,
                     "first_ratio": ratio,
                     "first_asked": dynamic_factor(e0, ee, r["dynamic_batch"]) if math.isfinite(ratio) else math.nan,
                     "first_batch": int(first["batch_size"]) if first is not None else math.nan,
                     "cap_epoch": float(at_cap["epoch"].iloc[0]) if not at_cap.empty else math.nan,
                     "steps": int(m["step"].max()), "final_test_acc": float(r["final_test_acc"]),
                     "ttt_s": float(ttt.get(r["run"], math.nan))})
    return pd.DataFrame(rows, columns=COLUMNS)


def _spread(values) -> str:
    """A value the seeds agree on, else their range (``32--64``)."""
    v = [x for x in values if x == x]
    if not v:
        return "--"
    lo, hi = min(v), max(v)
    return fmt_num(lo) if lo == hi else f"{fmt_num(lo)}--{fmt_num(hi)}"


def _cap_when(g: pd.DataFrame) -> str:
    """When a rule's batch reached the cap, in words: every seed, some (how many), or none; 'at its first
    evaluation' where every seed did so there (the rule then grew the batch to the cap in one jump)."""
    n = len(g)
    hit = g[g["cap_epoch"].notna()]
    if hit.empty:
        return "in none of its seeds"
    when = f"after {fmt_num(float(hit['cap_epoch'].mean()), 2)} epochs"
    if len(hit) < n:
        return f"{when} in {len(hit)} of its {n} seeds, never in the others"
    return when + (", at its first evaluation" if (hit["cap_epoch"] == hit["first_epoch"]).all() else "")


def _reach(g: pd.DataFrame) -> str:
    """Whether and when a rule's seeds reached the target (all: their mean time; else how many did)."""
    c = censored(g["ttt_s"].to_numpy(dtype=float))
    if c.all_arrived:
        return f"gets there after {fmt_duration(c.mean)}"
    return f"gets there with only {c.arrived} of its {c.n} seeds" if c.arrived else "never gets there"


def numbers(sch: pd.DataFrame) -> dict[str, str]:
    """The ``EFiveRule*`` macros (catalogue: lowbw.report.catalog) of :func:`schedules`' table; none without both
    rules."""
    if sch.empty or set(sch["rule"]) != set(E5_RULES):
        return {}
    by = {rule: sch[sch["rule"] == rule] for rule in E5_RULES}
    opt = str(sch["optimizer"].iloc[0])
    out = {"EFiveRuleOptimizer": OPTIMIZER_NAMES.get(opt, escape(opt)),
           "EFiveRuleBatch": fmt_num(int(sch["initial_batch"].iloc[0])), "EFiveRuleCap": fmt_num(int(sch["cap"].max())),
           "EFiveRuleFirstEpoch": fmt_num(float(sch["first_epoch"].mean()), 2)}
    if sch["first_ratio"].notna().all():
        out["EFiveRuleFirstRatio"] = fmt_num(float(sch["first_ratio"].mean()), 3)
    for rule, w in E5_RULES.items():
        g = by[rule]
        if g["first_asked"].notna().all():
            out[f"EFiveRule{w}FirstAsked"] = _spread(g["first_asked"])
        out[f"EFiveRule{w}FirstBatch"] = _spread(g["first_batch"])
        out[f"EFiveRule{w}CapWhen"] = _cap_when(g)
        out[f"EFiveRule{w}Steps"] = fmt_num(float(g["steps"].mean()), 3)
        out[f"EFiveRule{w}Acc"] = fmt_num(100 * float(g["final_test_acc"].mean()), 3)
        out[f"EFiveRule{w}Reach"] = _reach(g)
    # the draft's formula against the corrected rule: the words follow the numbers
    lit, txt = (by[r]["cap_epoch"].fillna(np.inf).median() for r in ("literal", "text"))
    out["EFiveRuleCapOrder"] = "sooner than" if lit < txt else "later than" if lit > txt else "at the same point as"
    a, b = by["literal"]["final_test_acc"].to_numpy(float), by["text"]["final_test_acc"].to_numpy(float)
    diff, t = 100 * float(a.mean() - b.mean()), welch(a, b)
    out["EFiveRuleAccDiff"] = fmt_num(abs(diff), 2)
    out["EFiveRuleAccDir"] = "higher" if diff > 0 else "lower" if diff < 0 else "no higher"
    out["EFiveRuleAccP"] = fmt_num(t.p, 2) if math.isfinite(t.p) else "--"
    out["EFiveRuleAccSig"] = "significant" if t.significant else "not significant"
    return out
