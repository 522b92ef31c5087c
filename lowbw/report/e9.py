"""E9 -- communicate less often, or less per step? (``runs/e9_diloco``: the MLP, key ``e9``; ``runs/e9_lm``: the
character-level GPT, key ``e9lm``): the DiLoCo family (local SGD,
DiLoCo at two periods, DiLoCo with 8- and 4-bit pseudo-gradients, SparseLoCo) against dense training and the
best per-step compressors, for each number of workers: final quality (test accuracy, or validation loss),
bytes each worker sent until the target, and virtual time to it on three links (each run re-timed,
lowbw.report.training.retime).

A method is *rare* (it communicates every H steps) when its run's ``sync`` is ``local``, ``diloco``,
``desloc`` or ``noloco``, else *per step*; the two families are compared at each link by their fastest member.
The methods of ``E9_METHODS`` (the overlapped and gossip variants of DiLoCo, and diloco16 they are placed
against) get their own numbers: final quality, MB to target and time to target on the 10 Mbit/s link.
"""

from __future__ import annotations

import math
from functools import partial

import pandas as pd

from lowbw.report.catalog import E9_LINKS, E9_METHODS, PREFIX
from lowbw.report.common import fmt_duration, plotting, training_runs
from lowbw.report.experiment import Context, Experiment, Stats
from lowbw.report.figures import log_ticks
from lowbw.report.goal import goal_of
from lowbw.report.latex import booktabs, escape, fmt_num
from lowbw.report.stats import censored
from lowbw.report.training import (
    first_at_target,
    group_accuracy,
    group_times,
    require_baseline,
    time_to_target,
    ttt_cell,
)

__all__ = ["E9", "E9LM", "LINKS", "BASELINE"]

RUNS = {"e9": "e9_diloco", "e9lm": "e9_lm"}  # experiment key -> its runs

BASELINE = "dense"  # the method every other is compared with
RARE_SYNCS = ("local", "diloco", "desloc", "noloco")  # run.sync of the methods that communicate every H steps
# the links every run is re-timed at: (word in the macro names, Mbit/s per worker, one-way latency in ms)
LINKS = [(w, mbit, lat) for w, (mbit, lat) in E9_LINKS.items()]


def _link_label(mbit: float, lat: float) -> str:
    return f"{fmt_num(mbit)} Mbit/s, {fmt_num(lat)} ms"


def _bytes_to_target(m, target, workers: int) -> float:
    """Bytes sent per worker until the first evaluation at or above ``target`` (NaN if never)."""
    hit = first_at_target(m, target)
    return float(hit["bytes_sent"].iloc[0]) / workers if not hit.empty else math.nan


def _bytes_over_seeds(per_run: pd.DataFrame) -> pd.DataFrame:
    """Per workers and method, bytes each worker sent until the target over all its seeds (one row per run; the
    bytes do not depend on the link): ``bytes_to_target_per_worker`` the mean where every seed arrived (NaN
    otherwise: a mean over the seeds that arrived is never taken), ``bytes_median`` the median with a seed that
    never arrived counting as infinitely many bytes, ``bytes_reached``/``bytes_seeds`` the arrivals."""
    rows = []
    for (n, method), g in per_run.groupby(["workers", "method"], sort=False):
        c = censored(g["bytes_to_target_per_worker"])
        rows.append({"workers": n, "method": method, "bytes_to_target_per_worker": c.mean, "bytes_median": c.median,
                     "bytes_reached": c.arrived, "bytes_seeds": c.n})
    return pd.DataFrame(rows)


def _mb_cell(r: pd.Series) -> str:
    """A table cell for MB per worker to the target: the mean when every seed arrived, else the median over all
    seeds with the arrivals (k/n), ``--`` when that median is not reached (half or more never arrived)."""
    k, n = int(r["bytes_reached"]), int(r["bytes_seeds"])
    if k == n and n:
        return fmt_num(r["bytes_to_target_per_worker"] / 1e6, 3)
    med = float(r["bytes_median"])
    return ("--" if not math.isfinite(med) else "median " + fmt_num(med / 1e6, 3)) + (f" ({k}/{n})" if k else "")


