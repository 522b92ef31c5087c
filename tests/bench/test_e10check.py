"""E10's check against the testbed (lowbw.bench.e10check): bad flags rejected in one line before any work, the
networks read from the config and scaled (a trace's rates too), the per-cell row from two run directories, and
(root) a small real sim-vs-testbed run."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from lowbw.bench import e10check
from lowbw.net.trace import resolve_trace
from lowbw.runs.io import append_jsonl
from tests.conftest import netns
from tests.helpers import refused

CONFIG = {"train_defaults": {"bandwidth_mbit": 10},
          "methods": {"dense": {"compressor": "none"},
                      "topk1": {"compressor": "topk", "compressor_args": {"ratio": 0.01}}},
          "experiments": {"e10_even": {"base": {"batch_size": 64}},
                          "e10_oneslow": {"base": {"worker_bandwidth_mbit": [10, 10, 10, 1]}},
                          "e10_trace": {"base": {"bandwidth_trace": "wifi10"}},
                          "e10_straggler": {"base": {"worker_speeds": [1, 1, 1, 3]}}}}


@refused({
    "--steps 5": "--steps 5: needs more than the 10 warm-up steps",
    "--networks even,nope": "'nope' has no experiment e10_nope",
    "--methods dense,nope": "'nope' is not a preset",
    "--scale 0": "--scale 0.0: needs a factor > 0",
    "--batch-size 30": "--batch-size 30: not a multiple of the 4 workers",
    "--config no/such.yaml": "--config no/such.yaml: no such file",
})
def test_bad_arguments_fail_in_one_line_before_any_work(tmp_path, argv, culprit):
    out = tmp_path / "e10check.json"
    p = subprocess.run([sys.executable, "-m", "lowbw", "bench", "e10check", *argv, "--out", str(out),
                        "--runs-dir", str(tmp_path / "cells")], capture_output=True, text=True, timeout=120)
    assert p.returncode == 2
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and culprit in lines[0], p.stderr
    assert not out.exists() and not (tmp_path / "cells").exists()


def test_networks_from_the_config_and_scaled(tmp_path):
    assert e10check.network_keys(CONFIG, "even") == {"bandwidth_mbit": 10.0}
    slow = e10check.network_keys(CONFIG, "oneslow")
    assert slow == {"bandwidth_mbit": 10.0, "worker_bandwidth_mbit": [10, 10, 10, 1]}
    assert e10check.network_config(slow, 10.0) == {"bandwidth_mbit": 100.0,
                                                    "worker_bandwidth_mbit": [100.0, 100.0, 100.0, 10.0]}
    # a trace: every rate x scale in a file of its own, its times unchanged
    net = e10check.network_config(e10check.network_keys(CONFIG, "trace"), 10.0, tmp_path)
    scaled, orig = resolve_trace(net["bandwidth_trace"], 4), resolve_trace("wifi10", 4)
    assert len(scaled.steps) == len(orig.steps)
    for a, b in zip(scaled.steps, orig.steps):
        assert a.t_s == b.t_s and a.bps == pytest.approx(10 * b.bps, rel=1e-5)
    assert scaled.period_s == orig.period_s
    with pytest.raises(ValueError, match="e10_asym"):
        e10check.network_keys(CONFIG, "asym")


def test_a_straggler_the_testbed_cannot_run_is_skipped_before_any_work(tmp_path, monkeypatch):
    import argparse

    cfg = tmp_path / "config.yaml"
    cfg.write_text(json.dumps(CONFIG))
    args = argparse.Namespace(networks="even,straggler", methods="dense,topk1", steps=12, scale=10.0,
                              config=str(cfg), model="mlp", dataset="mnist", batch_size=64, seed=0, target=0.9)
    nets, mcfg, skipped = e10check.plan(args)
    assert list(nets) == ["even", "straggler"] and list(mcfg) == ["dense", "topk1"]
    from lowbw.train.config import RunConfig
    from lowbw.train.launch import testbed_links

    rc = RunConfig.from_dict({"dataset": "synthetic", "model": "mlp", "workers": 4, "worker_speeds": [1, 1, 1, 3]})
    if testbed_links(rc).get("faults"):  # the launcher straggles the testbed's worker: nothing to skip
        assert skipped == {}
    else:
        assert list(skipped) == ["straggler"] and "no faults" in skipped["straggler"]


def _line(step, t, comm, compute):
    return {"step": step, "loss": 1.0, "bytes_sent": 1000 * step, "t_virtual": t, "t_virtual_compute": compute,
            "t_virtual_compress": 0.0, "t_virtual_comm": comm, "t_step": t, "t_meta": 0.0, "t_compute": compute,
            "t_compress": 0.0, "t_comm": comm, "comm_alpha_terms": 6.0 * step, "comm_beta_bytes": 3e6 * step}


def test_row_from_two_run_directories(tmp_path):
    # sim: 2.7 s/step (2.69 comm); procs: 3.0 s/step (2.98 comm) -> err -10 %
    for name, step_s, comm_s in (("sim", 2.7, 2.69), ("procs", 3.0, 2.98)):
        d = tmp_path / name
        d.mkdir()
        for s in (0, 10, 20):
            append_jsonl(d / "metrics.jsonl", _line(s, s * step_s, s * comm_s, s * (step_s - comm_s)))
    net = {"bandwidth_mbit": 100.0, "worker_bandwidth_mbit": [100.0, 100.0, 100.0, 10.0]}
    links = [{"up_bps": b * 1e6, "down_bps": b * 1e6} for b in net["worker_bandwidth_mbit"]]
    (tmp_path / "procs" / ".testbed.json").write_text(json.dumps({"links": links, "tbf": {"burst": 15140},
                                                                  "congestion_control": "bbr", "rate_log": [[0, 1]]}))
    row = e10check.network_row(tmp_path / "sim", tmp_path / "procs", network="oneslow", net=net, method="dense",
                               steps=20, target=0.9, probe_res={"overhead_ms": 1.0, "emulation": "netns-tc"},
                               cfg={"clock_compute_scale": 1.5, "latency_ms": 0.0})
    assert row["network"] == "oneslow" and row["links"] == net and row["method"] == "dense"
    assert row["window"] == [10, 20] and row["rate_mbit"] == 100.0
    assert row["testbed"]["links_mbit"] == [[100.0, 100.0]] * 3 + [[10.0, 10.0]]
    assert row["testbed"]["congestion_control"] == "bbr" and e10check.testbed_of(tmp_path / "sim") is None
    assert row["stalls"] == []
    # a step whose communication took 40 s where the sim's took 2.69: a stall (> 3 x + 0.5 s); 3 x is not
    append_jsonl(tmp_path / "procs" / "metrics.jsonl", _line(21, 20 * 3.0 + 40.0, 20 * 2.98 + 40.0, 0.0))
    append_jsonl(tmp_path / "procs" / "metrics.jsonl", _line(22, 20 * 3.0 + 50.0, 20 * 2.98 + 48.0, 0.0))
    for k, c in ((21, 2.69), (22, 2.69)):
        append_jsonl(tmp_path / "sim" / "metrics.jsonl", _line(k, 20 * 2.7 + (k - 20) * 2.7, 20 * 2.69 + (k - 20) * c,
                                                               0.0))
    assert e10check.stalls(tmp_path / "procs", tmp_path / "sim") == [[21, pytest.approx(40.0)]]
    s = e10check.summarise([{**row, "stalls": [[21, 40.0]]}])
    assert s["stalled_cells"] == ["oneslow/dense"]
    assert row["predicted_step_s"] == pytest.approx(2.7) and row["measured_step_s"] == pytest.approx(3.0)
    assert row["err_step"] == pytest.approx(-0.1)
    assert row["err_comm"] == pytest.approx(2.69 / 2.98 - 1)
    s = e10check.summarise([row, {**row, "network": "even", "err_step": 0.02, "err_comm": 0.01}])
    assert s["worst_abs_err_step_by_network"] == {"oneslow": pytest.approx(0.1), "even": pytest.approx(0.02)}
    assert s["worst_abs_err_step_by_method"] == {"dense": pytest.approx(0.1)}
    res = {"workers": 4, "args": {"scale": 10.0, "steps": 20}, "warmup_steps": 10, "rows": [row],
           "skipped": {"straggler": "why"}}
    text = e10check.table(res)
    assert "oneslow" in text and "-10.0%" in text and "skipped straggler: why" in text


@netns
@pytest.mark.slow
def test_a_small_real_check(tmp_path):
    """One network of unequal links, one method, 11 steps: sim and procs on the testbed, a row with both."""
    out = tmp_path / "e10check.json"
    p = subprocess.run([sys.executable, "-m", "lowbw", "bench", "e10check", "--networks", "oneslow", "--methods",
                        "topk1", "--steps", "11", "--scale", "10", "--out", str(out), "--runs-dir",
                        str(tmp_path / "cells")], capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    res = json.loads(out.read_text())
    assert res["complete"] and res["provenance"]["host"]
    (row,) = res["rows"]
    assert row["network"] == "oneslow" and row["links"]["worker_bandwidth_mbit"] == [100.0, 100.0, 100.0, 10.0]
    assert row["predicted_step_s"] > 0 and row["measured_step_s"] > 0 and row["err_step"] is not None
    assert row["emulation"] == "netns-tc"
    assert "oneslow" in p.stdout and "topk1" in p.stdout


def test_the_trace_from_where_the_testbeds_first_step_met_it(tmp_path):
    """The testbed replays a trace from the workers' launch, the sim from the first step: the shifted trace
    at t is the original at t + offset, and the offset is read off the procs run's files."""
    import os

    from lowbw.net.trace import rates_at

    src = tmp_path / "scaled.csv"
    src.write_text(e10check.scaled_trace_csv("wifi10", 4, 10.0))
    p = tmp_path / "shifted.csv"
    p.write_text(e10check.shifted_trace_csv(src, 4.3))
    orig, shifted = resolve_trace(str(src), 4), resolve_trace(str(p), 4)
    for t in (0.0, 0.1, 0.2, 0.7, 3.0, 55.5):
        assert [b for b, _ in rates_at(shifted, t, 4)] == pytest.approx([b for b, _ in rates_at(orig, t + 4.3, 4)]), t
    with pytest.raises(ValueError, match="offset -1"):
        e10check.shifted_trace_csv(src, -1.0)
    # launch at 100 s (the worker config), the loop's last line at 110 s with t_wall 6: the loop started at
    # 104 s; its first step started at t_wall - t_step = 0.5 - 0.3 = 0.2 s into it: 4.2 s after the launch
    d = tmp_path / "procs"
    d.mkdir()
    (d / ".worker-config.json").write_text("{}")
    for s, wall, step_s in ((0, 0.05, 0.0), (1, 0.5, 0.3), (2, 6.0, 0.6)):
        append_jsonl(d / "metrics.jsonl", {"step": s, "t_wall": wall, "t_step": step_s})
    os.utime(d / ".worker-config.json", (100.0, 100.0))
    os.utime(d / "metrics.jsonl", (110.0, 110.0))
    assert e10check.start_offset_s(d) == pytest.approx(4.2)
