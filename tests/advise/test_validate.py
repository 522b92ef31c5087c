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


def test_run_config_puts_the_workers_under_sched_rr_when_asked():
    inputs = {"workers": 2, "rates_bps": [10e6] * 2, "latency_s": 0.02, "model": "gpt-mini", "kind": "lm",
              "batch": 32}
    assert V.run_config(None, inputs, 28, {}, realtime=10)["testbed_realtime"] == 10
    assert "testbed_realtime" not in V.run_config(None, inputs, 28, {}, realtime=0)


def test_colocation_under_sched_rr_reads_the_realtime_probes_where_stored(tmp_path):
    runs = tmp_path / "runs"
    _probe_file(runs / "bench" / "e2e_lm.json", 2, [[0.14, 0.14], [0.14, 0.14]], [0.1, 0.1])
    fair = V.colocation("lm", 2, 1, realtime=True, runs_dir=runs, store=tmp_path / "none")
    assert fair.factor == pytest.approx(1.4) and "fair scheduler" in fair.source
    _probe_file(runs / "bench" / "e2e_lm_realtime.json", 2, [[0.11, 0.11], [0.11, 0.11]], [0.1, 0.1])
    rr = V.colocation("lm", 2, 1, realtime=True, runs_dir=runs, store=tmp_path / "none")
    assert rr.factor == pytest.approx(1.1) and "e2e_lm_realtime" in rr.source
    assert V.colocation("lm", 2, 1, realtime=False, runs_dir=runs, store=tmp_path / "none").factor == \
        pytest.approx(1.4)


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