def stats(ctx: Context, key: str = "e9") -> Stats | None:
    """Tidy ``accuracy`` (per workers and method, Welch's test against dense with the same workers),
    ``runs`` (per run and link: ttt_s, NaN if never reached; bytes_to_target_per_worker) and ``times`` (per
    workers, method and link: over all seeds, lowbw.report.training.group_times)."""
    runs, mets = training_runs(ctx, [RUNS[key]])
    if runs is None:
        return None
    require_baseline(runs, {"method": BASELINE}, f"runs/{RUNS[key]}", within=("workers",))
    goal = goal_of(ctx.config, runs)
    target = goal.target
    runs = runs.assign(family=["rare" if s in RARE_SYNCS else "per step" for s in runs["sync"]])
    acc = pd.concat([group_accuracy(g, ["method", "family"], {"method": BASELINE}, goal.metric).assign(workers=int(n))
                     for n, g in runs.groupby("workers", sort=True)], ignore_index=True)
    rows = []
    for _, r in runs.iterrows():
        m = mets[mets["run"] == r["run"]]
        b = _bytes_to_target(m, target, int(r["workers"]))
        for word, mbit, lat in LINKS:
            rows.append({"workers": int(r["workers"]), "method": r["method"], "family": r["family"],
                         "seed": r["seed"], "run": r["run"], "link": word, "bandwidth_mbit": mbit, "latency_ms": lat,
                         "ttt_s": time_to_target(m, target, mbit, lat), "bytes_to_target_per_worker": b})
    per_run = pd.DataFrame(rows)
    times = group_times(per_run, ["workers", "method", "family", "link"])
    acc = acc.merge(_bytes_over_seeds(per_run[per_run["link"] == LINKS[0][0]]), on=["workers", "method"], how="left")
    return Stats({"accuracy": acc, "times": times, "runs": per_run},
                 {"source": f"runs/{RUNS[key]}", "key": key, "goal": goal, "metric": goal.metric,
                  "target": target.value, "seeds": int(runs["seed"].nunique()),
                  "workers": sorted(int(n) for n in runs["workers"].unique()), "baseline": BASELINE,
                  "links": [{"word": w, "bandwidth_mbit": b, "latency_ms": lat} for w, b, lat in LINKS]})


def _fastest(times, workers: int, link: str, family: str | None = None):
    """(method, mean ttt) of the fastest method that reached the target with every seed, or None."""
    t = times[(times["workers"] == workers) & (times["link"] == link) & (times["seeds_reached"] == times["seeds"])]
    if family is not None:
        t = t[t["family"] == family]
    if t.empty:
        return None
    best = t.loc[t["ttt_mean_s"].idxmin()]
    return best["method"], float(best["ttt_mean_s"])


