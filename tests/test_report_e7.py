"""E7's figure: both panels show every method (the adaptive one above the fixed densities whose curves it
runs along) and one legend names each of them."""

from __future__ import annotations


def _stats():
    import pandas as pd

    from lowbw.report.e7 import ADAPTIVE, FIXED
    from lowbw.report.experiment import Stats

    methods = pd.DataFrame({"method": ["moo", "topk01", "topk1", "topk10"],
                            "role": [ADAPTIVE, FIXED, FIXED, FIXED], "density": [0.01, 0.001, 0.01, 0.1]})
    curves = pd.DataFrame([{"method": m, "seed": seed, "t_virtual_s": t * (1 + i), "test_acc": a}
                           for i, m in enumerate(methods["method"]) for seed in (0, 1)
                           for t, a in ((0.0, 0.1), (2.0, 0.7), (4.0, 0.85), (8.0, 0.9))])
    schedule = pd.DataFrame({"t_virtual_s": [0.0, 2.0, 5.5, 8.0, 10.5], "bandwidth_mbit": [100, 100, 2, 2, 100],
                             "density": [0.01, 0.03, 0.001, 0.001, 0.01]})
    return Stats({"methods": methods, "curves": curves, "schedule": schedule},
                 {"target_acc": 0.9, "seeds": 2, "workers": 4})


def test_every_method_is_named_and_drawn_in_both_panels():
    from matplotlib.colors import to_hex

    from lowbw.report.e7 import E7

    fig = E7.figure(_stats())
    curves, chosen = fig.axes
    assert all(ax.get_legend() is None for ax in fig.axes)
    labels = [t.get_text() for leg in fig.legends for t in leg.get_texts()]
    for method in ("moo", "topk01", "topk1", "topk10"):
        assert sum(label.startswith(f"{method} ") for label in labels) == 1, labels
    colour = {h.get_label().split()[0]: to_hex(h.get_color()) for leg in fig.legends for h in leg.legend_handles
              if hasattr(h, "get_marker")}
    for ax in (curves, chosen):
        drawn = {to_hex(line.get_color()) for line in ax.get_lines()}
        assert set(colour.values()) <= drawn
    adaptive = [line for line in curves.get_lines() if to_hex(line.get_color()) == colour["moo"]]
    assert min(x.get_zorder() for x in adaptive) > max(x.get_zorder() for x in curves.get_lines()
                                                       if x not in adaptive)
    lo, hi = chosen.get_ylim()
    assert lo <= 0.001 and hi >= 0.1  # every fixed density is inside the right panel
