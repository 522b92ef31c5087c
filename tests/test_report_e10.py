"""E10's report: slow-downs from the runs' own virtual clocks against the same method and seed on the even
network; macro names from the catalogue; the network described from each run's config."""

from __future__ import annotations

import math

import pytest

from lowbw.report.catalog import check_numbers


def _run(root, net, method, seed, step_s, final_acc=0.9, **cfg):
    """A completed run whose every step takes ``step_s`` virtual seconds; evaluations at steps 10 (0.5 test
    accuracy) and 20 (0.9)."""
    from lowbw.runio import append_jsonl, atomic_write_json

    d = root / f"e10_{net}" / f"method~{method}" / f"seed~{seed}"
    d.mkdir(parents=True)
    atomic_write_json(d / "config.json", {"config": {"dataset": "mnist", "workers": 4, "seed": seed,
                                                     "bandwidth_mbit": 10.0, **cfg}})
    for step, acc in ((10, 0.5), (20, 0.9)):
        append_jsonl(d / "metrics.jsonl", {"step": step, "test_acc": acc, "t_virtual": step * step_s,
                                           "t_virtual_compute": 0.0, "t_virtual_compress": 0.0,
                                           "comm_alpha_terms": 0.0, "comm_beta_bytes": 0.0})
    atomic_write_json(d / "summary.json", {"complete": True, "final_test_acc": final_acc, "step": 20,
                                           "t_virtual": 20 * step_s})


def test_slowdowns_numbers_and_table(tmp_path):
    from lowbw.report.build import Context
    from lowbw.report.e10 import E10

    for seed in (0, 1):
        _run(tmp_path, "even", "dense", seed, 1.0)
        _run(tmp_path, "even", "local16", seed, 0.2 + 0.1 * seed)
        _run(tmp_path, "oneslow", "dense", seed, 10.0, worker_bandwidth_mbit=[10, 10, 10, 1])
        _run(tmp_path, "oneslow", "local16", seed, 2 * (0.2 + 0.1 * seed), worker_bandwidth_mbit=[10, 10, 10, 1])
        _run(tmp_path, "straggler", "dense", seed, 1.1, worker_speeds=[1, 1, 1, 3])
    st = E10.stats(Context({"targets": {"mnist": 0.9}}, tmp_path, tmp_path / "out"))
    assert st.meta["target_acc"] == 0.85  # capped: E10's runs are short
    sd = st.tables["slowdown"].set_index(["network", "method"])
    assert sd.loc[("oneslow", "dense"), "ttt_ratio_mean"] == pytest.approx(10.0)
    assert sd.loc[("oneslow", "local16"), "ttt_ratio_mean"] == pytest.approx(2.0)
    assert sd.loc[("oneslow", "local16"), "ttt_ratio_std"] == pytest.approx(0.0, abs=1e-12)
    assert sd.loc[("even", "local16"), "ttt_mean_s"] == pytest.approx(20 * 0.25)
    assert sd.loc[("oneslow", "dense"), "links"] == "1 of 4 at 1 Mbit/s, the rest 10"
    assert sd.loc[("straggler", "dense"), "links"] == "10 Mbit/s, one worker 3x compute"
    n = E10.numbers(st)
    check_numbers("e10", n)
    assert (n["ETenOneSlowBest"], n["ETenOneSlowBestRatio"], n["ETenOneSlowWorst"]) == ("local16", "2", "dense")
    assert n["ETenOneSlowDenseRatio"] == "10" and n["ETenStragglerDenseRatio"] == "1.10"
    assert n["ETenEvenFastest"] == "local16" and n["ETenSeeds"] == "2"
    assert "ETenAsymBest" not in n  # a network the profile did not run writes nothing
    tab = E10.table(st)
    assert r"$\times$10" in tab and "tab:e10" in tab
    assert E10.figure(st) is not None


def test_a_method_that_misses_the_target_is_left_out(tmp_path):
    from lowbw.report.build import Context
    from lowbw.report.e10 import E10

    _run(tmp_path, "even", "dense", 0, 1.0)
    _run(tmp_path, "oneslow", "dense", 0, 10.0, worker_bandwidth_mbit=[10, 10, 10, 1])
    _run(tmp_path, "even", "slowpoke", 0, 1.0)
    # its evaluations never reach the target: overwrite the metrics with low accuracies
    from lowbw.runio import atomic_write_json

    d = tmp_path / "e10_oneslow" / "method~slowpoke" / "seed~0"
    _run(tmp_path, "oneslow", "slowpoke", 0, 5.0, worker_bandwidth_mbit=[10, 10, 10, 1])
    text = (d / "metrics.jsonl").read_text().replace('"test_acc": 0.9', '"test_acc": 0.6')
    (d / "metrics.jsonl").write_text(text)
    summ = __import__("json").loads((d / "summary.json").read_text())
    summ.pop("metrics_sha256", None)
    atomic_write_json(d / "summary.json", summ)
    st = E10.stats(Context({"targets": {"mnist": 0.9}}, tmp_path, tmp_path / "out"))
    sd = st.tables["slowdown"].set_index(["network", "method"])
    assert math.isnan(sd.loc[("oneslow", "slowpoke"), "ttt_ratio_mean"])
    assert sd.loc[("oneslow", "slowpoke"), "end_ratio_mean"] == pytest.approx(5.0)
    n = E10.numbers(st)
    assert n["ETenOneSlowBest"] == n["ETenOneSlowWorst"] == "dense"