def numbers(st: Stats) -> dict[str, str]:
    acc, times = st.tables["accuracy"], st.tables["times"]
    p, goal, q = PREFIX[st.meta["key"]], st.meta["goal"], st.meta["metric"]
    Q = "Acc" if goal.percent else "Loss"  # the quality's word in the macro names
    ns = st.meta["workers"]
    n = ns[0]  # the prose quotes the smallest world; the table has every one
    a = acc[acc["workers"] == n].set_index("method")
    out = {f"{p}Target": goal.fmt(goal.target.value), f"{p}Seeds": str(st.meta["seeds"]),
           f"{p}Workers": " and ".join(str(k) for k in ns), f"{p}SmallN": str(n),
           f"{p}Dense{Q}": goal.fmt(a.loc[BASELINE, f"{q}_mean"])}
    rare = a[a["family"] == "rare"]
    if not rare.empty:
        best_acc = rare[f"{q}_mean"].idxmax() if goal.higher_is_better else rare[f"{q}_mean"].idxmin()
        out[f"{p}RareBest{Q}"] = goal.fmt(rare.loc[best_acc, f"{q}_mean"])
        out[f"{p}RareBest{Q}Method"] = escape(best_acc)
        ratio = a.loc[BASELINE, "bytes_per_worker_step"] / rare["bytes_per_worker_step"].clip(lower=1)
        out[f"{p}RareBytesMin"] = fmt_num(float(ratio.min()), 3)
        out[f"{p}RareBytesMax"] = fmt_num(float(ratio.max()), 3)
    out.update(_per_method(st, n, Q))
    for word, mbit, lat in LINKS:
        dense = times[(times["workers"] == n) & (times["link"] == word) & (times["method"] == BASELINE)]
        dense_t = float(dense["ttt_mean_s"].iloc[0]) if not dense.empty else math.nan
        out[f"{p}{word}Link"] = escape(_link_label(mbit, lat))
        for fam, tag in (("per step", "Step"), ("rare", "Rare")):
            best = _fastest(times, n, word, fam)
            if best is not None:
                out[f"{p}{word}{tag}Best"] = escape(best[0])
                out[f"{p}{word}{tag}Ttt"] = fmt_duration(best[1])
                out[f"{p}{word}{tag}Speedup"] = fmt_num(dense_t / best[1], 3) if math.isfinite(dense_t) else "--"
    return out


def _per_method(st: Stats, n: int, Q: str) -> dict[str, str]:
    """The numbers of each method of ``E9_METHODS[key]`` in the data (``n`` workers): final quality (mean over
    seeds), MB each worker sent until the target and the mean time to it on the 10 Mbit/s (mid) link, ``--``
    where not every seed reached the target."""
    acc, times = st.tables["accuracy"], st.tables["times"]
    p, goal, q = PREFIX[st.meta["key"]], st.meta["goal"], st.meta["metric"]
    a = acc[acc["workers"] == n].set_index("method")
    t = times[(times["workers"] == n) & (times["link"] == "Mid")].set_index("method")
    out = {}
    for method, w in E9_METHODS.get(st.meta["key"], {}).items():
        if method not in a.index:
            continue
        mb = a.loc[method, "bytes_to_target_per_worker"]
        out[f"{p}{w}{Q}"] = goal.fmt(a.loc[method, f"{q}_mean"])
        r = t.loc[method] if method in t.index else None
        k, n_seeds = (int(r["seeds_reached"]), int(r["seeds"])) if r is not None else (0, 0)
        if r is not None and k == n_seeds and math.isfinite(mb):
            out[f"{p}{w}Reached"] = (f"reaches the target after {fmt_num(mb / 1e6, 3)}\\,MB per worker, in "
                                     f"{fmt_duration(r['ttt_mean_s'])} at 10\\,Mbit/s")
        elif k:
            out[f"{p}{w}Reached"] = f"reaches the target with only {k} of its {n_seeds} seeds"
        else:
            out[f"{p}{w}Reached"] = "does not reach the target with any seed"
    return out


def _ttt_cell(t, n_seeds: int) -> str:
    return ttt_cell(t)


def table(st: Stats) -> str:
    acc, times = st.tables["accuracy"], st.tables["times"]
    goal, q = st.meta["goal"], st.meta["metric"]
    n_seeds = st.meta["seeds"]
    t = times.set_index(["workers", "method", "link"])
    rows = []
    for _, r in acc.iterrows():
        sig = r"$^{*}$" if r["method"] != BASELINE and r["significant"] else ""
        rows.append([escape(r["method"]), str(int(r["workers"])), escape(r["family"]),
                     goal.fmt(r[f"{q}_mean"]) + r" $\pm$ " + goal.fmt(r[f"{q}_std"], 2) + sig, _mb_cell(r)]
                    + [_ttt_cell(t.loc[(r["workers"], r["method"], w)], n_seeds) for w, _, _ in LINKS])
    header = ["Method", "N", "Family", goal.label, "MB to target"] + [
        escape(_link_label(b, lat)) for _, b, lat in LINKS]
    return booktabs(rows, header,
                    f"Communicate less often or less per step ({goal.workload}, sim backend, {n_seeds} seeds): "
                    f"final {goal.label.lower()} (mean $\\pm$ std; $^*$: differs from dense with the same N, Welch "
                    f"$p<0.05$), megabytes each worker sent until {goal.words} and "
                    "virtual time to it on each link (bandwidth per worker, one-way latency), over all seeds: the "
                    "mean where every seed reached it, else the median with a seed that never did counting as "
                    "infinitely late ((k/n): only k of n seeds reached it; --: half or more never did).",
                    f"tab:{st.meta['key']}", size=r"\scriptsize")


