"""E5: the two dynamic batch rules trained side by side (lowbw.report.dynbatch), the profiles that train them, and
the figure whose small-batch curves must be told apart (one panel per optimiser, schemes styled alike across
panels, every preset named at its lines' end)."""

from __future__ import annotations

import math

import pandas as pd
import pytest

COMMON = {"optimizer": "sgd", "lr": 0.1, "batch_size": 128, "dynamic_batch_max": 1024,
          "dynamic_batch_metric": "val_loss", "workers": 4}


def _runs(acc: dict[str, list[float]], rules=("text", "literal"), **over):
    """Runs and metrics of the two rules: loss 2.3 at step 0, 0.32 at the first evaluation (E0/Ee = 7.2: the
    corrected rule asks for 4x, the draft's formula for 2^6 = 64x), 0.2 later (11.5: 8x from the corrected rule)."""
    runs, mets = [], []
    batches = {"text": (512, 1024), "literal": (1024, 1024)}
    for rule in rules:
        for seed, a in enumerate(acc[rule]):
            run = f"method~{rule}/seed~{seed}"
            runs.append({"run": run, "seed": seed, "dynamic_batch": rule, "final_test_acc": a, **COMMON, **over})
            b1, b2 = batches[rule]
            for step, epoch, loss, b in ((0, 0.0, 2.3, 128), (47, 0.25, 0.32, b1), (53, 0.5, 0.2, b2),
                                         (100 if rule == "text" else 90, 4.0, 0.15, b2)):
                mets.append({"run": run, "step": step, "epoch": epoch, "val_loss": loss, "val_acc": 1 - loss,
                             "batch_size": b})
    return pd.DataFrame(runs), pd.DataFrame(mets)


def _per_run(runs, ttt):
    return pd.DataFrame({"run": runs["run"], "ttt_s": [ttt[r] for r in runs["dynamic_batch"]]})


def test_the_draft_formula_jumps_to_the_cap_and_the_words_follow_the_numbers():
    from lowbw.report.dynbatch import numbers, schedules

    runs, mets = _runs({"text": [0.94, 0.95, 0.96], "literal": [0.90, 0.91, 0.92]})
    sch = schedules(runs, mets, _per_run(runs, {"text": 200.0, "literal": math.nan}))
    lit = sch[sch["rule"] == "literal"].iloc[0]
    assert lit["first_ratio"] == pytest.approx(2.3 / 0.32) and lit["first_asked"] == 64
    assert lit["cap_epoch"] == 0.25 and lit["steps"] == 90
    out = numbers(sch)
    assert out["EFiveRuleTextFirstAsked"] == "4" and out["EFiveRuleLiteralFirstAsked"] == "64"
    assert out["EFiveRuleLiteralFirstBatch"] == "1{,}024" and out["EFiveRuleTextFirstBatch"] == "512"
    assert out["EFiveRuleLiteralCapWhen"] == "after 0.25 epochs, at its first evaluation"
    assert out["EFiveRuleTextCapWhen"] == "after 0.50 epochs"
    assert out["EFiveRuleCapOrder"] == "sooner than"
    assert out["EFiveRuleAccDir"] == "lower" and out["EFiveRuleAccDiff"] in ("4", "4.0")
    assert out["EFiveRuleAccSig"] == "significant"
    assert out["EFiveRuleLiteralSteps"] == "90" and out["EFiveRuleTextSteps"] == "100"
    assert out["EFiveRuleTextReach"] == "gets there after 3.3 min"
    assert out["EFiveRuleLiteralReach"] == "never gets there"
    # the other way round, the sentence's words turn with the numbers
    runs, mets = _runs({"text": [0.90, 0.91, 0.92], "literal": [0.94, 0.95, 0.96]})
    assert numbers(schedules(runs, mets, _per_run(runs, {"text": 1.0, "literal": 1.0})))["EFiveRuleAccDir"] == "higher"


def test_every_macro_is_catalogued():
    from lowbw.report.catalog import check_numbers
    from lowbw.report.dynbatch import numbers, schedules

    runs, mets = _runs({"text": [0.94, 0.95], "literal": [0.90, 0.91]})
    check_numbers("e5", numbers(schedules(runs, mets, _per_run(runs, {"text": 1.0, "literal": 2.0}))))


def test_no_comparison_without_both_rules_and_one_line_error_for_two_pairs():
    from lowbw.report.dynbatch import numbers, schedules

    runs, mets = _runs({"text": [0.94, 0.95]}, rules=("text",))
    assert numbers(schedules(runs, mets, _per_run(runs, {"text": 1.0}))) == {}
    sgd, msgd = _runs({"text": [0.94], "literal": [0.9]})
    adam, madam = _runs({"text": [0.94], "literal": [0.9]}, optimizer="adam", lr=0.001)
    adam["run"] = "adam/" + adam["run"]
    madam["run"] = "adam/" + madam["run"]
    runs, mets = pd.concat([sgd, adam], ignore_index=True), pd.concat([msgd, madam], ignore_index=True)
    with pytest.raises(ValueError, match="both dynamic batch rules at 2 settings"):
        schedules(runs, mets, pd.DataFrame(columns=["run", "ttt_s"]))


