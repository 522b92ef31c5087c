"""The lm_evidence sweep's pick: each knob's best point, the default on ties, non-finite runs last, and the
config's tuned block rewritten in place."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest
import yaml

from lowbw.report.lmc_sweep import (
    at_edge,
    best_points,
    confirm_points,
    confirmed,
    coordinate_picks,
    extend_points,
    held_out,
    joint_points,
    kept_at_edge,
    picks,
    relocate,
    runner_up,
    split_point,
    sweep_table,
    tuned_block,
    widen_points,
    write_confirm,
    write_tuned,
    write_widened,
)
from lowbw.train.config_fields import RunConfig


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
    # one knob at a time: diloco16's outer lr 0.7 (its default) ties with 1.0 and beats 0.5; lr x2 is NaN: last
    assert coordinate_picks(t) == {"dense": {"lr": 0.008}, "diloco16": {"lr": 0.002, "outer_lr": 0.7}}
    # the pick is the best point that ran, with all its values
    assert picks(t) == {"dense": {"lr": 0.008}, "diloco16": {"lr": 0.002, "outer_lr": 0.7}}
    assert set(t.loc[t["picked"], "point"]) == {"dense+lrx2", "diloco16+lrx0.5"}
    tie = sweep_table(_runs([("dense+lrx2", 0.008, 0.7, "sync", 2.0), ("dense", 0.004, 0.7, "sync", 2.0)]))
    assert best_points(tie) == {"dense": "dense"}  # ties: the default


def test_the_combined_one_knob_picks_are_a_point_of_their_own_and_picked_only_if_lowest():
    # diloco16: lr x0.5 (2.25) and outer lr 0.5 (2.20) each beat the default (2.30); their combination never ran
    runs = _runs([("diloco16", 0.004, 0.7, "diloco", 2.30), ("diloco16+lrx0.5", 0.002, 0.7, "diloco", 2.25),
                  ("diloco16+olr0.5", 0.004, 0.5, "diloco", 2.20)])
    t = sweep_table(runs)
    assert joint_points(t) == [("diloco16+joint", "{<<: *diloco16, lr: 0.002, lr_min: 0.0002, outer_lr: 0.5}")]
    assert picks(t)["diloco16"] == {"lr": 0.004, "outer_lr": 0.5}  # the best point that ran
    worse = sweep_table(pd.concat([runs, _runs([("diloco16+joint", 0.002, 0.5, "diloco", 2.4)])]))
    assert split_point("diloco16+joint") == ("diloco16", "joint", None)
    assert picks(worse)["diloco16"] == {"lr": 0.004, "outer_lr": 0.5} and joint_points(worse) == []
    better = sweep_table(pd.concat([runs, _runs([("diloco16+joint", 0.002, 0.5, "diloco", 2.1)])]))
    assert picks(better)["diloco16"] == {"lr": 0.002, "outer_lr": 0.5}
    assert runner_up(better) == {"diloco16": 0.004}


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
    assert "diloco16-tuned: {<<: *diloco16, lr: 0.002, lr_min: 0.0002, outer_lr: 0.7}  # sweep (seed 0, final val " \
           "loss): best of 5 points: diloco16+lrx0.5 2.250; at the grid's edge: lr" in cfg.read_text()
    assert "dense-tuned: {<<: *dense, lr: 0.008, lr_min: 0.0008}  # sweep (seed 0, final val loss): best of 3 " \
           "points: dense+lrx2 2.050; at the grid's edge: lr" in cfg.read_text()
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
    assert set(t.loc[t["picked"], "point"]) == {"dense", "diloco16+om0.5"}


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


def test_the_runner_up_is_the_second_best_inner_lr_at_the_other_picked_values():
    # dense: x2 (2.05) best, x1 (2.10) second; diloco16: x0.5 (2.25) best, x1 (2.30) second (x2 is NaN: last),
    # its alt keeps the picked outer lr
    t = sweep_table(RUNS)
    assert runner_up(t) == {"dense": 0.004, "diloco16": 0.004}
    assert confirm_points(t) == [("dense-alt", "{<<: *dense, lr: 0.004, lr_min: 0.0004}"),
                                 ("diloco16-alt", "{<<: *diloco16, lr: 0.004, lr_min: 0.0004, outer_lr: 0.7}")]
    assert runner_up(sweep_table(_runs([("dense", 0.004, 0.7, "sync", 2.1)]))) == {}


def _held(rows):
    return pd.DataFrame([{"name": n, "seed": s, "lr": lr, "final_val_loss": v} for n, s, lr, v in rows])


def test_the_held_out_seeds_keep_the_inner_lr_with_the_lower_mean_and_only_when_both_ran_them_all():
    t = sweep_table(RUNS)
    runs = _held([
        # dense: the pick (0.008) ends higher on seeds 1-2 than the runner-up (0.004): the runner-up wins; seed 0
        # (the pick's own) is not counted, a copied run counts once
        ("dense-tuned", 0, 0.008, 1.0), ("dense-tuned", 1, 0.008, 2.2), ("dense-tuned", 2, 0.008, 2.0),
        ("dense-alt", 1, 0.004, 2.1), ("dense-alt", 2, 0.004, 2.0), ("dense-tuned", 2, 0.004, 2.0),
        # diloco16: its runner-up lacks seed 2: unconfirmed
        ("diloco16-tuned", 1, 0.002, 2.3), ("diloco16-tuned", 2, 0.002, 2.3), ("diloco16-alt", 1, 0.004, 2.0)])
    h = held_out(runs, [1, 2]).set_index(["method", "lr"])
    assert h.loc[("dense", 0.004), "n"] == 2 and h.loc[("dense", 0.004), "mean"] == pytest.approx(2.05)
    c = confirmed(t, runs, [1, 2])
    assert c == {"dense": {"pick_lr": 0.008, "pick_mean": pytest.approx(2.1), "alt_lr": 0.004,
                           "alt_mean": pytest.approx(2.05), "beyond": {}, "lr": 0.004}}
    block = "\n".join(tuned_block(t, c, [1, 2]))
    assert "dense-tuned: {<<: *dense, lr: 0.004, lr_min: 0.0004}" in block
    assert "held out (seeds 1, 2, mean final val loss): lr x2 2.100, x1 2.050 -> x1" in block
    assert "diloco16-tuned: {<<: *diloco16, lr: 0.002, lr_min: 0.0002, outer_lr: 0.7}" in block
    # a tie keeps the pick
    tie = _held([("dense-tuned", 1, 0.008, 2.0), ("dense-alt", 1, 0.004, 2.0)])
    assert confirmed(t, tie, [1])["dense"]["lr"] == 0.008


def _run(d, cfg, loss):
    d.mkdir(parents=True)
    (d / "run-config.json").write_text(json.dumps(cfg, sort_keys=True))
    (d / "config.json").write_text(json.dumps({"config": RunConfig.from_dict(cfg).to_dict()}))
    (d / "summary.json").write_text(json.dumps({"final_val_loss": loss}))


def test_relocate_moves_the_old_pick_and_copies_the_winner_only_where_they_train_what_the_config_asks(tmp_path):
    config = {"seeds": [0], "train_defaults": {"steps": 4},
              "methods": {"dense": {"lr": 0.004}, "dense-tuned": {"lr": 0.002}, "dense-alt": {"lr": 0.002},
                          "dense-pick": {"lr": 0.004}},
              "experiments": {"e9_lmc_confirm": {"base": {}, "seeds": [1, 2],
                                                 "grid": {"method": ["dense-alt", "dense-pick"]}},
                              "e9_lmc": {"base": {}, "seeds": [0, 1, 2], "grid": {"method": ["dense-tuned"]}}}}
    runs = tmp_path / "runs"
    old = {"steps": 4, "lr": 0.004, "name": "dense-tuned"}
    for s in (1, 2):
        _run(runs / "e9_lmc" / "method~dense-tuned" / f"seed~{s}", {**old, "seed": s}, 2.2)
    _run(runs / "e9_lmc_confirm" / "method~dense-alt" / "seed~1", {"steps": 4, "lr": 0.002, "name": "dense-alt",
                                                                 "seed": 1}, 2.0)
    _run(runs / "e9_lmc_confirm" / "method~dense-alt" / "seed~2", {"steps": 4, "lr": 0.003, "name": "dense-alt",
                                                                 "seed": 2}, 2.0)  # not what dense-tuned asks
    done = relocate(runs, config, ["dense"], [1, 2])
    assert len(done) == 3, done  # two moves, one copy
    pick = runs / "e9_lmc_confirm" / "method~dense-pick" / "seed~1"
    assert json.loads((pick / "run-config.json").read_text())["name"] == "dense-pick"
    assert json.loads((pick / "config.json").read_text())["config"]["name"] == "dense-pick"
    tuned = runs / "e9_lmc" / "method~dense-tuned"
    assert json.loads((tuned / "seed~1" / "run-config.json").read_text())["lr"] == 0.002
    assert json.loads((tuned / "seed~1" / "config.json").read_text())["config"]["name"] == "dense-tuned"
    assert (runs / "e9_lmc_confirm" / "method~dense-alt" / "seed~1" / "summary.json").is_file()  # copied, kept
    assert not (tuned / "seed~2").exists()  # left for the campaign to run
    assert relocate(runs, config, ["dense"], [1, 2]) == []  # nothing left to do


def test_confirm_points_go_into_an_empty_grid(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("methods:\n  dense: &dense {lr: 0.004}\n  # BEGIN confirm: x\n  # END confirm\nexperiments:\n"
                   "  e9_lmc_confirm:\n    seeds: [1, 2]\n    grid:\n      method: []\n")
    write_confirm(cfg, [("dense-alt", "{<<: *dense, lr: 0.002, lr_min: 0.0002}")])
    c = yaml.safe_load(cfg.read_text())
    assert c["experiments"]["e9_lmc_confirm"]["grid"]["method"] == ["dense-alt"]
    assert c["methods"]["dense-alt"] == {"lr": 0.002, "lr_min": 0.0002}


def test_a_kept_lr_at_the_edge_of_all_tried_gets_one_point_beyond_and_the_lowest_held_out_mean_is_kept():
    # dense keeps its runner-up 0.004, between the 0.002 and 0.008 its sweep tried: not at the edge
    t = sweep_table(RUNS)
    runs = _held([("dense-tuned", 1, 0.008, 2.2), ("dense-alt", 1, 0.004, 2.1)])
    c = confirmed(t, runs, [1])
    assert c["dense"]["lr"] == 0.004 and kept_at_edge(t, c) == {} and extend_points(t, c) == []
    # diloco16 keeps its pick 0.002, the smallest it tried: one point at half of it, its multiple of the
    # default's 0.004 in the name, at the picked outer lr
    runs = _held([("diloco16-tuned", 1, 0.002, 2.0), ("diloco16-alt", 1, 0.004, 2.3)])
    c = confirmed(t, runs, [1])
    assert kept_at_edge(t, c) == {"diloco16": "smallest"}
    assert extend_points(t, c) == [("diloco16-lrx0.25", "{<<: *diloco16, lr: 0.001, lr_min: 0.0001, outer_lr: 0.7}")]
    # once it ran every held-out seed, the lowest of the three is kept; a point beyond that lost ends the edge
    won = _held([("diloco16-tuned", 1, 0.002, 2.0), ("diloco16-alt", 1, 0.004, 2.3), ("diloco16-lrx0.25", 1, 0.001,
                                                                                         1.9)])
    c = confirmed(t, won, [1])
    assert c["diloco16"]["beyond"] == {0.001: pytest.approx(1.9)} and c["diloco16"]["lr"] == 0.001
    assert extend_points(t, c)[0][0] == "diloco16-lrx0.125"
    lost = won.assign(final_val_loss=[2.0, 2.3, 2.4])
    c = confirmed(t, lost, [1])
    assert c["diloco16"]["lr"] == 0.002 and kept_at_edge(t, c) == {}
    assert "lr x0.5 2.000, x1 2.300, x0.25 2.400 -> x0.5" in "\n".join(tuned_block(t, c, [1]))
    # a point beyond that has not run every held-out seed is not counted yet
    part = _held([("diloco16-tuned", 1, 0.002, 2.0), ("diloco16-tuned", 2, 0.002, 2.0), ("diloco16-alt", 1, 0.004, 2.3),
                  ("diloco16-alt", 2, 0.004, 2.3), ("diloco16-lrx0.25", 1, 0.001, 1.0)])
    assert confirmed(t, part, [1, 2])["diloco16"]["beyond"] == {}


def test_relocate_moves_aside_a_tuned_run_that_was_a_copy_and_copies_in_the_point_beyond(tmp_path):
    # round 1 kept dense-alt (0.002: its runs were copied into the tuned grid); round 2's point beyond (0.001)
    # ended lower: the tuned copies go aside (dense-alt keeps its own), dense-lrx0.25's runs are copied in
    config = {"seeds": [0], "train_defaults": {"steps": 4},
              "methods": {"dense": {"lr": 0.004}, "dense-tuned": {"lr": 0.001}, "dense-alt": {"lr": 0.002},
                          "dense-pick": {"lr": 0.004}, "dense-lrx0.25": {"lr": 0.001}},
              "experiments": {"e9_lmc_confirm": {"base": {}, "seeds": [1],
                                                 "grid": {"method": ["dense-alt", "dense-pick", "dense-lrx0.25"]}},
                              "e9_lmc": {"base": {}, "seeds": [0, 1], "grid": {"method": ["dense-tuned"]}}}}
    runs = tmp_path / "runs"
    _run(runs / "e9_lmc" / "method~dense-tuned" / "seed~1", {"steps": 4, "lr": 0.002, "name": "dense-tuned",
                                                           "seed": 1}, 2.0)
    _run(runs / "e9_lmc_confirm" / "method~dense-alt" / "seed~1", {"steps": 4, "lr": 0.002, "name": "dense-alt",
                                                                 "seed": 1}, 2.0)
    _run(runs / "e9_lmc_confirm" / "method~dense-lrx0.25" / "seed~1", {"steps": 4, "lr": 0.001,
                                                                     "name": "dense-lrx0.25", "seed": 1}, 1.9)
    done = relocate(runs, config, ["dense"], [1])
    assert done[0].startswith("superseded") and done[1].startswith("copied"), done
    tuned = runs / "e9_lmc" / "method~dense-tuned" / "seed~1"
    assert json.loads((tuned / "summary.json").read_text())["final_val_loss"] == 1.9
    assert json.loads((tuned / "config.json").read_text())["config"]["name"] == "dense-tuned"
    assert len(list((runs / ".lmc_superseded").rglob("summary.json"))) == 1
    assert (runs / "e9_lmc_confirm" / "method~dense-alt" / "seed~1" / "summary.json").is_file()
    assert relocate(runs, config, ["dense"], [1]) == []
