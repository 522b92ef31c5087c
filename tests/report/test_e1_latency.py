"""E1's latency axis in the report: numbers, table, figure and CSV from a synthetic latency bench whose times
are known, and the paper's fallbacks when either E1 file is absent."""

from __future__ import annotations

import json
import math

import pytest

from lowbw.bench.collectives import calibration_key
from lowbw.net.calibrated import calibrated_time
from lowbw.report.build import Context, run_experiment
from lowbw.report.e1 import E1
from lowbw.report.e1_latency import crossing_pair, measured_crossover
from lowbw.report.latex import fmt_num

SIZES_MB = [0.004, 0.016, 0.064, 0.256, 1.0]
ERR = {"ring": 0.03, "tree": -0.05, "ps": 0.02, "butterfly": 0.08}


def _cal(alpha: float, rate_bps: float) -> dict:
    fit = {"alpha_s": alpha, "bandwidth_bps": 0.95 * rate_bps, "burst_bytes": 15_000.0}
    return {"fit": fit, "fit_duplex": dict(fit), "nominal_rate_bps": rate_bps, "handshake_s": alpha,
            "shaper_burst_bytes": 15_000.0, "gamma_s_per_byte": 0.0}


def _latency_bench(delays=(0, 20), n=3, rate=10) -> dict:
    rows, cal = [], {}
    for d in delays:
        c = _cal(1e-4 + d / 1e3, rate * 1e6)
        cal[calibration_key(n, rate, d)] = c
        for size in SIZES_MB:
            nb = int(size * 1e6)
            for alg, e in ERR.items():
                model = calibrated_time(c, alg, nb, n)
                t = model / (1 + e)  # so that (model - t) / t == e
                rows.append({"workers": n, "rate_mbit": rate, "delay_ms": d, "size_mb": size, "nbytes": nb,
                             "algorithm": alg, "ok": True, "time_s": t, "model_s": model, "model_rel_err": e,
                             "model_nominal_s": model, "late_starts": 0, "emulation": "netns-tc"})
    skipped = [{"workers": 4, "rate_mbit": 100, "delay_ms": 20, "cell": True, "why": "the links' rates sum to 400"}]
    testbeds = [{"loadavg_before": 1.5, "loadavg_after": 2.5}]
    return {"rows": rows, "calibration": cal, "skipped": skipped, "testbeds": testbeds}


def _runs(tmp_path, latency: dict | None, rate_axis: bool):
    (tmp_path / "bench").mkdir()
    if latency is not None:
        (tmp_path / "bench" / "collectives_latency.json").write_text(json.dumps(latency))
    if rate_axis:
        row = {"workers": 2, "rate_mbit": 100, "size_mb": 10, "algorithm": "ring", "ok": True, "time_s": 0.9,
               "frac_of_bound": 0.89, "model_s": 0.91, "model_rel_err": 0.011, "timing": "measured",
               "emulation": "netns-tc"}
        (tmp_path / "bench" / "collectives.json").write_text(json.dumps({"rows": [row]}))
    return Context({}, tmp_path, tmp_path / "out")


def test_latency_numbers_table_and_figure(tmp_path):
    sec = run_experiment(E1, _runs(tmp_path, _latency_bench(), rate_axis=True))
    n = sec.numbers
    per_alg = n["EOneLatErrPerAlg"]
    assert f"butterfly {fmt_num(8.0, 2)}" in per_alg and f"tree {fmt_num(5.0, 2)}" in per_alg
    assert n["EOneLatErrMax"] == fmt_num(8.0, 2) and (n["EOneLatAlgsWithinTen"], n["EOneLatAlgs"]) == ("4", "4")
    assert n["EOneLatDelays"] == "0, 20" and n["EOneLatSkippedCells"] == "1" and n["EOneLatLoadMax"] == "2.5"
    assert n["EOneLatHandshakeRatio"] == "1" and n["EOneLatLateStarts"] == "0"
    assert "EOneLatNotRun" not in n and "EOneSettings" in n  # both axes measured
    # with 20 ms the parameter server wins small messages, the ring large ones: a crossover in range, and the
    # measured one (times = model / (1 + err)) lies near the model's
    assert int(n["EOneLatCrossCount"]) >= 1
    assert 0.7 < float(n["EOneLatCrossRatioMedian"]) < 1.3
    assert "tab:e1" in sec.table and "tab:e1lat" in sec.table and "link emulator cannot carry" in sec.table
    cells = sec.stats.tables["latency_cells"]
    assert set(cells["delay_ms"]) == {0, 20} and len(sec.stats.tables["latency"]) == 2 * len(SIZES_MB) * len(ERR)
    assert len(sec.figure.axes) >= 4


def test_report_builds_without_the_latency_bench(tmp_path):
    sec = run_experiment(E1, _runs(tmp_path, None, rate_axis=True))
    assert "absent" in sec.numbers["EOneLatNotRun"]
    assert not [k for k in sec.numbers if k.startswith("EOneLat") and k != "EOneLatNotRun"]
    assert "tab:e1lat" not in sec.table and "tab:e1" in sec.table


def test_report_builds_with_only_the_latency_bench(tmp_path):
    sec = run_experiment(E1, _runs(tmp_path, _latency_bench(), rate_axis=False))
    assert sec.stats is not None and "EOneNotRun" not in sec.numbers and "EOneSettings" not in sec.numbers
    assert "EOneLatSettings" in sec.numbers and "tab:e1lat" in sec.table and "tab:e1}" not in sec.table


