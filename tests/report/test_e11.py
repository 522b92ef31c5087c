"""E11's report: leave-one-setting-out over small synthetic runs. The held-out setting's own runs never reach the
advisor's efficiency table; regret and rank correlation follow their definitions; a setting whose baseline
reached no target is skipped; no runs at all is "not run"."""

from __future__ import annotations

import math

import pytest

from lowbw.report.catalog import MACROS, check_numbers

W = 4  # workers


def _run(root, exp, method, seed, step_s, reach_step, cfg=None, compute_s=0.01):
    """A completed MLP/MNIST run on its own 10 Mbit/s clock: 100 steps of ``step_s`` virtual seconds, target 0.9
    reached at ``reach_step`` (None: never)."""
    from lowbw.runs.io import append_jsonl, atomic_write_json

    d = root / exp / f"method~{method}" / f"seed~{seed}"
    d.mkdir(parents=True)
    atomic_write_json(d / "config.json", {"config": {
        "dataset": "mnist", "model": "mlp", "workers": W, "seed": seed, "bandwidth_mbit": 10.0, "latency_ms": 0.5,
        "batch_size": 64, "targets": [0.9], "sync": "sync", "compressor": "none", **(cfg or {})}})
    for step in (50, 100):
        append_jsonl(d / "metrics.jsonl", {"step": step, "test_acc": 0.5, "t_virtual": step * step_s,
                                           "t_virtual_compute": step * compute_s, "t_virtual_compress": 0.0,
                                           "comm_alpha_terms": 0.0, "comm_beta_bytes": 0.0})
    ttt = None if reach_step is None else {"step": reach_step, "samples": reach_step * 64, "epoch": 1.0,
                                           "t_virtual": reach_step * step_s, "t_wall": 1.0}
    atomic_write_json(d / "summary.json", {"complete": True, "final_test_acc": 0.9, "step": 100,
                                           "t_virtual": 100 * step_s, "t_virtual_compute": 100 * compute_s,
                                           "time_to_target": {"0.9": ttt}})


DILOCO = {"sync": "diloco", "world_period": 16}
TOPK = {"compressor": "topk", "compressor_args": {"ratio": 0.01}, "error_feedback": "on"}


def _ctx(tmp_path):
    from lowbw.report.build import Context

    runs = tmp_path / "runs"
    ours = {d.name: {} for d in runs.glob("e*_*")} if runs.is_dir() else {}  # the profile runs what is there
    return Context({"report": {"bandwidths_mbit": [10], "latency_ms": 0.5}, "experiments": ours}, runs,
                   tmp_path / "out")


def _two_networks(tmp_path, diloco_reach_even=60, topk_step_even=0.3):
    """e10_even and e10_oneslow: dense slow per step, diloco16 fast per step but more steps, topk1 never on
    oneslow."""
    r = tmp_path / "runs"
    slow = {"worker_bandwidth_mbit": [10, 10, 10, 1]}
    for seed in (0, 1):
        _run(r, "e10_even", "dense", seed, 1.0, 40)
        _run(r, "e10_even", "diloco16", seed, 0.1, diloco_reach_even, DILOCO)
        _run(r, "e10_even", "topk1", seed, topk_step_even, 50, TOPK)
        _run(r, "e10_oneslow", "dense", seed, 8.0, 40, slow)
        _run(r, "e10_oneslow", "diloco16", seed, 0.6, 60, {**DILOCO, **slow})
        _run(r, "e10_oneslow", "topk1", seed, 2.0, None, {**TOPK, **slow})