@pytest.mark.parametrize("profile", ["config/config.yaml", "config/medium.yaml", "config/full.yaml"])
def test_each_profile_trains_both_rules_at_the_same_seeds(profile):
    import yaml

    from lowbw.workflow.grid import expand, run_config

    with open(profile) as f:
        cfg = {**yaml.safe_load(f), "clock_calibration": None}  # the presets, not the clock's costs
    seeds = {}  # the settings the rules share -> rule -> seeds
    for point in expand(cfg["experiments"]["e5_batch"], cfg["seeds"]):
        rc = run_config(cfg, "e5_batch", point)
        if rc.get("dynamic_batch", "off") != "off":
            key = tuple(rc.get(k) for k in ("optimizer", "lr", "batch_size", "dynamic_batch_max"))
            seeds.setdefault(key, {}).setdefault(rc["dynamic_batch"], set()).add(point["seed"])
    pairs = [rules for rules in seeds.values() if set(rules) == {"text", "literal"}]
    assert len(pairs) == 1 and pairs[0]["text"] == pairs[0]["literal"], seeds


def _curves():
    rows = []
    schemes = {"b128": "constant batch 128", "dyn": "dynamic batch: corrected rule",
               "dynlit": "dynamic batch: the draft's formula", "adam128": "constant batch 128",
               "adamdyn": "dynamic batch: corrected rule"}
    for g, sch in schemes.items():
        for seed in (0, 1):
            for t, a in ((120.0, 0.88), (200.0, 0.91), (300.0 + len(g), 0.93)):
                rows.append({"group": g, "seed": seed, "time_s": t, "test_acc": a + 0.001 * seed,
                             "panel": "adam" if g.startswith("adam") else "sgd", "scheme": sch})
    return pd.DataFrame(rows), schemes


def test_figure_panels_per_optimizer_with_named_line_ends():
    from matplotlib.colors import to_hex

    from lowbw.report.figures import accuracy_panels

    curves, schemes = _curves()
    fig = accuracy_panels(curves, "virtual time (s)", "E5", {"sgd": "SGD with momentum", "adam": "Adam"})
    sgd, adam = fig.axes
    assert (sgd.get_title(), adam.get_title()) == ("SGD with momentum", "Adam")
    for ax, groups in ((sgd, {"b128", "dyn", "dynlit"}), (adam, {"adam128", "adamdyn"})):
        assert {t.get_text() for t in ax.texts} == groups
    # a scheme looks the same in both panels; different schemes differ in colour and in dash
    style = {}
    for ax in (sgd, adam):
        for line in ax.get_lines():
            key = (to_hex(line.get_color()), str(line.get_linestyle()), line.get_marker())
            assert style.setdefault(line.get_label(), key) == key
    assert len(set(style.values())) == len(set(schemes.values())) == 3
    assert len({c for c, _, _ in style.values()}) == 3 and len({d for _, d, _ in style.values()}) == 3
    labels = [t.get_text() for leg in fig.legends for t in leg.get_texts()]
    assert sorted(labels) == sorted(set(schemes.values()))
    # no two end labels overlap (their text: the leaders of labels moved off a line's end meet at that end)
    from matplotlib.text import Text

    fig.canvas.draw()
    boxes = [Text.get_window_extent(t) for t in sgd.texts]
    assert not any(a.overlaps(b) for i, a in enumerate(boxes) for b in boxes[i + 1:])


def test_e5_figure_names_its_schemes_from_the_config_baseline_first():
    from lowbw.report.experiment import Stats
    from lowbw.report.schemes import E5, e5_scheme

    assert e5_scheme(pd.Series({"dynamic_batch": "off", "batch_size": 1024})) == "constant batch 1024"
    assert e5_scheme(pd.Series({"dynamic_batch": "literal", "batch_size": 128})) == "dynamic batch: the draft's formula"
    curves, _ = _curves()
    curves.loc[curves["group"] == "b128", "scheme"] = "constant batch 1024"  # b1024's role: sorted after 128
    curves = pd.concat([curves[curves["group"] == "b128"].assign(group="b", scheme="constant batch 128"), curves])
    fig = E5.figure(Stats({"curves": curves}, {"focus_mbit": 10.0}))
    assert [ax.get_title() for ax in fig.axes] == ["SGD with momentum", "Adam"]
    labels = [t.get_text() for leg in fig.legends for t in leg.get_texts()]
    assert labels == ["constant batch 128", "constant batch 1024", "dynamic batch: corrected rule",
                      "dynamic batch: the draft's formula"]
