"""E5 (batch-size schemes) and E6 (local SGD, households, data assignment): training configurations compared
with a baseline configuration on final accuracy and on virtual time to the target at the focus bandwidth."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import pandas as pd

from lowbw.report.catalog import PREFIX
from lowbw.report.common import fmt_duration, report_links, target_acc, training_runs
from lowbw.report.dynbatch import numbers as rule_numbers
from lowbw.report.dynbatch import schedules
from lowbw.report.experiment import Context, Experiment, Stats
from lowbw.report.figures import accuracy_curves, accuracy_panels
from lowbw.report.latex import booktabs, escape, fmt_num
from lowbw.report.stats import welch
from lowbw.report.training import eval_lines, group_accuracy, group_times, matching, retime, run_times, ttt_cell

__all__ = ["E5", "E6"]

SAMPLE_RATIO_SHOWN = 1.01  # E6 quotes the overlap's extra samples only above this ratio
# E6's data-overlap comparisons: the word in the macro names -> (disjoint configuration, overlapping one)
OVERLAP_PAIRS = {"Sync": ({"assignment": "disjoint", "method": "sync"}, {"assignment": "full", "method": "sync"}),
                 "Local": ({"assignment": "disjoint", "method": "local16"},
                           {"assignment": "full", "method": "local16"}),
                 "Households": ({"assignment": "household", "method": "hh2"},
                                {"assignment": "household", "method": "hh2overlap"})}


def _label(frame, by: list[str]) -> list[str]:
    return [", ".join(str(v) for v in vals) for vals in zip(*(frame[k] for k in by))]


def _overlap(runs: pd.DataFrame, pairs: dict[str, tuple[dict, dict]]) -> pd.DataFrame:
    """Per pair of ``pairs`` present in the runs: the overlapping configuration's final test accuracy minus the
    disjoint one's (points of %, means over seeds) and Welch's test between their seeds."""
    def final(cfg):
        return runs.loc[matching(runs, cfg), "final_test_acc"].to_numpy(dtype=float)

    rows = []
    for word, (disjoint, overlap) in pairs.items():
        a, b = final(overlap), final(disjoint)
        if a.size and b.size:
            t = welch(a, b)
            rows.append({"pair": word, "disjoint": ", ".join(map(str, disjoint.values())),
                         "overlap": ", ".join(map(str, overlap.values())),
                         "diff_points": 100 * float(a.mean() - b.mean()), "p": t.p, "significant": t.significant})
    return pd.DataFrame(rows, columns=["pair", "disjoint", "overlap", "diff_points", "p", "significant"])


def stats(ctx: Context, experiments: list[str], by: list[str], baseline: dict[str, Any],
          samples: bool = False, pairs: dict[str, tuple[dict, dict]] | None = None,
          panel: str | None = None, scheme: Callable[[pd.Series], str] | None = None,
          rules: bool = False) -> Stats | None:
    """Tidy ``accuracy`` (one row per configuration, Welch's test against ``baseline``), ``times`` (time to
    target at the focus bandwidth per configuration), ``runs`` (per run) and ``curves`` (test accuracy
    against virtual time at the focus bandwidth, per run); with ``samples``, the mean ``samples`` processed per
    data assignment (overlapping assignments can process more than disjoint ones); with ``pairs``, ``overlap``
    (each pair's overlapping against disjoint final accuracy, :func:`_overlap`). ``panel`` (a config key) and
    ``scheme`` (a run's row -> its scheme's name) add those columns to ``curves`` (the figure's panels and line
    styles); ``rules`` adds ``rules``, the two dynamic batch rules' schedules
    (:func:`lowbw.report.dynbatch.schedules`)."""
    runs, mets = training_runs(ctx, experiments)
    if runs is None:
        return None
    _, lat, focus = report_links(ctx)
    target = target_acc(ctx, runs)
    per_run = run_times(runs, mets, by, target, [focus], lat)
    acc = group_accuracy(runs, by, baseline)
    times = group_times(per_run, by)
    curves = []
    for _, r in runs.iterrows():
        m = eval_lines(mets[mets["run"] == r["run"]])
        if not m.empty:
            c = pd.DataFrame({"group": ", ".join(str(r[k]) for k in by), "seed": r["seed"],
                              "step": m["step"].to_numpy(), "time_s": retime(m, focus, lat).to_numpy(),
                              "test_acc": m["test_acc"].to_numpy()})
            curves.append(c.assign(**({"panel": r[panel]} if panel else {}),
                                   **({"scheme": scheme(r)} if scheme else {})))
    tables = {"accuracy": acc.assign(group=_label(acc, by)), "times": times.assign(group=_label(times, by)),
              "runs": per_run, "curves": pd.concat(curves, ignore_index=True) if curves else
              pd.DataFrame(columns=["group", "seed", "step", "time_s", "test_acc"])}
    if samples and "samples" in runs and "assignment" in runs:
        tables["samples"] = runs.groupby("assignment", as_index=False)["samples"].mean()
    if pairs:
        tables["overlap"] = _overlap(runs, pairs)
    if rules:
        tables["rules"] = schedules(runs, mets, per_run)
    return Stats(tables, {"source": ", ".join(f"runs/{e}" for e in experiments), "by": by, "baseline": baseline,
                          "target_acc": target, "focus_mbit": focus, "latency_ms": lat,
                          "seeds": int(runs["seed"].nunique())})


def _base(st: Stats):
    acc = st.tables["accuracy"]
    sel = acc[[all(acc.loc[i, k] == v for k, v in st.meta["baseline"].items()) for i in acc.index]]
    return sel.index[0] if not sel.empty else None


def numbers(st: Stats, key: str) -> dict[str, str]:
    p = PREFIX[key]
    acc, times, n = st.tables["accuracy"], st.tables["times"], st.meta["seeds"]
    best = acc.loc[acc["test_acc_mean"].idxmax()]
    out = {f"{p}Target": fmt_num(100 * st.meta["target_acc"], 3), f"{p}Focus": fmt_num(st.meta["focus_mbit"]),
           f"{p}Seeds": str(n), f"{p}BestAcc": fmt_num(100 * best["test_acc_mean"], 3),
           f"{p}Best": ", ".join(escape(best[k]) for k in st.meta["by"]),
           f"{p}SigCount": str(int((acc["significant"] == True).sum())),  # noqa: E712  (pandas boolean column)
           f"{p}Groups": str(len(acc))}
    reached = times[times["seeds_reached"] == n]
    if not reached.empty:
        fastest = reached.loc[reached["ttt_mean_s"].idxmin()]
        out[f"{p}Fastest"] = ", ".join(escape(fastest[k]) for k in st.meta["by"])
        out[f"{p}FastestTtt"] = fmt_duration(fastest["ttt_mean_s"])
    if "samples" in st.tables:
        per = st.tables["samples"].set_index("assignment")["samples"]
        if "disjoint" in per and len(per) > 1 and per.max() / per["disjoint"] > SAMPLE_RATIO_SHOWN:
            out[f"{p}SampleRatio"] = fmt_num(float(per.max() / per["disjoint"]), 3)
    for _, r in st.tables.get("overlap", pd.DataFrame()).iterrows():
        # the report chooses the comparison word, so a regenerated difference cannot contradict the sentence
        w = f"{p}Overlap{r['pair']}"
        out[w] = fmt_num(abs(r["diff_points"]), 2)
        out[f"{w}Dir"] = "higher" if r["diff_points"] > 0 else "lower" if r["diff_points"] < 0 else "no higher"
        out[f"{w}P"] = fmt_num(r["p"], 2) if pd.notna(r["p"]) else "--"
        out[f"{w}Sig"] = "significant" if r["significant"] else "not significant"
    if "rules" in st.tables:
        out.update(rule_numbers(st.tables["rules"]))
    return out


def table(st: Stats, key: str, caption: str, names: dict[str, str], per_epoch: bool = False) -> str:
    """The experiment's table; ``caption`` is formatted with the seeds ``n``, the ``target``, the ``focus``
    bandwidth and ``schemes``: what each method in the table is (``names``), for those the table holds only.
    ``per_epoch``: bytes per worker and epoch instead of per step (E5, whose batches differ per step)."""
    acc, times, n = st.tables["accuracy"], st.tables["times"].set_index("group"), st.meta["seeds"]
    b = _base(st)
    base_t = times.loc[acc.loc[b, "group"]] if b is not None else None
    rows = []
    for i, r in acc.iterrows():
        t = times.loc[r["group"]]
        sig = r"$^{*}$" if r["significant"] and b is not None and i != b else ""
        ttt = ttt_cell(t)
        both = base_t is not None and t["seeds_reached"] == t["seeds"] and base_t["seeds_reached"] == base_t["seeds"]
        speed = fmt_num(base_t["ttt_mean_s"] / t["ttt_mean_s"], 3) if both else "--"  # every seed of both arrived
        sent = (fmt_num(r["bytes_per_worker_epoch"] / 1e6, 3) if per_epoch
                else fmt_num(r["bytes_per_worker_step"] / 1e3, 3))
        rows.append([", ".join(escape(r[c]) for c in st.meta["by"]),
                     fmt_num(100 * r["test_acc_mean"], 3) + r" $\pm$ " + fmt_num(100 * r["test_acc_std"], 2) + sig,
                     sent, ttt, speed])
    header = [escape(" / ".join(st.meta["by"])), r"Test acc.\ (\%)", "MB/epoch" if per_epoch else "kB/step",
              "Time to target", "Speed-up"]
    present = list(dict.fromkeys(acc["method"])) if "method" in acc else []
    schemes = "; ".join(f"{escape(m)} = {names[m]}" if m in names else escape(m) for m in present)
    return booktabs(rows, header, caption.format(n=n, target=fmt_num(100 * st.meta["target_acc"]),
                                                 focus=fmt_num(st.meta["focus_mbit"]), schemes=schemes),
                    f"tab:{key}", size=r"\scriptsize")


def _xlabel(st: Stats) -> str:
    return f"virtual time at {fmt_num(st.meta['focus_mbit'])} Mbit/s (s)"


def figure(st: Stats, title: str):
    return accuracy_curves(st.tables["curves"], _xlabel(st), title)


def _experiment(key: str, experiments: list[str], by: list[str], baseline: dict[str, Any], title: str,
                caption: str, names: dict[str, str], samples: bool = False,
                pairs: dict[str, tuple[dict, dict]] | None = None, per_epoch: bool = False,
                panel: str | None = None, scheme: Callable[[pd.Series], str] | None = None, rules: bool = False,
                draw: Callable[[Stats], Any] | None = None) -> Experiment:
    """``draw``: the experiment's own figure (default: :func:`figure`, every curve on one axis)."""
    return Experiment(key, title, partial(stats, experiments=experiments, by=by, baseline=baseline, samples=samples,
                                          pairs=pairs, panel=panel, scheme=scheme, rules=rules),
                      partial(numbers, key=key), partial(table, key=key, caption=caption, names=names,
                                                         per_epoch=per_epoch),
                      draw or partial(figure, title=f"{title}: test accuracy vs virtual time"),
                      f"no {', '.join(experiments)} runs")


# E5's figure: a panel per optimiser, and per batch scheme one colour, dash and marker in both (its role, from the
# run's config: a constant batch, or a dynamic one and its rule)
E5_PANELS = {"sgd": "SGD with momentum", "adam": "Adam"}
E5_RULE_NAMES = {"text": "dynamic batch: corrected rule", "literal": "dynamic batch: the draft's formula"}


def e5_scheme(run: pd.Series) -> str:
    """A run's batch scheme in E5's figure: its dynamic rule, else its constant global batch."""
    rule = run.get("dynamic_batch", "off")
    return E5_RULE_NAMES.get(rule, rule) if rule != "off" else f"constant batch {int(run['batch_size'])}"


def _e5_scheme_key(name: str) -> tuple[int, int, str]:
    """The legend's order: constant batches by size (the baseline first), then the dynamic rules as named."""
    rules = list(E5_RULE_NAMES.values())
    if name in rules:
        return (1, rules.index(name), name)
    size = name.rsplit(" ", 1)[-1]
    return (0, int(size), name) if size.isdigit() else (2, 0, name)


def e5_figure(st: Stats):
    """E5's curves in a panel per optimiser (:data:`E5_PANELS`), each batch scheme styled alike in both, each preset
    named at its lines' end: the small batches' curves meet in one place, where colour alone did not tell them
    apart. No figure title: the panels' titles and the caption say what it shows."""
    return accuracy_panels(st.tables["curves"], _xlabel(st), "", E5_PANELS, scheme_key=_e5_scheme_key)


E5 = _experiment(
    "e5", ["e5_batch"], ["method"], {"method": "b128"}, "E5: batch-size schemes",
    "Batch size schemes ({n} seeds): {schemes}. Megabytes each worker sends per epoch (a $k$ times larger batch "
    "sends as much per step in $k$ times fewer steps), virtual time to {target}\\,\\% at "
    "{focus}\\,Mbit/s and speed-up over SGD at batch 128. $^*$: accuracy differs from SGD b128 (Welch $p<0.05$).",
    {"b128": "constant global batch 128", "b1024": "batch 1024 with the square-root scaling rule and warm-up",
     "dyn": "dynamic batch size (the draft's prose rule)", "dynlit": "dynamic batch size (the draft's formula)",
     "adam128": "b128 with Adam at learning rate $10^{-3}$", "adam1024": "b1024 with Adam (linear scaling)",
     "adamdyn": "dyn with Adam"}, per_epoch=True, panel="optimizer", scheme=e5_scheme, rules=True, draw=e5_figure)

E6 = _experiment(
    "e6", ["e6_local", "e6_households"], ["assignment", "method"], {"assignment": "disjoint", "method": "sync"},
    "E6: local SGD, households, data assignment",
    "Synchronisation schemes and data assignment (8 workers, {n} seeds): {schemes}; disjoint vs full data "
    "overlap. Virtual time to {target}\\,\\% at "
    "{focus}\\,Mbit/s; $^*$: accuracy differs from synchronous disjoint (Welch $p<0.05$).",
    {"sync": "fully synchronous", "local4": "local SGD with period $L_W$ = 4",
     "local16": "local SGD with period $L_W$ = 16",
     "postlocal16": "post-local SGD ($L_W$ = 16 after the first quarter of training)",
     "hh2": "2 households ($L_H=1$, $L_W=16$) with disjoint household shards",
     "hh2overlap": "2 households with overlapping household shards",
     "hh2lan": "2 households joined by a 1 Gbit/s household link"}, samples=True, pairs=OVERLAP_PAIRS)
