"""E10's report: slow-downs from the runs' own virtual clocks against the same method and seed on the even
network; macro names from the catalogue; the network described from each run's config."""

from __future__ import annotations

import math

import pytest

from lowbw.report.catalog import check_numbers


def _run(root, net, method, seed, step_s, final_acc=0.9, **cfg):
    """A completed run whose every step takes ``step_s`` virtual seconds; evaluations at steps 10 (0.5 test
    accuracy) and 20 (0.9)."""
    from lowbw.runs.io import append_jsonl, atomic_write_json

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
    assert st.meta["target"] == 0.85 and st.meta["metric"] == "test_acc"  # capped: E10's runs are short
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
    fig = E10.figure(st)
    # one panel per network other than even, each a bar per method at its slow-down (the values above)
    from lowbw.report.e10 import TITLES

    assert [ax.get_title() for ax in fig.axes] == [TITLES.get(n, n) for n in ("oneslow", "straggler")]
    widths = {ax.get_title(): [round(p.get_width(), 6) for p in ax.patches] for ax in fig.axes}
    order = st.meta["methods"]
    assert widths[TITLES.get("oneslow", "oneslow")] == [{"dense": 10.0, "local16": 2.0}[m] for m in order]
    assert widths[TITLES.get("straggler", "straggler")] == [{"dense": 1.1, "local16": 0.0}[m] for m in order]


def test_a_method_that_misses_the_target_is_left_out(tmp_path):
    from lowbw.report.build import Context
    from lowbw.report.e10 import E10

    _run(tmp_path, "even", "dense", 0, 1.0)
    _run(tmp_path, "oneslow", "dense", 0, 10.0, worker_bandwidth_mbit=[10, 10, 10, 1])
    _run(tmp_path, "even", "slowpoke", 0, 1.0)
    # its evaluations never reach the target: overwrite the metrics with low accuracies
    from lowbw.runs.io import atomic_write_json

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