def test_measured_terms_split_the_step(tmp_path):
    lines = [{"step": s, "t_step": 0.1 * s, "t_meta": 0.01 * s, "t_compute": 0.05 * s, "t_compress": 0.002 * s,
              "t_comm": 0.03 * s} for s in range(0, 21)]
    (tmp_path / "metrics.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    m = V.measured_terms(tmp_path)
    assert m["step"] == pytest.approx(0.09) and m["comm"] == pytest.approx(0.03)
    assert m["rest"] == pytest.approx(0.09 - 0.05 - 0.002 - 0.03)


def _probe_file(path, workers, by_rank, alone):
    path.parent.mkdir(parents=True, exist_ok=True)
    sample = {"compute_alone_s": alone, "compute_together_by_rank_s": by_rank}
    path.write_text(json.dumps({"args": {"model": "gpt-small"}, "probes": [
        {"workers": workers, "rate_mbit": 100.0, "samples": [sample]},
        {"workers": workers + 2, "rate_mbit": 100.0, "samples": [{**sample, "compute_alone_s": [1e-3]}]}]}))


def test_colocation_is_e8s_factor_over_the_period(tmp_path):
    """E8's probe at the same number of workers: the slowest worker each step (H = 1), the slowest sum over H
    steps (H > 1: a worker's slow step is made up by the others' before they wait); other worker counts are not
    read; without a probe, N processes on C cores, said so."""
    from lowbw.measure.colocation import compute_scale_over

    by_rank = [[0.10, 0.14, 0.10, 0.14], [0.14, 0.10, 0.14, 0.10]]
    _probe_file(tmp_path / "runs" / "bench" / "e2e_lm.json", 2, by_rank, [0.1] * 4)
    one = V.colocation("lm", 2, 1, runs_dir=tmp_path / "runs", store=tmp_path / "none")
    two = V.colocation("lm", 2, 2, runs_dir=tmp_path / "runs", store=tmp_path / "none")
    assert one.factor == pytest.approx(1.4) and two.factor == pytest.approx(1.2)
    samples = [{"compute_alone_s": [0.1] * 4, "compute_together_by_rank_s": by_rank}]
    assert two.factor == pytest.approx(compute_scale_over(samples, 2))
    assert "E8" in one.source and "measured" in one.source
    none = V.colocation("lm", 3, 1, cores=2, runs_dir=tmp_path / "runs", store=tmp_path / "none")
    assert none.factor == pytest.approx(1.5) and "assumed" in none.source
    assert V.colocation("image", 1, 1, cores=2, runs_dir=tmp_path / "x", store=tmp_path / "y").factor == 1.0


def test_a_check_predicts_the_sum_of_the_co_located_terms(tmp_path):
    """Every term of the advisor's step is in the check's prediction: the CPU terms times the co-location
    factor, communication as the cost model has it; nothing else."""
    from lowbw.advise.rank import rank
    from lowbw.advise.workload import Workload, from_model
    from lowbw.net.costlinks import WorkerLink

    w0 = from_model("gpt-mini", 32, step_ms=20)
    w = Workload(w0.model, w0.kind, w0.shapes, w0.compute_s, w0.compute_basis, {"sgd": 1e-3, "adamw": 2e-3}, 0.016)
    links = tuple(WorkerLink(10e6, 10e6, 0.02, 0.0) for _ in range(2))
    meas = {"step": 0.05, "compute": 0.03, "compress": 0.001, "comm": 0.01, "rest": 0.009}
    co = V.Colocation(1.25, "test")
    for a in rank(w, links, [], "val_loss", 2.2, only=("dense", "diloco16q4", "sdiloco16", "topk1")):
        c = V.check_of(1, a, 36, meas, co, tmp_path)
        t = a.step.terms()
        assert set(c.predicted_terms) == set(t)
        for k, v in t.items():
            assert c.predicted_terms[k] == pytest.approx(v * (1.25 if k in V.CPU_TERMS else 1.0)), (a.candidate.name, k)
        assert c.predicted_step_s == pytest.approx(sum(c.predicted_terms.values()))
        assert c.predicted_compute_s == pytest.approx(1.25 * (t["compute"] + t["optimizer"]))
        assert c.advised_step_s == a.step.step_s and c.measured_step_s == 0.05
        assert c.measured_terms == {k: v for k, v in meas.items() if k != "step"}
        d = c.as_dict()
        for key in ("method", "rank", "steps", "predicted_step_s", "measured_step_s", "predicted_compute_s",
                    "measured_compute_s", "predicted_rest_s", "measured_rest_s", "run_dir", "step_err", "rest_err"):
            assert key in d  # the keys --json printed before the breakdown
        assert d["within"] == (abs(d["step_err"]) <= V.TOLERANCE)


def test_check_errors(tmp_path):
    c = V.Check("m", 1, 10, predicted_step_s=0.2, measured_step_s=0.3, predicted_compute_s=0.1,
                measured_compute_s=0.15, predicted_rest_s=0.1, measured_rest_s=0.15, run_dir="x")
    assert c.step_err == pytest.approx(0.5) and c.rest_err == pytest.approx(0.5)
    assert not c.within
    table = V.format_checks([c])
    assert "+50%" in table and "NO" in table and max(len(x) for x in table.splitlines()) <= 100
    ok = V.Check("m", 1, 10, predicted_step_s=0.2, measured_step_s=0.22, predicted_compute_s=0.1,
                 measured_compute_s=0.12, predicted_rest_s=0.1, measured_rest_s=0.1, run_dir="x",
                 predicted_terms={"compute": 0.1, "comm": 0.1}, measured_terms={"compute": 0.12, "comm": 0.1})
    assert ok.within and "yes" in V.format_checks([ok])
    out = V.write_checks(tmp_path, [c, ok], {"model": "m"}, {"load1_mean": 0.1})
    doc = json.loads(out.read_text())
    assert [x["within"] for x in doc["validation"]] == [False, True] and doc["all_within"] is False


def test_validate_refuses_a_scheduling_priority_out_of_range_in_one_line():
    r = subprocess.run([sys.executable, "-m", "lowbw", "advise", "--model", "mlp", "--workers", "2", "--rate",
                        "10mbit", "--validate", "--validate-realtime", "120"], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 2 and r.stdout == "" and len(r.stderr.strip().splitlines()) == 1
    assert "--validate-realtime 120" in r.stderr


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