def test_spearman_and_analytic_form():
    from lowbw.net.costlinks import WorkerLink
    from lowbw.report.e11 import analytic_step, spearman

    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert spearman([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)
    assert math.isnan(spearman([1, 2], [1, 2]))
    links = tuple(WorkerLink(1e7, 1e7, 0.001, 0.001) for _ in range(4))
    # 1e6 parameters = 32e6 bits; ring: 2 * 3/4 * 32e6 / 1e7 = 4.8 s, plus 2 * 3 * 1 ms
    assert analytic_step(0.5, 10**6, links) == pytest.approx(0.5 + 4.8 + 0.006)
    assert analytic_step(0.5, 10**6, links, period=16) == pytest.approx(0.5 + 4.806 / 16)


def test_rank_correlation_needs_six_methods():
    """Spearman's rho of the advisor's order against the measured times only over at least
    MIN_CORRELATION_METHODS methods that reached the target (with three, rho = 1 has probability 1/6 by chance)."""
    from lowbw.report.e11 import rank_correlation
    from lowbw.report.stats import MIN_CORRELATION_METHODS

    order = [f"m{i}" for i in range(MIN_CORRELATION_METHODS)]
    times = {m: 10.0 * (i + 1) for i, m in enumerate(order)}
    assert rank_correlation(order, times) == pytest.approx(1.0)
    times["m0"], times["m1"] = 20.0, 10.0  # one swap of six: 1 - 6 * 2 / (6 * 35)
    assert rank_correlation(order, times) == pytest.approx(1 - 12 / 210)
    five = dict(list(times.items())[:-1])
    assert math.isnan(rank_correlation(order, five))


def test_leave_one_setting_out(tmp_path, monkeypatch):
    from lowbw.advise import efficiency
    from lowbw.report.e11 import E11, stats
    from lowbw.report.experiment import Stats

    _two_networks(tmp_path)
    seen = []
    real = efficiency.rows_from_runs
    monkeypatch.setattr(efficiency, "rows_from_runs",
                        lambda runs: seen.append(set(runs["experiment"])) or real(runs))
    st = stats(_ctx(tmp_path), store=tmp_path / "nostore")
    t = st.tables["settings"].set_index("experiment")
    assert set(t.index) == {"e10_even", "e10_oneslow"}
    # each setting's table was built without its own runs (and the strict variant without the workload's)
    assert {"e10_oneslow"} in seen and {"e10_even"} in seen
    assert set() in seen or any(not s for s in seen)
    # on one slow link (1 Mbit/s) the advisor predicts top-k's few bytes fastest (its steps ratio 50/40 learnt on
    # even), but top-k never reached the target there: the pick that the issue forbids, counted as such
    o = t.loc["e10_oneslow"]
    assert (o["pick"], bool(o["pick_reached"]), o["best"]) == ("topk1", False, "diloco16")
    assert o["regret"] == math.inf
    # on even it learnt top-k never reaches (oneslow's runs) and picks diloco16 (60/40 steps at 1/16 of the
    # bytes), the fastest measured there (6 s against top-k's 15 s and dense's 40 s): no regret
    e = t.loc["e10_even"]
    assert (e["pick"], e["best"], e["regret"]) == ("diloco16", "diloco16", 0.0)
    # its order diloco16, dense, topk1 (never, last) against measured 6, 40, 15 s: three methods reached the
    # target, fewer than the six a rank correlation needs (stats.MIN_CORRELATION_METHODS): no rho
    assert e["rho_methods"] == 3 and math.isnan(e["rho"])
    m = st.tables["methods"].query("experiment == 'e10_oneslow'").set_index("method")
    assert m.loc["diloco16", "measured_ttt_s"] == pytest.approx(36.0)
    assert not bool(m.loc["topk1", "reached"]) and math.isnan(m.loc["topk1", "measured_ttt_s"])
    # the step comparison: dense and diloco16 rows, analytic = ours at the slowest link
    sp = st.tables["steps"].query("experiment == 'e10_oneslow'").set_index("method")
    assert set(sp.index) == {"dense", "diloco16"}
    assert sp.loc["dense", "measured_step_s"] == pytest.approx(8.0)
    n = E11.numbers(st)
    check_numbers("e11", n)
    # no setting has six methods at the target: no correlation is printed, and the prose's macro says why
    assert set(n) == {k for k in MACROS if k.startswith("EEleven")} - {"EElevenNotRun", "EElevenRhoMedian",
                                                                        "EElevenRhoSettings"}
    assert (n["EElevenRhoNone"], n["EElevenRhoMinMethods"]) == ("3", "6")
    assert r"$\rho$" not in E11.table(st).split("caption")[0] and "none is quoted over fewer than 6" in E11.table(st)
    # where one setting has six methods at the target, its rho is quoted (and the why-not sentence is not)
    t6 = st.tables["settings"].copy()
    t6.loc[t6.index[0], ["rho", "rho_methods"]] = (0.8, 6)
    st6 = Stats({**st.tables, "settings": t6}, st.meta)
    n6 = E11.numbers(st6)
    assert (n6["EElevenRhoMedian"], n6["EElevenRhoSettings"]) == ("0.80", "1") and "EElevenRhoNone" not in n6
    assert r"$\rho$ \\" in E11.table(st6) or r"$\rho$ &" in E11.table(st6)
    assert n["EElevenSettings"] == "2" and n["EElevenSkipped"] == "0"
    assert "MNIST" in n["EElevenWorkloads"]
    tab = E11.table(st)
    assert "tab:e11" in tab and r"$\ge$" in tab
    assert len(E11.figure(st).axes) == 2


def test_only_the_profiles_experiments_are_read_from_runs(tmp_path):
    """A campaign of another profile left in runs/ (here e10_stray) is not this build's evidence: E11 judges the
    profile's experiments only, as a fresh clone's build of the same profile would."""
    from lowbw.report.build import Context
    from lowbw.report.e11 import stats

    _two_networks(tmp_path)
    for seed in (0, 1):
        _run(tmp_path / "runs", "e10_stray", "dense", seed, 1.0, 40)
        _run(tmp_path / "runs", "e10_stray", "diloco16", seed, 0.1, 60, DILOCO)
    every = stats(_ctx(tmp_path), store=tmp_path / "nostore")
    assert set(every.tables["settings"]["experiment"]) == {"e10_even", "e10_oneslow", "e10_stray"}
    ours = {"e10_even": {}, "e10_oneslow": {}}
    ctx = Context({"report": {"bandwidths_mbit": [10], "latency_ms": 0.5}, "experiments": ours},
                  tmp_path / "runs", tmp_path / "out")
    st = stats(ctx, store=tmp_path / "nostore")
    assert set(st.tables["settings"]["experiment"]) == {"e10_even", "e10_oneslow"}
    assert "e10_stray" not in set(st.tables["methods"]["experiment"])


def test_a_wrong_pick_is_a_regret_and_a_failure(tmp_path):
    """On even, top-k measures faster (5 s) than the advisor's pick diloco16 (100 steps x 0.1 s = 10 s): regret
    10 / 5 - 1 = 100 %, listed where it fails."""
    from lowbw.report.e11 import E11, stats

    _two_networks(tmp_path, diloco_reach_even=100, topk_step_even=0.1)
    st = stats(_ctx(tmp_path), store=tmp_path / "nostore")
    e = st.tables["settings"].set_index("experiment").loc["e10_even"]
    assert (e["pick"], e["best"]) == ("diloco16", "topk1")
    assert e["regret"] == pytest.approx(1.0)
    n = E11.numbers(st)
    assert n["EElevenRegretWorst"] == "never" and n["EElevenNeverReached"] == "1"
    assert "e10\\_even" in n["EElevenFailures"] and "e10\\_oneslow" in n["EElevenFailures"]
    # a regret macro carries its unit, so that the prose never prints "never %"
    assert "regret 100\\,\\%" in n["EElevenFailures"] and "never\\," not in n["EElevenFailures"]
    assert n["EElevenRegretMedian"] == "never" and n["EElevenStrictRegretWorst"] == "never"
    assert n["EElevenVerdict"] == ("misses all three targets: the median-regret target, the worst-regret target "
                                   "and the target of never picking a method that missed the target")


def test_verdict_says_which_targets_are_met_and_which_missed():
    from lowbw.report.e11 import _pct_unit, verdict

    assert verdict((True, True, True)) == "meets all three targets"
    assert verdict((True, False, False)) == ("meets the median-regret target but misses the worst-regret target "
                                             "and the target of never picking a method that missed the target")
    assert verdict((True, True, False)) == ("meets the median-regret target and the worst-regret target but "
                                            "misses the target of never picking a method that missed the target")
    assert _pct_unit(14.11) == "1{,}411\\,\\%" and _pct_unit(math.inf) == "never"


def test_table_fits_the_text_width_and_never_is_no_bar(tmp_path):
    """The settings table has no workload column (the experiment fixes it) and abbreviates the confidence, so
    that it fits a two-column paper's table*; the figure draws no bar for a pick that missed the target."""
    from lowbw.report.e11 import E11, stats

    _two_networks(tmp_path)
    st = stats(_ctx(tmp_path), store=tmp_path / "nostore")
    tab = E11.table(st).split("tab:e11-walltime")[0]
    header = next(line for line in tab.splitlines() if line.startswith("Exp."))
    assert "Workload" not in header and header.count("&") == 8  # no rho column: no setting has six methods
    assert "(extrapolated)" not in tab and "(measured)" not in tab
    assert "meas.: measured" in tab and "extr.: extrapolated" in tab  # the caption explains the abbreviations
    fig = E11.figure(st)
    left = fig.axes[0]
    order = list(st.tables["settings"]["experiment"])
    widths = [p.get_width() for p in left.patches]
    assert widths[order.index("e10_oneslow")] == 0  # never: no length, a word
    assert "never" in [t.get_text().strip() for t in left.texts]
    assert left.get_xscale() == "symlog"
    assert min(t.get_fontsize() for t in left.get_yticklabels()) >= 6


def test_no_runs_is_not_run_and_no_target_is_skipped(tmp_path, monkeypatch):
    from lowbw.report.build import run_experiment
    from lowbw.report.e11 import E11, stats

    monkeypatch.setattr("lowbw.workflow.store.DEFAULT_STORE", tmp_path / "nostore")  # the repository's GPU store aside
    (tmp_path / "runs").mkdir()
    assert stats(_ctx(tmp_path), store=tmp_path / "nostore") is None
    sec = run_experiment(E11, _ctx(tmp_path))
    assert sec.stats is None and set(sec.numbers) == {"EElevenNotRun"}
    _run(tmp_path / "runs", "e10_even", "dense", 0, 1.0, None)
    _run(tmp_path / "runs", "e10_even", "diloco16", 0, 0.1, 60, DILOCO)
    assert stats(_ctx(tmp_path), store=tmp_path / "nostore") is None  # dense never reached: nothing to judge


def test_a_method_measured_only_in_the_held_out_setting_is_named_not_ranked(tmp_path):
    """randk1 ran only on even: held out, nothing is left to predict its steps from, so it is not ranked (it
    would rest on bytes alone) but named; no held-out setting ranks a method measured nowhere else."""
    from lowbw.report.e11 import stats

    _two_networks(tmp_path)
    for seed in (0, 1):
        _run(tmp_path / "runs", "e10_even", "randk1", seed, 0.05, 45,
             {"compressor": "randomk", "compressor_args": {"ratio": 0.01}, "error_feedback": "on"})
    st = stats(_ctx(tmp_path), store=tmp_path / "nostore")
    e = st.tables["settings"].set_index("experiment").loc["e10_even"]
    assert "randk1 (measured nowhere else)" in e["left_out"]
    assert "randk1" not in set(st.tables["methods"]["method"])
    assert (st.tables["methods"]["confidence"] != "bytes only").all()