def test_neither_file_means_not_run(tmp_path):
    sec = run_experiment(E1, _runs(tmp_path, None, rate_axis=False))
    assert sec.stats is None and "EOneNotRun" in sec.numbers
    assert "EOneLatNotRun" in sec.numbers  # the latency subsection says so too


def test_measured_crossover_interpolates_in_log_size():
    at, changes = measured_crossover([1e3, 2e3, 4e3], [1.0, 2.0, 5.0], [2.0, 2.5, 3.0])
    # log(ta/tb): -0.69, -0.22, +0.51 -> the sign changes between 2 and 4 KB, 30 % of the way in log size
    f = math.log(2 / 2.5) / (math.log(2 / 2.5) - math.log(5 / 3))
    assert changes == 1 and at == pytest.approx(math.exp(math.log(2e3) + f * math.log(2)))
    assert measured_crossover([1, 2], [1.0, 1.0], [2.0, 2.0]) == (None, 0)


def test_crossing_pair_needs_a_clear_flip():
    small = {"ps": 1.0, "tree": 1.1, "ring": 2.0, "butterfly": 2.5}
    large = {"ps": 9.0, "tree": 9.5, "ring": 4.0, "butterfly": 4.2}
    assert crossing_pair(small, large) == ("ps", "ring")
    assert crossing_pair({**small, "ring": 1.02}, large) is None  # a tie at the small end: no crossover


def _with_small_misses_software_and_a_trace(b: dict) -> dict:
    """Messages under 64 KB 50 % off (the whole range's worst, outside the issue's range); every testbed with
    a software cost per step; one heap-tree trace at N = 4 with known arrivals."""
    for r in b["rows"]:
        if r["size_mb"] < 0.064:
            r["model_rel_err"] = 0.5
    for i, cal in enumerate(b["calibration"].values()):
        cal["software"] = {a: {"nbytes": 256, "times_s": [0.01] * 3, "steps": 2, "per_step_s": 3e-4 + 1e-4 * i,
                               "per_step_q25_s": 2e-4, "per_step_q75_s": 4e-4} for a in ERR}
        if i == 0:  # only the first testbed's tiny calls were traced: a start lag per call
            for a, e in cal["software"].items():
                e.update(start_lag_s=9e-4 if a == "ps" else 6e-4, start_lag_q25_s=5e-4, start_lag_q75_s=1e-3)
    cal4 = _cal(0.005, 1e7)
    b["calibration"][calibration_key(4, 10, 5)] = cal4
    m = 64_000
    beta = 8 / (0.95 * 1e7)
    bucket = 15_000.0 * 1448 / 1514
    head = 30_000.0  # the root's first stream alone for 30 KB, then sharing: 2m - b - head paced
    sent, at01 = 0.1, 0.1 + 0.005 + (2 * m - bucket - head) * beta

    def ev(kind, peer, posted, done):
        return {"kind": kind, "peer": peer, "nbytes": m, "posted": posted, "done": done}

    ranks = [[ev("send", 1, sent, sent), ev("send", 2, sent, sent)], [ev("recv", 0, 0.05, at01)],
             [ev("recv", 0, 0.01, 0.2)], [ev("recv", 1, 0.01, 0.25)]]
    b["traces"] = [{"workers": 4, "rate_mbit": 10, "delay_ms": 5, "algorithm": "tree", "nbytes": m,
                    "model_s": 0.24, "model_chain": None, "calls": [{"time_s": 0.25, "ranks": ranks}] * 3}]
    return b


def test_issue_range_software_cost_and_trace_numbers(tmp_path):
    sec = run_experiment(E1, _runs(tmp_path, _with_small_misses_software_and_a_trace(_latency_bench()), False))
    n = sec.numbers
    assert f"butterfly {fmt_num(50.0, 2)}" in n["EOneLatErrPerAlg"]  # the whole range: the small misses
    assert f"butterfly {fmt_num(8.0, 2)}" in n["EOneLatIssueErrPerAlg"]  # 64 KB..10 MB: not them
    assert n["EOneLatIssueErrMax"] == fmt_num(8.0, 2) and n["EOneLatIssueAlgsWithinTen"] == "4"
    assert n["EOneLatIssueWithinTen"] == "100" and n["EOneLatAlgsWithinTen"] == "0"
    # two testbeds (0 and 20 ms): 0.3 and 0.4 ms per step, the median 0.35
    assert f"ring {fmt_num(0.35, 2)}\\,ms" in n["EOneLatSoftwarePerStep"]
    assert (n["EOneLatSoftwareMin"], n["EOneLatSoftwareMax"]) == (fmt_num(0.3, 2), fmt_num(0.4, 2))
    assert n["EOneLatTraceLeafTwoMs"] == fmt_num(200.0, 3) and n["EOneLatTraceLeafThreeMs"] == fmt_num(250.0, 3)
    assert n["EOneLatTraceHeadMinKB"] == fmt_num(30.0, 2) == n["EOneLatTraceHeadMaxKB"]
    # the start lag: the traced testbed's only, per algorithm, untraced testbeds not counted as zero
    assert f"ring {fmt_num(0.6, 2)}\\,ms" in n["EOneLatStartLag"] and f"{fmt_num(0.9, 2)}\\,ms" in n["EOneLatStartLag"]
    assert (n["EOneLatStartLagMin"], n["EOneLatStartLagMax"], n["EOneLatStartLagTestbeds"]) == (
        fmt_num(0.6, 2), fmt_num(0.9, 2), "1")
    sw = sec.stats.tables["latency_software"]
    assert len(sw) == 2 * len(ERR) and set(sw["source"]) == {"this run"}
    assert int(sw["start_lag_s"].notna().sum()) == len(ERR)
