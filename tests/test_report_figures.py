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
