"""The lm_evidence sweep's pick: each knob's best point, the default on ties, non-finite runs last, and the
config's tuned block rewritten in place."""

from __future__ import annotations

import math

import pandas as pd
import pytest
import yaml

from lowbw.report.lmc_sweep import at_edge, picks, split_point, sweep_table, widen_points, write_tuned, write_widened


def _runs(rows):
    return pd.DataFrame([{"name": n, "lr": lr, "outer_lr": o, "sync": s, "final_val_loss": v, "best_val_loss": v}
                         for n, lr, o, s, v in rows])


RUNS = _runs([
    ("dense", 0.004, 0.7, "sync", 2.10), ("dense+lrx0.5", 0.002, 0.7, "sync", 2.20),
    ("dense+lrx2", 0.008, 0.7, "sync", 2.05),
    ("diloco16", 0.004, 0.7, "diloco", 2.30), ("diloco16+lrx0.5", 0.002, 0.7, "diloco", 2.25),
    ("diloco16+lrx2", 0.008, 0.7, "diloco", math.nan), ("diloco16+olr0.5", 0.004, 0.5, "diloco", 2.40),
    ("diloco16+olr1", 0.004, 1.0, "diloco", 2.30),
])


def test_points_are_split_and_bad_names_refused():
    assert split_point("dense+lrx0.5") == ("dense", "lr", 0.5)
    assert split_point("diloco16_eager+olr1") == ("diloco16_eager", "outer_lr", 1.0)
    assert split_point("demo") == ("demo", None, None)
    with pytest.raises(ValueError, match="dense-x2"):
        split_point("dense-x2")


def test_each_knob_picks_its_lowest_final_loss_default_on_ties_nan_last():
    t = sweep_table(RUNS)
    p = picks(t)
    assert p == {"dense": {"lr": 0.008}, "diloco16": {"lr": 0.002, "outer_lr": 0.7}}
    assert set(t.loc[t["picked"], "point"]) == {"dense+lrx2", "diloco16+lrx0.5", "diloco16"}  # its outer lr


def test_a_pick_at_the_largest_or_smallest_value_tried_is_at_the_grid_edge():
    # dense: 0.008 is the largest of {0.002, 0.004, 0.008}; diloco16: lr 0.002 the smallest, outer lr 0.7 inside
    # {0.5, 0.7, 1.0}; one value tried is no edge
    t = sweep_table(RUNS)
    assert at_edge(t) == {"dense": ["lr"], "diloco16": ["lr"]}
    one = sweep_table(_runs([("dense", 0.004, 0.7, "sync", 2.1)]))
    assert at_edge(one) == {}


