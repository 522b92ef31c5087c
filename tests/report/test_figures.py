"""The shared figures: an accuracy curve on a log time axis starts at its first evaluation after a step (the
evaluation at time 0 has no place on a log axis, and drawn it shows as a flat line from the left edge)."""

from __future__ import annotations


def test_accuracy_curves_drop_time_zero():
    import pandas as pd

    from lowbw.report.figures import accuracy_curves

    curves = pd.DataFrame({"group": ["a"] * 3 + ["b"] * 3, "seed": [0] * 6,
                           "time_s": [0.0, 10.0, 20.0, 0.0, 5.0, 40.0],
                           "test_acc": [0.1, 0.8, 0.9, 0.1, 0.7, 0.85]})
    ax = accuracy_curves(curves, "t (s)", "title").axes[0]
    assert ax.get_xscale() == "log"
    xs = [x for line in ax.get_lines() for x in line.get_xdata()]
    assert xs and min(xs) > 0  # the two time-0 points are not drawn
    ys = [y for line in ax.get_lines() for y in line.get_ydata()]
    assert 0.1 not in ys


def _visible_tick_labels(fig, axis):
    """The drawn, non-empty tick labels of ``axis`` (major and minor) inside its view."""
    fig.canvas.draw()
    lo, hi = sorted(axis.get_view_interval())
    ticks = axis.get_major_ticks() + axis.get_minor_ticks()
    return [t.label1 for t in ticks if t.label1.get_visible() and t.label1.get_text() and lo <= t.get_loc() <= hi]


def test_a_narrow_log_axis_has_no_overlapping_tick_labels():
    """A throughput axis spanning under two decades (E2's, 0.2 to 8 GB/s) at the paper's panel width: matplotlib
    would label its minor ticks as a x 10^k and the labels would run into each other."""
    import pandas as pd

    from lowbw.report.figures import dot_panels

    df = pd.DataFrame({"name": [f"m{i}" for i in range(8)], "ratio": [1, 2, 4, 8, 32, 100, 250, 1000],
                       "gbps": [0.21, 0.4, 0.58, 0.9, 1.1, 2.3, 4.9, 7.6], "source": ["a"] * 7 + ["b"]})
    fig = dot_panels(df, "name", [("ratio", "ratio", True), ("ratio", "ratio", True), ("gbps", "GB/s", True)],
                     "source", ["a", "b"])
    labels = _visible_tick_labels(fig, fig.axes[2].xaxis)
    assert len(labels) >= 3
    boxes = sorted((lab.get_window_extent() for lab in labels), key=lambda b: b.x0)
    assert all(a.x1 < b.x0 for a, b in zip(boxes, boxes[1:])), [lab.get_text() for lab in labels]


def test_accuracy_curves_name_every_group_in_a_legend_outside_the_axes():
    """The curves can fill any corner of the axes (E5's, E6's), so the legend sits below them, one entry a group."""
    import pandas as pd

    from lowbw.report.figures import accuracy_curves

    groups = [f"g{i}" for i in range(6)]
    curves = pd.DataFrame({"group": [g for g in groups for _ in range(3)], "seed": 0,
                           "time_s": [10.0, 100.0, 500.0] * 6, "test_acc": [0.1, 0.5, 0.9] * 6})
    fig = accuracy_curves(curves, "t (s)", "title")
    assert fig.axes[0].get_legend() is None
    assert [t.get_text() for leg in fig.legends for t in leg.get_texts()] == groups
