"""E3's figure: one legend below both panels, one colour per model across them (the reference models on the
left and the measured ones on the right are different models and must not share a colour)."""

from __future__ import annotations


def test_one_legend_and_one_colour_per_model_across_the_panels():
    import pandas as pd
    from matplotlib.colors import to_hex

    from lowbw.report.e3 import E3
    from lowbw.report.experiment import Stats

    bw = [1.0, 10.0, 100.0]
    minimum = pd.DataFrame([{"model": m, "bandwidth_mbit": b, "min_s": k * 86400 / b}
                            for k, m in enumerate(("resnet20", "vgg16", "resnet50"), 1) for b in bw])
    split = pd.DataFrame([{"model": m, "bandwidth_mbit": b, "comm_share_pct": 90 / b ** 0.2}
                          for m in ("cnn", "mlp") for b in bw])
    fig = E3.figure(Stats({"minimum": minimum, "dense_split": split}, {}))
    assert all(ax.get_legend() is None for ax in fig.axes)
    labels = [t.get_text() for leg in fig.legends for t in leg.get_texts()]
    assert labels == ["ResNet-20", "VGG-16 (CIFAR)", "ResNet-50", "Small CNN", "MLP"]
    colours = [to_hex(line.get_color()) for ax in fig.axes for line in ax.get_lines()]
    assert len(set(colours)) == 5
