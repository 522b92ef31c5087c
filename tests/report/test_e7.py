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


def test_numbers_count_the_seed_that_never_arrived():
    """The case E7 had: 2 of 3 adaptive seeds reach the target. Its time is the median over all three (the
    third counted as the slowest), not the arrivals' mean, and the test is over all seeds (Mann-Whitney: with
    three seeds a side never significant)."""
    import math

    import pandas as pd

    from lowbw.report.e7 import ADAPTIVE, FIXED, numbers
    from lowbw.report.experiment import Stats
    from lowbw.report.stats import censored

    nan = float("nan")
    ttt = {"moo": [8.0, 9.0, nan], "topk01": [12.0, 13.0, 14.0], "topk1": [10.0, 11.0, 12.0],
           "topk10": [nan, nan, nan]}
    role = {"moo": ADAPTIVE, "topk01": FIXED, "topk1": FIXED, "topk10": FIXED}
    density = {"moo": 0.01, "topk01": 0.001, "topk1": 0.01, "topk10": 0.1}
    runs = pd.DataFrame([{"method": m, "seed": s, "ttt_s": t} for m, ts in ttt.items() for s, t in enumerate(ts)])
    methods = pd.DataFrame([{"method": m, "role": role[m], "density": density[m], "test_acc_mean": 0.9,
                             "ttt_median_s": censored(ts).median, "seeds_reached": censored(ts).arrived,
                             "seeds": 3} for m, ts in ttt.items()])
    out = numbers(Stats({"runs": runs, "methods": methods}, {"target_acc": 0.9, "seeds": 3, "workers": 4}))
    assert out["ESevenTttAdaptive"] == "9 s"  # median of (8, 9, never); the arrivals' mean would be 8.5
    assert out["ESevenAdaptiveSeeds"] == "with only 2 of its 3 seeds"
    assert out["ESevenBestFixed"] == "topk1" and out["ESevenAdaptiveVsBest"] == "1.22"  # 11 / 9
    assert out["ESevenTttFixedTen"] == "never"
    assert float(out["ESevenAdaptiveP"]) >= 0.1 and out["ESevenSignificance"] == "not significant"
    assert not math.isnan(float(out["ESevenAdaptiveP"]))
