"""The collectives benchmark: target bookkeeping on synthetic rows, and one tiny real run end to end."""

from __future__ import annotations

import json

import pytest

from lowbw.bench import collectives as B
from lowbw.net import calibrated as M


def _row(alg, t, n=4, rate=100, size=10, err=0.02):
    nb = int(size * 1e6)
    lb = 2 * (n - 1) / n * nb * 8 / (rate * 1e6)
    return {"workers": n, "rate_mbit": rate, "size_mb": size, "nbytes": nb, "algorithm": alg, "ok": True,
            "time_s": t, "lower_bound_s": lb, "frac_of_bound": lb / t, "model_s": t * (1 + err),
            "model_rel_err": err, "busbw_bps": nb * 8 / t * 2 * (n - 1) / n, "emulation": "netns-tc"}


def test_targets_and_table():
    rows = [_row("ring", 1.25), _row("native", 1.3), _row("ps", 5.0, err=-0.2)]
    t = B.targets(rows)
    assert t["ring_frac_of_bound_100mbit_ge10mb"]["met"] is True
    assert t["ring_frac_of_bound_100mbit_ge10mb"]["min"] == pytest.approx(1.2 / 1.25)
    assert t["ring_over_native"]["met"] is True and t["ring_over_native"]["max"] == pytest.approx(1.25 / 1.3)
    assert t["model_within_10pct"]["met"] is False and t["model_within_10pct"]["by_algorithm"]["ps"] == 0.2
    text = B.table({"rows": rows})
    assert text.count("\n") == len(rows) + 1 and "| ring |" in text
    assert B.targets([])["ring_over_native"]["met"] is None


def test_pingpong_sizes_cover_the_fit_range():
    for rate in (1e7, 1e8, 1e9):
        s = B.pingpong_sizes(rate)
        assert s[0] == 1024 and sum(x >= M.FIT_MIN_BYTES for x in s) >= 2 and max(s) <= 16 << 20


def test_calibration_carries_gamma_into_the_model():
    pp = [{"nbytes": nb, "one_way_s": 1e-4 + nb * 8e-8, "exchange_s": 1e-4 + nb * 9e-8}
          for nb in (1024, 1 << 18, 1 << 20, 4 << 20)]
    cal = M.calibrate(pp, 1e8, gamma_s_per_byte=1e-9)
    ring, tree = M.model_link(cal, "ring"), M.model_link(cal, "tree")
    assert ring.gamma_s_per_byte == tree.gamma_s_per_byte == 1e-9
    assert ring.bandwidth_bps == pytest.approx(8 / 9e-8, rel=1e-3)  # duplex fit for ring
    assert tree.bandwidth_bps == pytest.approx(8 / 8e-8, rel=1e-3)  # ping-pong fit for tree
    assert M.model_link(M.calibrate(pp, 1e8), "ring").gamma_s_per_byte == 0.0
    # these links have no burst: what is fitted is the 1 KB that alpha (the 1 KB message's time) already holds
    assert ring.burst_bytes == tree.burst_bytes == pytest.approx(1024, rel=1e-6)


def test_calibration_fits_the_shapers_burst_from_pingpong_and_uses_it_for_every_algorithm():
    burst = 100_000
    pp = [{"nbytes": nb, "one_way_s": 1e-4 + max(0, nb - burst) * 8e-9, "exchange_s": 1e-4 + max(0, nb - burst) * 9e-9}
          for nb in (1024, 1 << 18, 1 << 20, 4 << 20)]
    cal = M.calibrate(pp, 1e9)
    ring, tree = M.model_link(cal, "ring"), M.model_link(cal, "tree")
    assert ring.burst_bytes == tree.burst_bytes == pytest.approx(burst, rel=1e-6)
    assert ring.bandwidth_bps == pytest.approx(8 / 9e-9, rel=1e-6) and tree.bandwidth_bps == pytest.approx(1e9)