def test_the_tuned_block_is_rewritten_and_the_config_stays_valid_yaml(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("methods:\n  dense: &dense {compressor: none}\n  diloco16: &diloco16 {sync: diloco}\n"
                   "  # BEGIN tuned: old\n  dense-tuned: {<<: *dense}\n  # END tuned\nexperiments: {}\n")
    write_tuned(cfg, sweep_table(RUNS))
    m = yaml.safe_load(cfg.read_text())["methods"]
    assert m["dense-tuned"] == {"compressor": "none", "lr": 0.008, "lr_min": 0.0008}
    assert m["diloco16-tuned"] == {"sync": "diloco", "lr": 0.002, "lr_min": 0.0002, "outer_lr": 0.7}
    assert "outer lr 0.7 of 3" in cfg.read_text()
    assert "dense-tuned: {<<: *dense, lr: 0.008, lr_min: 0.0008}  # sweep (seed 0, final val loss): lr x2 of 3; at " \
           "the grid's edge: lr" in cfg.read_text()
    cfg.write_text("methods: {}\n")
    with pytest.raises(ValueError, match="BEGIN tuned"):
        write_tuned(cfg, sweep_table(RUNS))


def test_outer_momentum_is_a_knob_of_outer_step_methods_only():
    # diloco16's momentum 0.5 ends lowest of {0, 0.5, 0.9 (its default)}; dense has no outer step, so no momentum
    rows = [{"name": n, "lr": 0.004, "outer_lr": 0.7, "outer_momentum": om, "sync": s, "final_val_loss": v,
             "best_val_loss": v} for n, om, s, v in [
        ("dense", 0.9, "sync", 2.0), ("diloco16", 0.9, "diloco", 2.3), ("diloco16+om0", 0.0, "diloco", 2.4),
        ("diloco16+om0.5", 0.5, "diloco", 2.2)]]
    assert split_point("diloco16+om0.5") == ("diloco16", "outer_momentum", 0.5)
    t = sweep_table(pd.DataFrame(rows))
    assert math.isnan(t.loc[t["method"] == "dense", "outer_momentum"].iloc[0])
    assert picks(t) == {"dense": {"lr": 0.004}, "diloco16": {"lr": 0.004, "outer_lr": 0.7, "outer_momentum": 0.5}}
    assert at_edge(t) == {}  # 0.5 lies inside {0, 0.5, 0.9}
    assert set(t.loc[t["picked"], "point"]) == {"dense", "diloco16", "diloco16+om0.5"}


def test_widen_adds_one_point_beyond_each_edge_pick_to_the_block_and_the_grid(tmp_path):
    # dense: lr x2 (0.008) best and largest -> x4; diloco16: lr x0.5 best and smallest -> x0.25; its outer lr 0.7
    # inside {0.5, 0.7, 1.0} -> nothing; its momentum 0 best and the ladder's end -> nothing
    rows = [("dense", 0.004, 0.7, 0.9, "sync", 2.10), ("dense+lrx0.5", 0.002, 0.7, 0.9, "sync", 2.20),
            ("dense+lrx2", 0.008, 0.7, 0.9, "sync", 2.05),
            ("diloco16", 0.004, 0.7, 0.9, "diloco", 2.30), ("diloco16+lrx0.5", 0.002, 0.7, 0.9, "diloco", 2.25),
            ("diloco16+lrx2", 0.008, 0.7, 0.9, "diloco", 2.4), ("diloco16+olr0.5", 0.004, 0.5, 0.9, "diloco", 2.4),
            ("diloco16+olr1", 0.004, 1.0, 0.9, "diloco", 2.3), ("diloco16+om0", 0.004, 0.7, 0.0, "diloco", 2.2),
            ("diloco16+om0.5", 0.004, 0.7, 0.5, "diloco", 2.35)]
    t = sweep_table(pd.DataFrame([{"name": n, "lr": lr, "outer_lr": o, "outer_momentum": om, "sync": s,
                                   "final_val_loss": v, "best_val_loss": v} for n, lr, o, om, s, v in rows]))
    pts = widen_points(t)
    assert pts == [("dense+lrx4", "{<<: *dense, lr: 0.016, lr_min: 0.0016}"),
                   ("diloco16+lrx0.25", "{<<: *diloco16, lr: 0.001, lr_min: 0.0001}")]
    cfg = tmp_path / "c.yaml"
    cfg.write_text("methods:\n  dense: &dense {compressor: none, lr: 0.004}\n  diloco16: &diloco16 {sync: diloco}\n"
                   "  # BEGIN widened: x\n  # END widened\nexperiments:\n  e9_lmc_sweep:\n    seeds: [0]\n"
                   "    grid:\n      method: [dense, diloco16]\n")
    write_widened(cfg, pts)
    c = yaml.safe_load(cfg.read_text())
    assert c["experiments"]["e9_lmc_sweep"]["grid"]["method"] == ["dense", "diloco16", "dense+lrx4",
                                                                 "diloco16+lrx0.25"]
    assert c["methods"]["dense+lrx4"] == {"compressor": "none", "lr": 0.016, "lr_min": 0.0016}
    cfg.write_text("methods: {}\n")
    with pytest.raises(ValueError, match="BEGIN widened"):
        write_widened(cfg, pts)