def _label_points(ax, xs, ys, labels) -> None:
    """Direct labels right of log-log points, each moved up (with a leader line) until it clears the labels
    already placed near it: a greedy stack in log10 space, lowest point first."""
    import math

    pts = sorted(zip(map(math.log10, xs), map(math.log10, ys), labels), key=lambda t: t[1])
    if not pts:
        return
    span = max(0.5, max(p[1] for p in pts) - min(p[1] for p in pts))
    h = 0.065 * span  # one label's height in decades of y
    placed: list[tuple[float, float]] = []
    for lx, ly, text in pts:
        y = ly
        while any(abs(lx - px) < 0.9 and abs(y - py) < h for px, py in placed):
            y += h
        placed.append((lx, y))
        moved = y - ly > 1e-9
        ax.annotate(text, (10 ** lx, 10 ** ly), xytext=(10 ** (lx + 0.05), 10 ** y), textcoords="data",
                    fontsize=5.5, va="center",
                    arrowprops={"arrowstyle": "-", "lw": 0.3, "color": "0.5"} if moved else None)


def figure(st: Stats):
    """Per number of workers: virtual time to the target on the middle link against the bytes each worker
    sent until then, one point per method where every seed reached it (the mean over its seeds), by family.
    Both axes are logarithmic: a method that reached the target before it sent a byte (or at time 0) has no
    point."""
    plt, sns = plotting()
    d = st.tables["runs"]
    d = d[d["link"] == LINKS[1][0]]
    every = d.groupby(["workers", "method"])["ttt_s"].transform(lambda t: bool(t.notna().all()))
    d = d[every.astype(bool) & (d["ttt_s"] > 0) & (d["bytes_to_target_per_worker"] > 0)]
    mean = d.groupby(["workers", "method", "family"], as_index=False)[["ttt_s", "bytes_to_target_per_worker"]].mean()
    ns = st.meta["workers"]
    fig, axes = plt.subplots(1, len(ns), figsize=(7.0, 2.6), sharey=True, squeeze=False)
    for ax, n in zip(axes.flat, ns):
        g = mean[mean["workers"] == n]
        sns.scatterplot(data=g, x="bytes_to_target_per_worker", y="ttt_s", hue="family", style="family",
                        hue_order=["per step", "rare"], style_order=["per step", "rare"], s=28, ax=ax)
        ax.set(xscale="log", yscale="log", title=f"{n} workers", xlabel="bytes per worker to the target",
               ylabel=f"virtual time to target, {fmt_num(LINKS[1][1])} Mbit/s (s)")
        _label_points(ax, g["bytes_to_target_per_worker"], g["ttt_s"], g["method"])
        ax.grid(True, which="major", lw=0.4)
        if ax is not axes.flat[0] and ax.get_legend() is not None:
            ax.get_legend().remove()
    for ax in axes.flat:  # once every panel is drawn: they share the time axis
        log_ticks(ax.xaxis)
        log_ticks(ax.yaxis)
    return fig


E9 = Experiment("e9", "E9 communicate less often or less per step", partial(stats, key="e9"), numbers, table,
                figure, "no e9_diloco runs")
E9LM = Experiment("e9lm", "E9 communicate less often or less per step, language model", partial(stats, key="e9lm"),
                  numbers, table, figure, "no e9_lm runs")