def test_the_collective_choice_and_the_testbed_check(tmp_path):
    """topk1auto against topk1: the collective its policy picks on each network (recomputed from the run's
    config at its logged virtual times), its whole-run and time-to-target ratios; and runs/bench/e10check.json's
    cells as a table and numbers labelled with the machine and date."""
    from lowbw.report.build import Context
    from lowbw.report.e10 import E10
    from lowbw.runs.io import atomic_write_json

    topk = {"model": "mlp", "compressor": "topk", "compressor_args": {"ratio": 0.01}, "error_feedback": "on"}
    auto = {**topk, "adaptive": "moo", "adaptive_c_low": 0.01, "adaptive_c_high": 0.01}
    slow = {"worker_bandwidth_mbit": [10, 10, 10, 1]}
    _run(tmp_path, "even", "topk1", 0, 1.0, **topk)
    _run(tmp_path, "even", "topk1auto", 0, 0.8, final_acc=0.88, **auto)
    _run(tmp_path, "oneslow", "topk1", 0, 6.0, **topk, **slow)
    _run(tmp_path, "oneslow", "topk1auto", 0, 3.0, final_acc=0.88, **auto, **slow)
    (tmp_path / "bench").mkdir()
    rows = [{"network": "even", "method": "dense", "rate_mbit": 100.0, "predicted_step_s": 0.28,
             "measured_step_s": 0.29, "err_step": 0.28 / 0.29 - 1, "predicted_comm_s": 0.27, "measured_comm_s": 0.28,
             "err_comm": 0.27 / 0.28 - 1},
            {"network": "oneslow", "method": "topk1", "rate_mbit": 100.0, "predicted_step_s": 0.12,
             "measured_step_s": 0.1, "err_step": 0.2, "predicted_comm_s": 0.1, "measured_comm_s": 0.08,
             "err_comm": 0.25},
            {"network": "trace", "method": "local16", "rate_mbit": 100.0, "predicted_step_s": 0.03,
             "measured_step_s": 1.37, "err_step": 0.03 / 1.37 - 1, "predicted_comm_s": 0.02, "measured_comm_s": 1.36,
             "err_comm": 0.02 / 1.36 - 1, "stalls": [[16, 13.68]]}]
    atomic_write_json(tmp_path / "bench" / "e10check.json", {
        "provenance": {"date": "2026-11-24T05:00:00+00:00", "cpu": "AMD EPYC", "cores": 2, "commit": "abc"},
        "args": {"scale": 10.0, "steps": 20}, "warmup_steps": 10, "load_1min": [1.2, 2.5],
        "skipped": {"straggler": "no faults"}, "rows": rows})
    st = E10.stats(Context({"targets": {"mnist": 0.9}}, tmp_path, tmp_path / "out"))
    auto_t = st.tables["auto"]
    assert set(auto_t["network"]) == {"even", "oneslow"} and set(auto_t["collective"]) == {"artopk-ring"}
    assert len(auto_t) == 4  # two logged steps of each adaptive run
    n = E10.numbers(st)
    check_numbers("e10", n)
    assert n["ETenAutoChoice"] == "AR-Top-$k$ over a ring on every network"
    assert (n["ETenAutoMethod"], n["ETenAutoFixed"]) == ("topk1auto", "topk1")
    assert (n["ETenAutoAcc"], n["ETenAutoFixedAcc"]) == ("88", "90")
    assert (n["ETenAutoRunMin"], n["ETenAutoRunMax"]) == ("0.50", "0.80")
    assert n["ETenAutoTttList"] == "even 0.80, oneslow 0.50"
    assert st.tables["check"]["err_step"].tolist() == pytest.approx([0.28 / 0.29 - 1, 0.2, 0.03 / 1.37 - 1])
    assert (n["ETenCheckDate"], n["ETenCheckHost"], n["ETenCheckCells"]) == ("2026-11-24", "AMD EPYC, 2 cores", "3")
    # the stalled cell is listed, and the worst error is that of the cells without a stall
    assert n["ETenCheckStallCells"] == "1" and n["ETenCheckStalls"] == "trace local16 (step 16: 13.7 s)"
    assert (n["ETenCheckWorst"], n["ETenCheckWorstWhere"], n["ETenCheckWithinTen"]) == ("+20.0", "oneslow, topk1", "1")
    assert n["ETenCheckScale"] == "10" and n["ETenCheckSteps"] == "10--20" and n["ETenCheckLoad"] == "2.5"
    assert n["ETenCheckSkipped"] == "straggler" and n["ETenCheckDenseList"] == r"even -3.6\,\%"
    assert n["ETenCheckList"].startswith(r"even dense -3.4\,\%; oneslow topk1 +20.0\,\%")


def test_no_check_file_no_check_numbers(tmp_path):
    from lowbw.report.build import Context
    from lowbw.report.e10 import E10

    _run(tmp_path, "even", "dense", 0, 1.0)
    st = E10.stats(Context({"targets": {"mnist": 0.9}}, tmp_path, tmp_path / "out"))
    n = E10.numbers(st)
    assert "check" not in st.tables and "auto" not in st.tables
    assert not [k for k in n if k.startswith(("ETenCheck", "ETenAuto"))]


def _lm_run(root, net, method, seed, step_s, **cfg):
    """A completed language-model run whose every step takes ``step_s`` virtual seconds; validation loss 3.5,
    3.0 and 2.0 at steps 5, 10 and 20."""
    from lowbw.runs.io import append_jsonl, atomic_write_json

    d = root / f"e10_lm_{net}" / f"method~{method}" / f"seed~{seed}"
    d.mkdir(parents=True)
    atomic_write_json(d / "config.json", {"config": {"dataset": "shakespeare", "model": "gpt-mini", "workers": 4,
                                                     "seed": seed, "bandwidth_mbit": 10.0, **cfg}})
    for step, loss in ((5, 3.5), (10, 3.0), (20, 2.0)):
        append_jsonl(d / "metrics.jsonl", {"step": step, "val_loss": loss, "t_virtual": step * step_s,
                                           "t_virtual_compute": 0.0, "t_virtual_compress": 0.0,
                                           "comm_alpha_terms": 0.0, "comm_beta_bytes": 0.0})
    atomic_write_json(d / "summary.json", {"complete": True, "final_val_loss": 2.0, "step": 20,
                                           "t_virtual": 20 * step_s})


