"""lowbw advise --validate: what it trains (the top three that reach the target, and dense), for how long
(whole periods after the warm-up), how it reads a run's step, its refusals, and one real run on the testbed."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from types import SimpleNamespace

import pytest

from lowbw.advise import validate as V


def _advice(name: str, ratio: float, period: int = 1):
    return SimpleNamespace(candidate=SimpleNamespace(name=name, period=period),
                           efficiency=SimpleNamespace(ratio=ratio), reaches=math.isfinite(ratio))


def test_plan_takes_the_top_three_that_reach_the_target_and_dense():
    ranking = [_advice("a", 1.2), _advice("never", math.inf), _advice("b", 1.0), _advice("c", 2.0),
               _advice("d", 1.1), _advice("dense", 1.0)]
    assert [(i, a.candidate.name) for i, a in V.plan(ranking)] == [(1, "a"), (3, "b"), (4, "c"), (6, "dense")]
    ranking = [_advice("dense", 1.0), _advice("a", 1.2), _advice("b", 1.0), _advice("c", 1.0)]
    assert [a.candidate.name for _, a in V.plan(ranking)] == ["dense", "a", "b"]


@pytest.mark.parametrize("period, steps, want", [(1, 24, V.WARMUP + 24), (16, 24, V.WARMUP + 32),
                                                 (64, 24, V.WARMUP + 64), (4, 8, V.WARMUP + 8)])
def test_horizon_is_whole_periods_after_the_warmup(period, steps, want):
    assert V.horizon(period, steps) == want


def test_run_config_sets_the_advice_links_and_batch():
    inputs = {"workers": 3, "rates_bps": [10e6, 10e6, 1e6], "latency_s": 0.02, "model": "gpt-tiny", "kind": "lm",
              "batch": 8}
    cfg = V.run_config(None, inputs, 28, {"compressor": "topk", "compressor_args": {"ratio": 0.01}})
    assert cfg["worker_bandwidth_mbit"] == [10.0, 10.0, 1.0] and "bandwidth_mbit" not in cfg
    assert cfg["latency_ms"] == pytest.approx(20.0) and cfg["batch_size"] == 24 and cfg["steps"] == 28
    assert cfg["dataset"] == "shakespeare" and cfg["backend"] == "procs" and cfg["testbed"] is True
    assert cfg["compressor"] == "topk"
    from lowbw.train.config import RunConfig

    RunConfig.from_dict(cfg)  # a valid run config
    one = V.run_config(None, {**inputs, "rates_bps": [5e6] * 3, "model": "resnet20", "kind": "image"}, 8, {})
    assert one["bandwidth_mbit"] == 5.0 and one["dataset"] == "cifar10"


def test_run_config_uses_the_collective_the_advice_chose():
    from types import SimpleNamespace

    inputs = {"workers": 2, "rates_bps": [10e6] * 2, "latency_s": 0.02, "model": "gpt-mini", "kind": "lm",
              "batch": 32}
    advice = SimpleNamespace(step=SimpleNamespace(collective="allgather"))
    assert V.run_config(advice, inputs, 28, {})["collective"] == "allgather"
    gathered = SimpleNamespace(step=SimpleNamespace(collective="all-gather"))  # not an all-reduce: the preset's
    assert "collective" not in V.run_config(gathered, inputs, 28, {})


def test_measured_per_step_is_the_slope_after_the_warmup(tmp_path):
    lines = [{"step": s, "t_step": 0.5 + 0.1 * s, "t_meta": 0.01 * s, "t_compute": 0.03 * s}
             for s in range(0, 20, 2)]
    lines[0]["t_step"] = 9.0  # a slow first step: outside the slope
    (tmp_path / "metrics.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    step, compute = V.measured_per_step(tmp_path)
    assert step == pytest.approx(0.09) and compute == pytest.approx(0.03)


def test_measured_per_step_leaves_out_the_final_synchronisation(tmp_path):
    """A local method stopped between two exchanges writes its last step again after the final average (an
    exchange more than the horizon's): the slope ends at the loop's own line of that step."""
    lines = [{"step": s, "t_step": 0.1 * s, "t_meta": 0.0, "t_compute": 0.05 * s} for s in range(0, 21)]
    lines.append({**lines[-1], "t_step": lines[-1]["t_step"] + 5.0})  # the final synchronisation's line
    (tmp_path / "metrics.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    step, compute = V.measured_per_step(tmp_path)
    assert step == pytest.approx(0.1) and compute == pytest.approx(0.05)


def test_check_errors():
    c = V.Check("m", 1, 10, predicted_step_s=0.2, measured_step_s=0.3, predicted_compute_s=0.1,
                measured_compute_s=0.15, predicted_rest_s=0.1, measured_rest_s=0.15, run_dir="x")
    assert c.step_err == pytest.approx(0.5) and c.rest_err == pytest.approx(0.5)
    assert "+50%" in V.format_checks([c])


def test_validate_refuses_a_model_it_cannot_train_in_one_line():
    r = subprocess.run([sys.executable, "-m", "lowbw", "advise", "--params", "1e6", "--workers", "2", "--rate",
                        "10mbit", "--step-ms", "5", "--validate"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and r.stdout == "" and len(r.stderr.strip().splitlines()) == 1
    assert "--validate" in r.stderr and "--model" in r.stderr


@pytest.mark.netns
@pytest.mark.slow
def test_validate_on_the_testbed(tmp_path):
    """Two workers at 10 Mbit/s: dense's step is the link's (the MLP's fp32 gradient takes seconds at 10
    Mbit/s, its compute milliseconds), so its measured step is within a factor of two of the prediction even
    on a busy machine; every check has its run."""
    from lowbw.net.testbed import netns_missing

    if netns_missing():
        pytest.skip("needs root, ip netns and tc: " + "; ".join(netns_missing()))
    r = subprocess.run([sys.executable, "-m", "lowbw", "advise", "--model", "mlp", "--workers", "2", "--rate",
                        "10mbit", "--json", "--validate", "--validate-steps", "4", "--validate-dir",
                        str(tmp_path)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    checks = {c["method"]: c for c in out["validation"]}
    assert "dense" in checks and len(checks) == 4
    d = checks["dense"]
    assert 0.5 < d["measured_step_s"] / d["predicted_step_s"] < 2.0
    for c in checks.values():
        assert (tmp_path / c["method"] / "summary.json").exists()
    assert "load1_mean" in out["validation_conditions"]
