"""Figures shared by several experiments, drawn from tidy tables with seaborn in the paper's style
(``lowbw.report.common.plotting``). Each returns a matplotlib Figure sized for a full-width ``figure*``
(at most the text width, about 7 in, and 30 % of the text height)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from matplotlib.ticker import FixedLocator, FuncFormatter, LogLocator, NullFormatter

from lowbw.report.common import plotting
from lowbw.report.latex import fmt_num

__all__ = ["note_figure", "accuracy_curves", "accuracy_panels", "ttt_facets", "dot_panels", "log_ticks",
           "inner_decades", "legend_below"]

LOG_TICKS_MAX_DECADES = 2  # a log axis narrower than this is labelled at 1, 2 and 5 x 10^k


def log_ticks(axis) -> None:
    """Label a log ``axis`` (``ax.xaxis`` or ``ax.yaxis``, after its limits are set) readably. Spanning less
    than :data:`LOG_TICKS_MAX_DECADES`, matplotlib labels the minor ticks too, in ``a x 10^k`` form, and
    neighbouring labels collide; such an axis gets plain numbers at 1, 2 and 5 x 10^k instead and unlabelled
    minor ticks. Wider axes keep the default powers of ten."""
    lo, hi = sorted(axis.get_view_interval())
    if axis.get_scale() != "log" or lo <= 0 or hi / lo >= 10 ** LOG_TICKS_MAX_DECADES:
        return
    axis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
    axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    axis.set_minor_formatter(NullFormatter())


def inner_decades(axis, max_labels: int = 3) -> None:
    """Label a shared log ``axis`` of side-by-side panels only at powers of ten strictly inside its data
    (every other one where more than ``max_labels`` fit), so that no label sits on a panel's edge, where it
    collided with the neighbouring panel's first label ("10^4 10^0")."""
    import math

    lo, hi = sorted(axis.get_data_interval())
    if axis.get_scale() != "log" or lo <= 0:
        return
    ks = [k for k in range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1) if lo < 10.0 ** k < hi]
    if not ks:
        return
    step = -(-len(ks) // max_labels)
    axis.set_major_locator(FixedLocator([10.0 ** k for k in ks[::step]]))
    axis.set_minor_locator(LogLocator(subs=(2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0)))
    axis.set_minor_formatter(NullFormatter())


def legend_below(fig, handles, labels, max_cols: int = 6, fontsize: float = 6.5) -> None:
    """One legend for the whole figure, below its panels, where it can hide no data; lays the panels out
    (``tight_layout``) in the space above it."""
    ncol = min(max_cols, len(labels)) or 1
    rows = -(-len(labels) // ncol)
    fig.legend(handles, labels, loc="lower center", bbox_to_anchor=(0.5, 0.0), ncol=ncol, fontsize=fontsize,
               frameon=False, handlelength=1.8, columnspacing=1.2)
    fig.tight_layout(pad=0.3, w_pad=1.0, rect=(0, (0.08 + 0.16 * rows) / fig.get_figheight(), 1, 1))


def note_figure(text: str):
    """A small figure that only says ``text`` (an experiment without data in this profile)."""
    plt, _ = plotting()
    fig, ax = plt.subplots(figsize=(3.2, 1.2))
    ax.axis("off")
    ax.text(0.5, 0.5, text, ha="center", va="center", fontsize=8)
    return fig


def accuracy_curves(curves, xlabel: str, title: str, order: Sequence[str] | None = None):
    """Test accuracy against time, one line per seed, one colour per ``group`` (tidy ``curves``: group, seed,
    time_s, test_acc), on a log time axis; the legend below the axes, as the curves can fill any corner.

    Points at time <= 0 (every run's evaluation before its first step) have no place on a log axis: drawn, they
    are clipped and the segment from them to the first real point shows as a flat line from the axis' left edge,
    so they are dropped and each line starts at its first evaluation after a step."""
    plt, sns = plotting()
    fig, ax = plt.subplots(figsize=(7.0, 2.8))
    curves = curves[curves["time_s"] > 0]
    if curves.empty:
        return fig
    # a dash pattern and a marker per group as well as a colour: curves of similar schemes lie on each other
    # (E5's four small-batch schemes), and colours alone could not tell them apart
    groups = list(order) if order is not None else list(dict.fromkeys(curves["group"]))
    palette = dict(zip(groups, sns.color_palette("tab10", len(groups))))
    sns.lineplot(data=curves, x="time_s", y="test_acc", hue="group", style="group", units="seed", estimator=None,
                 lw=0.9, hue_order=groups, style_order=groups, palette=palette, markers=True, markersize=3.5,
                 ax=ax)
    ax.set(xscale="log", xlabel=xlabel, ylabel="test accuracy", title=title)
    lo = max(0.0, float(curves["test_acc"].quantile(0.05)) - 0.02)
    ax.set_ylim(lo, min(1.0, float(curves["test_acc"].max()) + 0.01))
    log_ticks(ax.xaxis)
    handles, labels = ax.get_legend_handles_labels()
    ax.get_legend().remove()
    legend_below(fig, handles, labels)
    return fig


SCHEME_STYLES = ("-", "--", ":", "-.", (0, (3, 1, 1, 1, 1, 1)))  # one dash per scheme
SCHEME_MARKERS = ("o", "s", "^", "D", "v")
SCHEME_COLOURS = (0, 1, 2, 4, 3)  # of seaborn's colorblind palette: blue, orange, green, purple, vermilion
# where an end label may sit, tried in this order: offsets from its line's end (points) and the alignment
LABEL_SPOTS = ((5, 0, "left"), (5, 8, "left"), (5, -8, "left"), (0, 11, "center"), (0, -11, "center"),
               (-5, 8, "right"), (-5, -8, "right"), (14, 14, "left"), (14, -14, "left"), (22, 0, "left"))


def _place_labels(fig, ax, ends) -> None:
    """Write each group's name near the end of its lines (``ends``: name, x, y in data coordinates, colour) where
    it covers no drawn line, no other label and stays inside the axes: the first free spot of
    :data:`LABEL_SPOTS`, else the one covering least; a label off its line's end is tied to it by a thin leader."""
    import numpy as np

    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    pts = []  # every drawn line, sampled along its segments, in display coordinates
    for line in ax.get_lines():
        xy = ax.transData.transform(np.column_stack(line.get_data()).astype(float))
        for a, b in zip(xy[:-1], xy[1:]):
            pts.append(a + np.linspace(0, 1, 8)[:, None] * (b - a))
    pts = np.vstack(pts) if pts else np.empty((0, 2))
    box, taken = ax.get_window_extent(r), []
    for name, x, y, c in ends:
        best = None
        for dx, dy, ha in LABEL_SPOTS:
            t = ax.annotate(name, (x, y), xytext=(dx, dy), textcoords="offset points", fontsize=6.5, color=c,
                            va="center", ha=ha, fontweight="bold")
            e = t.get_window_extent(r).expanded(1.08, 1.15)
            inside = (pts[:, 0] >= e.x0) & (pts[:, 0] <= e.x1) & (pts[:, 1] >= e.y0) & (pts[:, 1] <= e.y1)
            cost = int(inside.sum()) + 1000 * sum(e.overlaps(o) for o in taken) + 1000 * (
                e.x1 > box.x1 or e.x0 < box.x0 or e.y1 > box.y1 or e.y0 < box.y0)
            t.remove()
            if best is None or cost < best[0]:
                best = (cost, dx, dy, ha, e)
            if cost == 0:
                break
        _, dx, dy, ha, e = best
        far = abs(dy) > 8 or abs(dx) > 5
        ax.annotate(name, (x, y), xytext=(dx, dy), textcoords="offset points", fontsize=6.5, color=c, va="center",
                    ha=ha, fontweight="bold", arrowprops={"arrowstyle": "-", "color": c, "lw": 0.5, "shrinkA": 1,
                                                          "shrinkB": 1} if far else None)
        taken.append(e)


def accuracy_panels(curves, xlabel: str, title: str, panels: dict[str, str],
                    scheme_key: Callable[[str], Any] | None = None):
    """Test accuracy against time on a log axis in side-by-side panels, one line per seed (tidy ``curves``: group,
    seed, time_s, test_acc, panel, scheme). ``panels``: panel value -> its title, in order (values absent from the
    data get no panel; values the map lacks come last, titled by the value). Each ``scheme`` has one colour, dash
    and marker in every panel, so that schemes of the same role compare across panels, and one legend below names
    them (sorted by ``scheme_key``, else in the order they appear); each group is also named at the end of its
    lines, in its scheme's colour (:func:`_place_labels`), so that curves that meet can be told apart without the
    legend.

    Points at time <= 0 are dropped, as in :func:`accuracy_curves`."""
    import numpy as np

    plt, sns = plotting()
    curves = curves[curves["time_s"] > 0]
    present = list(dict.fromkeys(curves["panel"]))
    shown = [p for p in panels if p in present] + [p for p in present if p not in panels]
    fig, axes = plt.subplots(1, max(1, len(shown)), figsize=(7.0, 2.7), sharex=True, sharey=True, squeeze=False)
    if not shown:
        return fig
    schemes = list(dict.fromkeys(curves["scheme"]))
    if scheme_key is not None:
        schemes.sort(key=scheme_key)
    palette = sns.color_palette("colorblind", 10)
    colours = dict(zip(schemes, [palette[i] for i in SCHEME_COLOURS * len(schemes)]))
    dash = dict(zip(schemes, SCHEME_STYLES * len(schemes)))
    marker = dict(zip(schemes, SCHEME_MARKERS * len(schemes)))
    # the upper 90 % of the points: the early climb of the fastest scheme would squeeze where the schemes part
    lo = max(0.0, float(curves["test_acc"].quantile(0.1)) - 0.01)
    hi = min(1.0, float(curves["test_acc"].max()) + 0.012)
    # from the first point inside the accuracy axis: the time before it is an empty band that squeezes the rest
    t0, t1 = float(curves.loc[curves["test_acc"] >= lo, "time_s"].min()), float(curves["time_s"].max())
    ends = {}
    for ax, p in zip(axes.flat, shown):
        d = curves[curves["panel"] == p]
        ends[p] = []
        for group, g in d.groupby("group", sort=False):
            sch = g["scheme"].iloc[0]
            for _, line in g.groupby("seed"):
                line = line.sort_values("time_s")
                ax.plot(line["time_s"], line["test_acc"], color=colours[sch], ls=dash[sch], marker=marker[sch],
                        markersize=2.4, lw=0.8, label=sch)
            last = g.sort_values("time_s").groupby("seed").tail(1)  # the seeds' last points: their centre
            ends[p].append((group, float(np.exp(np.log(last["time_s"]).mean())), float(last["test_acc"].mean()),
                            colours[sch]))
        ax.set(xscale="log", title=panels.get(p, str(p)), xlabel=xlabel)
        ax.title.set_size(7.5)
        ax.xaxis.label.set_size(7)
        ax.grid(True, which="major", lw=0.4)
        ax.tick_params(labelsize=6.5)
    axes[0, 0].set_xlim(t0 / 1.1, t1 * 2.0)  # room on the right for the end labels
    axes[0, 0].set_ylim(lo, hi)
    axes[0, 0].set_ylabel("test accuracy", fontsize=7)
    for ax in axes.flat:
        log_ticks(ax.xaxis)
    if title:
        fig.suptitle(title, fontsize=8)
    handles = {h.get_label(): h for ax in axes.flat for h in ax.get_lines()}
    legend_below(fig, [handles[s] for s in schemes if s in handles], [s for s in schemes if s in handles], max_cols=4)
    for ax, p in zip(axes.flat, shown):  # after the layout: the labels are placed in display coordinates
        _place_labels(fig, ax, ends[p])
    return fig


def ttt_facets(per_run, accuracy, by: str, baseline: str, order: Sequence[str], goal, max_cols: int = 7):
    """Small multiples, one panel per ``by`` value: virtual time to the target against the link bandwidth,
    mean +- std over the seeds at each bandwidth where every seed reached it (error bars; a bandwidth where some
    seed never did has no point: a mean over the arrivals alone is biased), the ``baseline``'s curve in grey in
    every panel;
    the panel's title gives the final quality (mean +- std: test accuracy in %, or validation loss) and, where
    some seeds never reached the target at some bandwidth, how many did.

    ``per_run``: tidy (by, seed, bandwidth_mbit, ttt_s); ``accuracy``: (by, <metric>_mean, <metric>_std);
    ``goal``: the :class:`~lowbw.report.goal.Goal` (metric, target, units).
    """
    q = goal.metric
    import numpy as np

    plt, sns = plotting()
    every = per_run.groupby([by, "bandwidth_mbit"])["ttt_s"].transform(lambda t: bool(np.isfinite(t).all()))
    d = per_run[every.astype(bool)]
    # a method with no point at any bandwidth gets no panel (it would show the baseline alone); a line under
    # the panels names it
    missing = [name for name in order if name != baseline and d[d[by] == name].empty]
    order = [name for name in order if name not in missing]
    n = len(order)
    cols = min(max_cols, n)
    rows = -(-n // cols)
    foot = 0.22 if missing else 0.0  # inches for the line naming the methods without a panel
    fig, axes = plt.subplots(rows, cols, figsize=(7.2, 0.2 + foot + 1.55 * rows), sharex=True, sharey=True,
                             squeeze=False)
    base = d[d[by] == baseline]
    acc = accuracy.set_index(by)
    seeds = int(per_run["seed"].nunique())
    for ax, name in zip(axes.flat, order):
        if not base.empty and name != baseline:
            sns.lineplot(data=base, x="bandwidth_mbit", y="ttt_s", errorbar=None, color="0.65", lw=0.9, ax=ax)
        mine = d[d[by] == name]
        if not mine.empty:
            sns.lineplot(data=mine, x="bandwidth_mbit", y="ttt_s", errorbar="sd", err_style="bars", marker="o",
                         markersize=3.5, lw=1.1, color="C0" if name != baseline else "k",
                         err_kws={"capsize": 2, "elinewidth": 0.8}, ax=ax)
        if mine.empty:  # without a word the panel showed only the dense reference, as if nothing were missing
            ax.text(0.5, 0.5, "no seed reached\nthe target", transform=ax.transAxes, ha="center", va="center",
                    fontsize=6.5, color="C3")
        reached = per_run[per_run[by] == name].groupby("bandwidth_mbit")["ttt_s"].count()
        short = f"\n{int(reached.min())}/{seeds} seeds reach it" if reached.min() < seeds else ""
        a = acc.loc[name]
        unit = " %" if goal.percent else ""
        ax.set_title(f"{name}\n{goal.fmt(a[f'{q}_mean'])} ± {goal.fmt(a[f'{q}_std'], 2)}{unit}{short}",
                     fontsize=6.5, pad=2)
        ax.set(xscale="log", yscale="log", xlabel="", ylabel="")
        ax.tick_params(labelsize=6, pad=1)
        ax.grid(True, which="major", lw=0.4)
    for ax in axes.flat[n:]:
        ax.axis("off")
    bottom = foot / fig.get_figheight()
    fig.supxlabel("link bandwidth per worker (Mbit/s)", fontsize=7, y=bottom)
    what = (f"{goal.fmt(goal.target.value)} % test accuracy" if goal.percent
            else f"{goal.metric.replace('_', ' ')} {fmt_num(goal.target.value)}")
    fig.supylabel(f"virtual time to {what} (s)", fontsize=7, x=0.0)
    if missing:
        fig.text(0.5, 0.01, f"never at the target with every seed at any bandwidth (no panel): {', '.join(missing)}",
                 fontsize=6.5, ha="center", va="bottom", color="C3")
    inner_decades(axes[0, 0].xaxis)  # shared: one call labels every panel
    fig.tight_layout(pad=0.3, h_pad=0.4, w_pad=0.6, rect=(0, bottom, 1, 1))
    return fig


def dot_panels(df, label: str, panels: Sequence[tuple[str, str, bool]], hue: str, hue_order: Sequence[str],
               title: str | None = None) -> Any:
    """Horizontal dot plots side by side that share one row per ``label`` (no overlapping text labels):
    ``panels`` are (column, axis label, log scale); ``hue`` colours the rows (e.g. ours vs references)."""
    plt, sns = plotting()
    rows = len(df)
    fig, axes = plt.subplots(1, len(panels), figsize=(7.2, 0.6 + 0.105 * rows), sharey=True)
    palette = dict(zip(hue_order, sns.color_palette("deep", len(hue_order))))
    for i, (ax, (col, xlabel, log)) in enumerate(zip(axes, panels)):
        sns.scatterplot(data=df, x=col, y=label, hue=hue, hue_order=hue_order, palette=palette, s=18, ax=ax,
                        legend=i == len(panels) - 1, zorder=3)
        ax.set(xscale="log" if log else "linear", xlabel=xlabel, ylabel="")
        log_ticks(ax.xaxis)
        ax.tick_params(axis="y", labelsize=6)
        ax.tick_params(axis="x", labelsize=6.5)
        ax.xaxis.label.set_size(7)
        ax.grid(True, axis="y", lw=0.3)
    handles, labels = axes[-1].get_legend_handles_labels()
    if axes[-1].get_legend() is not None:
        axes[-1].get_legend().remove()
    top = 1 - 0.3 / fig.get_figheight()  # room for one line of legend and title above the panels
    fig.legend(handles, labels, loc="upper right", ncol=len(labels), fontsize=6.5, frameon=False,
               bbox_to_anchor=(1.0, 1.0), handletextpad=0.2)
    if title:
        fig.text(0.01, 1.0, title, fontsize=7.5, ha="left", va="top")
    fig.tight_layout(pad=0.3, w_pad=0.6, rect=(0, 0, 1, top))
    return fig