def test_tiny_benchmark_runs_end_to_end(tmp_path):
    out = tmp_path / "collectives.json"
    cfg = {"workers": [2], "rates_mbit": [100], "sizes_mb": [0.2], "algorithms": ["native", "ring"], "reps": 1,
           "max_seconds": 5}
    res = B.run(cfg, out=out, log=lambda s: None, timeout=300)
    data = json.loads(out.read_text())
    assert data["rows"] == res["rows"] and len(res["rows"]) == 2
    assert res["emulation"] in ("netns-tc", "loopback-ratelimit")
    assert "git_commit" in data["provenance"] and "N2_100mbit" in data["calibration"]
    assert 0 < data["calibration"]["N2_100mbit"]["gamma_s_per_byte"] < 1e-7  # summing is > 10 MB/s
    sw = data["calibration"]["N2_100mbit"]["software"]  # tiny calls before the grid; gloo's own has no steps
    assert set(sw) == {"ring"} and sw["ring"]["steps"] == 2 and len(sw["ring"]["times_s"]) >= B.MIN_SOFTWARE_REPS
    assert 0 < sw["ring"]["time_s"] < 0.1
    tb = data["testbeds"][0]
    assert tb["idle_before_call_s"] >= B.IDLE_MIN_S
    if tb["emulation"] == "netns-tc":  # tbf refills 15140 B in 1.2 ms at 100 Mbit/s: twice that
        assert tb["idle_before_call_s"] == pytest.approx(2 * 15_140 * 8 / 1e8)
        assert tb["congestion_control"] == "cubic"  # the benchmark's default
    for r in res["rows"]:
        if r["algorithm"] == "ring" and r["error"] == "lowbw.comm.allreduce not available":
            continue
        assert r["ok"], r
        assert r["time_s"] > 0 and r["lower_bound_s"] == pytest.approx(0.2e6 * 8 / 1e8)
        assert r["model_s"] > 0 and r["busbw_bps"] > 0
        # a shaped 100 Mbit/s link cannot be beaten by more than tbf's burst allows
        assert r["time_s"] > 0.5 * r["lower_bound_s"]


def test_a_list_of_delays_is_a_latency_axis_one_testbed_each(monkeypatch):
    seen = []

    def fake_testbed(n, rate_bps, delay_s, cfg, plan, timeout):
        seen.append((n, rate_bps, delay_s, len(plan)))
        pp = [{"nbytes": nb, "one_way_s": delay_s + 1e-4 + nb * 8 / rate_bps,
               "exchange_s": delay_s + 1e-4 + nb * 8 / rate_bps} for nb in B.pingpong_sizes(rate_bps)]
        ms = [{**p, "ok": True, "times_s": [p["predicted_s"]], "time_s": p["predicted_s"]} for p in plan]
        return {"pingpong": pp, "measurements": ms, "gamma_s_per_byte": 0.0, "chunk_bytes": None}, \
            {"emulation": "netns-tc"}

    monkeypatch.setattr(B, "_run_testbed", fake_testbed)
    cfg = {"workers": [2], "rates_mbit": [10], "sizes_mb": [0.064], "algorithms": ["ring", "tree"], "reps": 1,
           "max_seconds": 5, "delay_ms": [0, 20]}
    res = B.run(cfg, out=None, log=lambda s: None)
    assert [s[2] for s in seen] == [0.0, 0.02] and all(s[3] == 2 for s in seen)
    assert sorted({r["delay_ms"] for r in res["rows"]}) == [0, 20] and len(res["rows"]) == 4
    assert set(res["calibration"]) == {"N2_10mbit", "N2_10mbit_20ms"}
    slow = {r["algorithm"]: r["model_nominal_s"] for r in res["rows"] if r["delay_ms"] == 20}
    fast = {r["algorithm"]: r["model_nominal_s"] for r in res["rows"] if r["delay_ms"] == 0}
    assert all(slow[a] > fast[a] + 0.02 for a in slow)  # at least one one-way delay more per all-reduce


def test_calibration_only_measures_no_grid_and_a_bad_trace_is_refused_before_any_testbed(monkeypatch):
    seen = []

    def fake_testbed(n, rate_bps, delay_s, cfg, plan, timeout):
        seen.append(plan)
        pp = [{"nbytes": nb, "one_way_s": 1e-4 + nb * 8 / rate_bps, "exchange_s": 1e-4 + nb * 8 / rate_bps}
              for nb in B.pingpong_sizes(rate_bps)]
        tiny = {"ring": {"nbytes": 256, "times_s": [5e-3] * 9, "late_starts": 0}}
        return {"pingpong": pp, "measurements": [], "gamma_s_per_byte": 0.0, "chunk_bytes": None,
                "software": tiny}, {"emulation": "netns-tc"}

    monkeypatch.setattr(B, "_run_testbed", fake_testbed)
    cfg = {"workers": [2], "rates_mbit": [10], "sizes_mb": [0.064], "algorithms": ["ring"], "reps": 1,
           "max_seconds": 5, "calibration_only": True}
    res = B.run(cfg, out=None, log=lambda s: None)
    assert seen == [[]] and res["rows"] == []
    assert res["calibration"]["N2_10mbit"]["software"]["ring"]["per_step_s"] > 0
    with pytest.raises(ValueError, match="trace algorithm 'native'"):
        B.run({**cfg, "trace": {"algorithm": "native", "sizes_mb": [0.016]}}, out=None, log=lambda s: None)
    with pytest.raises(ValueError, match="trace sizes_mb"):
        B.run({**cfg, "trace": {"algorithm": "tree", "sizes_mb": [0]}}, out=None, log=lambda s: None)