def test_loss_and_churn_networks_judged_at_a_wall_clock_budget(tmp_path):
    """The lossy and churning networks of issue 48 on the language model: described from the runs' configs, the
    loss at each network's budget (its shortest run) with every seed, the leader and its margin, what the loss
    cost dense (perplexity at the even budget; the same final loss after the same steps), and the testbed's
    measurement of TCP's loss recovery as numbers."""
    from lowbw.report.build import Context
    from lowbw.report.e10 import E10LM
    from lowbw.runs.io import atomic_write_json

    for seed in (0, 1):
        _lm_run(tmp_path, "even", "dense", seed, 1.0)
        _lm_run(tmp_path, "even", "diloco16", seed, 0.5)
        _lm_run(tmp_path, "even", "adiloco16", seed, 0.6)
        _lm_run(tmp_path, "loss10", "dense", seed, 1.5, link_loss=0.1)
        _lm_run(tmp_path, "loss10", "diloco16", seed, 0.6, link_loss=0.1)
        _lm_run(tmp_path, "churn", "adiloco16", seed, 0.7, faults=["churn:3@8:15"])
    (tmp_path / "bench").mkdir()
    rows = [{"emulator": "userspace", "loss": 0.0, "size": 65536, "extra_s": 0.0, "model_extra_s": 0.0,
             "busy": False},
            {"emulator": "userspace", "loss": 0.1, "size": 65536, "extra_s": 0.0123, "model_extra_s": 0.0104,
             "busy": False}]
    atomic_write_json(tmp_path / "bench" / "loss.json", {
        "provenance": {"date": "2026-11-27T23:10:00+00:00", "cpu": "AMD EPYC", "cpu_count": 2},
        "conditions": {"load1_max": 1.25, "busy": False},
        "setting": {"rate": "10mbit", "congestion_control": "bbr"}, "rows": rows})
    lt = [{"method": m, "loss": p, "comm_s": c, "clock_comm_s": k, "extra_s": e, "clock_extra_s": ke,
           "err_extra": None if e is None or not p else ke / e - 1, "final_val_loss": 3.1, "busy": False}
          for m, p, c, k, e, ke in (("dense", 0.0, 0.40, 0.36, 0.0, 0.0), ("dense", 0.1, 0.60, 0.50, 0.20, 0.14),
                                    ("diloco16", 0.0, 0.05, 0.04, 0.0, 0.0), ("diloco16", 0.1, 0.06, 0.05, 0.01, 0.01))]
    atomic_write_json(tmp_path / "bench" / "loss_train.json", {
        "provenance": {"date": "2026-11-28T01:10:00+00:00", "cpu": "AMD EPYC", "cpu_count": 2},
        "conditions": {"load1_max": 3.5, "busy": True},
        "setting": {"steps": 64, "model": "gpt-mini", "workers": 2}, "rows": lt})
    cfg = {"targets": {"shakespeare": "val_loss<=2.4"}}
    st = E10LM.stats(Context(cfg, tmp_path, tmp_path / "out"))
    sd = st.tables["slowdown"].set_index(["network", "method"])
    assert sd.loc[("loss10", "dense"), "links"] == "10 Mbit/s, 10% of packets lost on every uplink"
    assert sd.loc[("churn", "adiloco16"), "links"] == "10 Mbit/s, worker 3 away after step 8, back after 15"
    # budgets: the shortest run of each network; the last evaluation at or before it
    assert sd.loc[("even", "dense"), "budget_s"] == pytest.approx(10.0)
    assert sd.loc[("loss10", "dense"), "budget_s"] == pytest.approx(12.0)
    assert sd.loc[("loss10", "dense"), "at_budget_mean"] == pytest.approx(3.5)
    assert sd.loc[("loss10", "diloco16"), "at_budget_mean"] == pytest.approx(2.0)
    assert sd.loc[("loss10", "dense"), "at_even_budget_mean"] == pytest.approx(3.5)
    assert sd.loc[("loss10", "dense"), "ttt_ratio_mean"] == pytest.approx(1.5)
    n = E10LM.numbers(st)
    check_numbers("e10lm", n)
    assert (n["ETenLmLossTenLead"], n["ETenLmLossTenLeadValue"], n["ETenLmLossTenLeadNext"],
            n["ETenLmLossTenLeadBy"], n["ETenLmLossTenBudget"]) == ("diloco16", "2", "dense", "1.5", "12 s")
    assert n["ETenLmChurnBestRatio"] == "1.17" and "ETenLmChurnDenseRatio" not in n
    assert n["ETenLmLossTenDenseRatio"] == "1.50"
    # DiLoCo's final loss (2.0) at the end of its run against each method's first evaluation at it: on the even
    # network DiLoCo's 20 x 0.5 s over adiloco16's 20 x 0.6 s and dense's 20 x 1.0 s
    assert n["ETenLmEvenVsDiloco"] == r"adiloco16 0.833$\times$, dense 0.500$\times$"
    assert (n["ETenLmEvenVsDilocoBest"], n["ETenLmEvenVsDilocoBestRatio"]) == ("adiloco16", "0.833")
    assert n["ETenLmLossTenVsDiloco"] == r"dense 0.400$\times$" and "ETenLmChurnVsDiloco" not in n  # no DiLoCo there
    # at 20 s (dense's whole even run) dense with loss is at 3.0, without at 2.0: exp(1) - 1
    assert n["ETenLmLossTenDensePpl"] == "172" and n["ETenLmLossTenDenseFinalGap"] == "0"
    assert n["ETenLmBudgetLeads"].startswith("even: diloco16 (2 at 10 s, 1 ahead of ")
    assert "loss10: diloco16 (2 at 12 s, 1.5 ahead of dense)" in n["ETenLmBudgetLeads"]
    assert (n["ETenLmLossBenchDate"], n["ETenLmLossBenchHost"], n["ETenLmLossBenchCc"]) == (
        "2026-11-27", "AMD EPYC, 2 cores", "bbr")
    assert n["ETenLmLossBenchList"] == r"64\,KiB at 10\,\% dropped on the wire: 12 ms measured, 10 ms modelled"
    assert n["ETenLmLossBenchLoad"] == "1.2" and n["ETenLmLossBenchRate"] == r"10\,Mbit/s"
    # the training runs under loss: what loss added to comm per step, measured and charged
    assert n["ETenLmLossTrainList"] == (r"dense at 10\,\%: 200 ms measured, 140 ms charged; "
                                        r"diloco16 at 10\,\%: 10 ms measured, 10 ms charged")
    assert (n["ETenLmLossTrainWorst"], n["ETenLmLossTrainSameLoss"], n["ETenLmLossTrainLoad"]) == ("30", "the same",
                                                                                                  "3.5")
    assert n["ETenLmLossTrainSetting"] == "2 workers, gpt-mini, 64 steps"
    tab = E10LM.table(st)
    assert r"\emph{at the budget}" in tab and r"\textbf{2 $\pm$ 0}" in tab
    fig = E10LM.figure(st)
    from lowbw.report.e10 import TITLES

    assert [ax.get_title() for ax in fig.axes] == [TITLES[n] for n in ("loss10", "churn")]
    # with the measured cells stored, the model's column is this commit's model, not the one that measured
    from lowbw.net import tcploss

    cell = {"emulator": "userspace", "loss_method": "userspace", "congestion_control": "bbr", "rtt_model_s": 0.0012,
            "payload_bps": 9.56e6, "delay_s": 0.0, "conditions": {"busy": False}}
    atomic_write_json(tmp_path / "bench" / "loss.json", {
        "provenance": {"date": "2026-11-27T23:10:00+00:00", "cpu": "AMD EPYC", "cpu_count": 2},
        "conditions": {"load1_max": 1.25, "busy": False}, "setting": {"rate": "10mbit", "congestion_control": "bbr"},
        "rows": rows, "cells": [{**cell, "loss": 0.0, "times_s": {"65536": [0.05, 0.05]}},
                                {**cell, "loss": 0.1, "times_s": {"65536": [0.06, 0.08]}}]})
    t = E10LM.stats(Context(cfg, tmp_path, tmp_path / "out2")).tables["loss_bench"]
    lossy = t[t["loss"] == 0.1].iloc[0]
    assert lossy["model_extra_s"] == pytest.approx(tcploss.extra_time(65536, 0.0, 9.56e6, 0.1, 0.0012, "bbr"))
    assert lossy["extra_s"] == pytest.approx(0.02)
