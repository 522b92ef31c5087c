"""python -m lowbw.bench.cuda and lowbw bench e2e_probe record the machine's conditions in their JSON and refuse to
write it with --strict on a busy machine (issue 32 item 2). The measurements themselves are stubbed (no GPU, no
testbed): what is tested is the recording and the --strict plumbing around them; the busy verdict is forced."""

from __future__ import annotations

import json

import pytest

from lowbw.bench import cuda, e2e_probe
from lowbw.measure import conditions


def _force_busy(monkeypatch):
    monkeypatch.setattr(conditions, "verdict", lambda *a, **k: ("forced busy by the test",))


# ------------------------------------------------------------------------------------------------ cuda
def _fake_world(backend, world, algorithms, time_mb=64.0, reps=5, timeout=600.0, device_type="cuda"):
    assert device_type == "cpu"
    return {"backend": backend, "world_size": world, "gpus": 0, "device_type": device_type, "seconds": 0.0,
            "ok": True, "allreduce_checks": 1, "allreduce_failed": [], "worst_rel_err": {"float32": 0.0},
            "aggregate": [], "aggregate_failed": [], "ddp": {"rel_err": 0.0}, "ddp_failed": [], "time_mb": time_mb,
            "times": {a: {"median_s": 1e-3, "all_s": [1e-3], "algbw_GBps": 1.0} for a in algorithms}}


def test_cuda_bench_records_conditions_overall_and_per_world(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(cuda, "check_world", _fake_world)
    out = tmp_path / "cuda.json"
    assert cuda.main(["--device", "cpu", "--worlds", "gloo:2", "gloo:3", "--algorithms", "ring",
                      "--out", str(out)]) == 0
    res = json.loads(out.read_text())
    assert res["env"]["device_type"] == "cpu" and res["env"]["nccl"] is None
    c = res["conditions"]
    assert c["cores"] >= 1 and c["wall_s"] > 0 and isinstance(c["busy"], bool) and "thresholds" in c
    assert [w["world_size"] for w in res["worlds"]] == [2, 3]
    assert all(w["conditions"]["during"] == [] and "busy" in w["conditions"] for w in res["worlds"])


def test_cuda_bench_strict_refuses_on_a_busy_machine(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(cuda, "check_world", _fake_world)
    _force_busy(monkeypatch)
    argv = ["--device", "cpu", "--worlds", "gloo:2", "--algorithms", "ring"]
    out = tmp_path / "strict.json"
    assert cuda.main([*argv, "--out", str(out), "--strict"]) == 1 and not out.exists()
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert "refusing to write" in last and "forced busy by the test" in last and "--strict" in last
    warned = tmp_path / "warned.json"  # without --strict: a warning, and the result with its verdict
    assert cuda.main([*argv, "--out", str(warned)]) == 0
    assert "WARNING" in capsys.readouterr().err and json.loads(warned.read_text())["conditions"]["busy"] is True


def test_cuda_bench_cpu_takes_gloo_worlds_only(capsys):
    with pytest.raises(SystemExit) as ei:
        cuda.main(["--device", "cpu", "--worlds", "nccl:1"])
    assert ei.value.code == 2 and "--device cpu takes gloo:N" in capsys.readouterr().err


# ------------------------------------------------------------------------------------------- e2e_probe
def _fake_probe(cfg, workers, rate, data_shape, **kw):
    return {"allgather_by_gap_s": {"0": [1e-3, 2e-3]}, "pingpong_s": [1e-4], "sequence": [], "sequence_s": [],
            "sequence_by_call_s": [], "sequence_last_in_s": [], "sequence_work_s": [],
            "compute_alone_s": [0.01, 0.01], "compute_together_s": [0.02, 0.02], "compress_alone_s": [],
            "compress_together_s": [], "calls_per_step": 0, "ddp": False, "ddp_cell_hook": False,
            "emulation": "loopback-ratelimit", "shaper_burst_bytes": 0}


def test_probe_records_conditions(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(e2e_probe, "probe", _fake_probe)
    out = tmp_path / "probe.json"
    assert e2e_probe.main(["--workers", "2", "--rate", "100mbit", "--out", str(out)]) == 0
    res = json.loads(out.read_text())
    c = res["conditions"]
    assert c["cores"] >= 1 and c["wall_s"] > 0 and isinstance(c["busy"], bool) and "thresholds" in c
    assert res["compute_scale"] == pytest.approx(2.0) and res["workers"] == 2


def test_probe_strict_refuses_on_a_busy_machine(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(e2e_probe, "probe", _fake_probe)
    _force_busy(monkeypatch)
    out = tmp_path / "probe.json"
    assert e2e_probe.main(["--workers", "2", "--rate", "100mbit", "--out", str(out), "--strict"]) == 1
    assert not out.exists()
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert "lowbw bench e2e_probe: refusing to write" in last and "forced busy by the test" in last
