"""E7 -- fluctuating bandwidth (``runs/e7_fluctuating``): fixed top-k densities against the adaptive
(multi-objective) choice, timed on the scheduled link itself (no re-timing)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from lowbw.report.catalog import E7_DENSITIES, word
from lowbw.report.common import fmt_duration, plotting, target_acc, training_runs
from lowbw.report.experiment import Context, Experiment, Stats
from lowbw.report.figures import legend_below, log_ticks
from lowbw.report.latex import booktabs, escape, fmt_num
from lowbw.report.stats import censored, mean_std, rank_test
from lowbw.report.training import eval_lines, time_to_target, ttt_cell

__all__ = ["E7"]

ADAPTIVE, FIXED = "adaptive", "fixed"


def stats(ctx: Context) -> Stats | None:
    """Tidy ``runs`` (per run: role adaptive/fixed, configured density, time to target on the scheduled
    link, final accuracy, mean chosen density), ``methods`` (the same over seeds), ``curves`` (test accuracy
    against virtual time) and ``schedule`` (bandwidth and chosen density of the adaptive method's first
    seed, per metrics line)."""
    runs, mets = training_runs(ctx, ["e7_fluctuating"])
    if runs is None:
        return None
    target = target_acc(ctx, runs)
    per_run, groups, curves = [], [], []
    for method, g in runs.groupby("method", sort=False):
        adaptive = "adaptive" in g and str(g["adaptive"].iloc[0]) != "off"
        density = float(g["compressor_args.ratio"].iloc[0]) if "compressor_args.ratio" in g else float("nan")
        if not adaptive:
            word(E7_DENSITIES, density, f"E7 fixed top-k density of {method!r}")
        m = mets[mets["run"].isin(g["run"])]
        chosen = m["density"].dropna() if "density" in m else pd.Series(dtype=float)
        for _, r in g.iterrows():
            mr = mets[mets["run"] == r["run"]]
            per_run.append({"method": method, "role": ADAPTIVE if adaptive else FIXED, "density": density,
                            "seed": r["seed"], "run": r["run"], "ttt_s": time_to_target(mr, target),
                            "final_test_acc": float(r["final_test_acc"]), "t_virtual_s": float(r["t_virtual"])})
            ev = eval_lines(mr)
            curves.append(pd.DataFrame({"method": method, "seed": r["seed"], "t_virtual_s": ev["t_virtual"].to_numpy(),
                                        "test_acc": ev["test_acc"].to_numpy()}))
        pr = pd.DataFrame(per_run[-len(g):])
        acc, tt = mean_std(pr["final_test_acc"]), censored(pr["ttt_s"])  # every seed, arrived or not
        groups.append({"method": method, "role": ADAPTIVE if adaptive else FIXED, "density": density,
                       "mean_chosen_density": float(chosen.mean()) if not chosen.empty else density,
                       "test_acc_mean": acc.mean, "test_acc_std": acc.std, "ttt_mean_s": tt.mean,
                       "ttt_median_s": tt.median, "ttt_lo_s": tt.lo, "ttt_hi_s": tt.hi,
                       "seeds_reached": tt.arrived, "seeds": tt.n,
                       "t_virtual_mean_s": float(g["t_virtual"].mean())})
    tables = {"runs": pd.DataFrame(per_run), "methods": pd.DataFrame(groups),
              "curves": pd.concat(curves, ignore_index=True)}
    adaptive = [x["method"] for x in groups if x["role"] == ADAPTIVE]
    if adaptive and "density" in mets:
        s = mets[(mets["run"].isin(runs.loc[runs["method"] == adaptive[0], "run"]))
                 & (mets["seed"] == runs["seed"].min())]
        tables["schedule"] = s[["t_virtual", "bandwidth_mbit", "density"]].rename(columns={"t_virtual": "t_virtual_s"})
    return Stats(tables, {"source": "runs/e7_fluctuating", "target_acc": target,
                          "seeds": int(runs["seed"].nunique()), "workers": int(runs["workers"].iloc[0])})


def numbers(st: Stats) -> dict[str, str]:
    g = st.tables["methods"].set_index("method")
    per_run = st.tables["runs"]
    out = {"ESevenTarget": fmt_num(100 * st.meta["target_acc"], 3)}
    names = {}
    for method, r in g.iterrows():
        name = "Adaptive" if r["role"] == ADAPTIVE else "Fixed" + word(E7_DENSITIES, r["density"], "E7 density")
        names[method] = name
        med = float(r["ttt_median_s"])  # over all seeds: a seed that never arrived counts as the slowest
        out[f"ESevenTtt{name}"] = fmt_duration(med) if math.isfinite(med) else "never"
        if r["role"] == ADAPTIVE:
            k, n = int(r["seeds_reached"]), int(r["seeds"])
            out["ESevenAdaptiveSeeds"] = f"with all {n} seeds" if k == n else f"with only {k} of its {n} seeds"
        out[f"ESevenAcc{name}"] = fmt_num(100 * r["test_acc_mean"], 3)
        if r["role"] == FIXED:
            out[f"ESevenDensity{name}"] = fmt_num(r["density"], 1)
    if len(set(names.values())) < len(names):
        raise ValueError(f"E7: two methods share one macro word: {names}")
    adaptive = [m for m, n in names.items() if n == "Adaptive"]
    fixed = g[g["role"] == FIXED]
    reach = fixed[np.isfinite(fixed["ttt_median_s"].to_numpy(float))]
    a_med = float(g.loc[adaptive[0], "ttt_median_s"]) if adaptive else math.nan
    if adaptive and math.isfinite(a_med) and not reach.empty and len(fixed) == len(E7_DENSITIES):
        best = reach["ttt_median_s"].idxmin()
        t = rank_test(per_run.loc[per_run["method"] == adaptive[0], "ttt_s"],
                      per_run.loc[per_run["method"] == best, "ttt_s"])  # all seeds, the non-arrivals last
        out["ESevenBestFixed"] = escape(best)
        out["ESevenAdaptiveVsBest"] = fmt_num(float(reach.loc[best, "ttt_median_s"]) / a_med, 3)
        out["ESevenAdaptiveP"] = fmt_num(t.p, 2)
        out["ESevenSignificance"] = "significant" if t.significant else "not significant"
    return out


def table(st: Stats) -> str:
    n = st.meta["seeds"]
    rows = []
    for _, r in st.tables["methods"].iterrows():
        rows.append([escape(r["method"]),
                     fmt_num(100 * r["test_acc_mean"], 3) + r" $\pm$ " + fmt_num(100 * r["test_acc_std"], 2),
                     fmt_num(r["mean_chosen_density"], 2), ttt_cell(r), fmt_num(r["t_virtual_mean_s"], 3)])
    return booktabs(rows, ["Method", r"Test acc.\ (\%)", "Mean density", "Time to target", "Virtual time (s)"],
                    f"Fluctuating bandwidth (100 and 2\\,Mbit/s alternating every 5\\,s of virtual time; MLP on "
                    f"MNIST, {st.meta['workers']} workers, {n} seeds): fixed top-k densities with error "
                    f"feedback vs the adaptive multi-objective choice. Time to {fmt_num(100 * st.meta['target_acc'])}"
                    "\\,\\% test accuracy on the scheduled link: the mean where every seed reached it, else the "
                    "median over all seeds with (arrivals/seeds).", "tab:e7", size=r"\scriptsize")


def _names(methods) -> dict[str, str]:
    """Legend label per method: its name and what it is (adaptive, or its fixed density)."""
    return {r["method"]: f"{r['method']} (adaptive)" if r["role"] == ADAPTIVE
            else f"{r['method']} (density {r['density']:g})" for _, r in methods.iterrows()}


def figure(st: Stats):
    """Left: test accuracy against virtual time on a log axis, one line per seed, one colour and marker per
    method; the adaptive method is drawn last and thicker, since its curves run close to the fixed densities'
    and would be hidden under them. Right (where the schedule is known): the density the adaptive method chose
    on its first seed's run against every fixed density, the phases of the slower link shaded. One legend
    below both panels names every method."""
    plt, sns = plotting()
    s = st.tables.get("schedule")
    schedule = s is not None and not s.empty
    fig, axes = plt.subplots(1, 2 if schedule else 1, figsize=(7.2, 2.6), squeeze=False)
    m = st.tables["methods"]
    order = list(m.loc[m["role"] == FIXED, "method"]) + list(m.loc[m["role"] == ADAPTIVE, "method"])
    colour = dict(zip(order, sns.color_palette("deep", len(order))))
    marker = dict(zip(order, "osD^vP*X"))
    adaptive = set(m.loc[m["role"] == ADAPTIVE, "method"])
    names = _names(m)

    ax = axes[0, 0]
    d = st.tables["curves"]
    d = d[d["t_virtual_s"] > 0]  # the evaluation before the first step has no place on a log axis
    for i, method in enumerate(order):
        sns.lineplot(data=d[d["method"] == method], x="t_virtual_s", y="test_acc", units="seed", estimator=None,
                     color=colour[method], marker=marker[method], markersize=3.5, markeredgewidth=0,
                     lw=1.4 if method in adaptive else 0.8, zorder=2 + i, legend=False, ax=ax)
    ax.set(xscale="log", xlabel="virtual time on the fluctuating link (s)", ylabel="test accuracy")
    ax.set_ylim(max(0.0, float(d["test_acc"].quantile(0.05)) - 0.02), min(1.0, float(d["test_acc"].max()) + 0.01))
    log_ticks(ax.xaxis)

    handles = [Line2D([], [], color=colour[x], marker=marker[x], markersize=3.5, markeredgewidth=0,
                      lw=1.4 if x in adaptive else 0.8, label=names[x]) for x in order]
    if schedule:
        ax = axes[0, 1]
        t, bw = s["t_virtual_s"].to_numpy(), s["bandwidth_mbit"].to_numpy()
        slow = bw < bw.max()
        for t0, t1, is_slow in zip(t, list(t[1:]) + [t[-1]], slow):
            if is_slow:  # each metrics line's bandwidth holds until the next line
                ax.axvspan(t0, t1, color="0.88", lw=0, zorder=0)
        for method in order:
            if method in adaptive:
                ax.step(t, s["density"], where="post", color=colour[method], lw=1.4, zorder=3)
            else:
                ax.axhline(float(m.loc[m["method"] == method, "density"].iloc[0]), color=colour[method], lw=0.9,
                           ls="--", zorder=2)
        ax.set(yscale="log", xlim=(t[0], t[-1]), xlabel="virtual time, adaptive's first seed (s)",
               ylabel="top-k density")
        ax.set_title("density chosen over time", fontsize=8)
        if slow.any():
            levels = sorted(set(bw[slow]))
            handles.append(Patch(color="0.88", label=f"link at {' / '.join(fmt_num(x) for x in levels)} Mbit/s "
                                                     f"(else {fmt_num(bw.max())})"))
    legend_below(fig, handles, [h.get_label() for h in handles])
    return fig


E7 = Experiment("e7", "E7 fluctuating bandwidth", stats, numbers, table, figure, "no e7_fluctuating runs")
