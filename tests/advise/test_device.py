"""The advisor's device (--device), compression times (stored fits, roofline) and the utilisation solver."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from lowbw.advise import device as dv
from lowbw.advise.candidates import candidates, compressor_of
from lowbw.advise.utilisation import bandwidth_for, utilisation
from lowbw.advise.workload import transformer_shapes
from lowbw.compress import make
from lowbw.measure.compress_time import fit, settings
from lowbw.report import table6

ROOT = Path(__file__).resolve().parents[2]


def _cand(name: str):
    return next(c for c in candidates() if c.name == name)


def test_unknown_device_is_one_line_naming_it_and_the_known():
    with pytest.raises(ValueError) as e:
        dv.device("tpu9")
    msg = str(e.value)
    assert "'tpu9'" in msg and "\n" not in msg and all(k in msg for k in ("cpu", "a100", "h100", "h200"))


def test_cli_refuses_unknown_device_before_work():
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, "-m", "lowbw", "advise", "--params", "1e6", "--workers", "2", "--rate",
                        "1gbit", "--device", "tpu9"], capture_output=True, text=True, env=env, cwd=ROOT)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "tpu9" in r.stderr


def test_passes_belong_to_the_compressor_and_error_feedback_adds_its_own():
    plain, ef = make("topk", ratio=0.01, error_feedback=False), make("topk", ratio=0.01)
    assert ef.passes == plain.passes + 3.0  # g + e; the sparse residual update is a scatter of k entries
    q = make("blockwise", bits=8, error_feedback=True)
    assert q.passes == make("blockwise", bits=8).passes + 3.0 + 4.0  # a dense decode and subtraction


def test_roofline_is_modelled_and_scales_with_bandwidth():
    shapes = transformer_shapes(1.5e8)
    c = _cand("topk1")
    h100 = dv.compress_time(c, shapes, dv.DEVICES["h100"])
    a100 = dv.compress_time(c, shapes, dv.DEVICES["a100"])
    assert h100.basis == "modelled" and "3.35 TB/s" in h100.detail
    n = sum(math.prod(s) for _, s in shapes)
    passes = compressor_of(c).passes
    want = len(shapes) * math.ceil(passes) * dv.LAUNCH_S + passes * 4 * n / 3.35e12
    assert h100.seconds == pytest.approx(want)
    assert a100.seconds > h100.seconds
    assert h100.seconds < 0.05  # the bound for the 150M model on an H100


def test_stored_cpu_measurement_is_used_and_exact_at_measured_sizes():
    got = dv.stored()
    assert "cpu" in got, "paper/measured/compress_time/cpu.json is committed"
    row = next(iter(got["cpu"]["rows"].values()))
    assert len(set(row["sizes"])) >= 3
    for n, t in zip(row["sizes"], row["times_s"]):
        assert dv.per_call_s(row, n) == pytest.approx(t)
    # between sizes: on the segment; beyond the largest: the last segment's line, never below the largest
    mid = (row["sizes"][1] + row["sizes"][2]) // 2
    assert min(row["times_s"][1:3]) <= dv.per_call_s(row, mid) <= max(row["times_s"][1:3])
    assert dv.per_call_s(row, 4 * row["sizes"][-1]) >= row["times_s"][-1]
    ct = dv.compress_time(_cand("topk1"), (("w", (4096,)),), dv.DEVICES["cpu"])
    assert ct.basis == "measured" and "cpu.json" in ct.detail


def test_every_compressed_candidate_has_a_stored_cpu_row():
    rows = dv.stored()["cpu"]["rows"]
    for c in candidates():
        if c.compressor != "none":
            assert dv.compress_time(c, (("w", (1000,)),), dv.DEVICES["cpu"]).basis == "measured", c.name
    assert len(rows) == len(settings(__import__("lowbw.measure.presets", fromlist=["x"]).load_methods()))


def test_fit_recovers_an_affine_cost():
    sizes = [4096, 65536, 1 << 20]
    times = [20e-6 + 1e-10 * 4 * n for n in sizes]
    fixed, per_byte, resid = fit(sizes, times)
    assert fixed == pytest.approx(20e-6, rel=1e-6) and per_byte == pytest.approx(1e-10, rel=1e-6) and resid < 1e-6


def test_bandwidth_for_solves_the_step_model():
    from lowbw.advise.steptime import LINK_GOODPUT

    # 2 workers, bf16 10B: every worker sends the 160 Gbit model once per all-reduce (in TCP/IP frames); DP
    # overlaps the step's compute, so 50 % utilisation is a 1.6 s all-reduce: 100 Gbit/s of payload
    assert bandwidth_for(0.5, 1, 1e10, 2, 0.8, 2) / 1e9 == pytest.approx(100 / LINK_GOODPUT, rel=1e-3)
    # DiLoCo H=100 blocks: compute / (compute + comm / H) = 0.5 at comm = 80 s: 2 Gbit/s of payload
    assert bandwidth_for(0.5, 100, 1e10, 2, 0.8, 2) / 1e9 == pytest.approx(2 / LINK_GOODPUT, rel=1e-3)
    r = bandwidth_for(0.9, 300, 1e10, 2, 0.8, 2)
    assert utilisation(300, 1e10, 2, 0.8, 2, r) >= 0.9 > utilisation(300, 1e10, 2, 0.8, 2, r * 0.999)


def test_table6_compares_every_published_cell():
    t = table6.rows()
    assert [r["period"] for r in t] == [1, 100, 300]
    assert all(len(r["ours"]) == len(r["theirs"]) == 5 for r in t)
    assert sum(table6.on_grid(v) for vs in table6.PUBLISHED.values() for v in vs) == 15
    for r in t:  # a row either matches every cell or names what differs
        assert (r["differs"] == "none") == all(r["match"])
    tex = table6.table()
    assert r"\label{tab:table6}" in tex and "104.8" in tex


@pytest.mark.slow
def test_cli_device_h100_charges_topk_under_50ms_and_says_modelled():
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, "-m", "lowbw", "advise", "--params", "1.5e8", "--workers", "8", "--rate",
                        "1gbit", "--latency", "50ms", "--step-ms", "300", "--device", "h100", "--json"],
                       capture_output=True, text=True, env=env, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    top = next(x for x in d["ranking"] if x["method"] == "topk1")
    assert top["compress_s"] < 0.05 and top["compress_basis"] == "modelled"
    assert d["inputs"]["device"] == "h100"


def test_compute_fit_recovers_fixed_and_per_sample_costs():
    from lowbw.bench.compute_fit import fit as compute_fit

    fixed, per, resid = compute_fit([4, 8, 16, 32], [0.01 + 0.0005 * b for b in (4, 8, 16, 32)])
    assert fixed == pytest.approx(0.01) and per == pytest.approx(0.0005) and resid < 1e-9


def test_fitted_compute_is_charged_at_the_batch_used(tmp_path):
    from lowbw.advise import workload

    f = tmp_path / "fit.json"
    f.write_text(json.dumps({"threads": 1, "models": {"gpt-mini": {"batches": [4, 8, 16, 32], "fixed_s": 0.01,
                                                                   "per_sample_s": 0.0005}}}))
    t, basis = workload._fitted_compute("gpt-mini", 32, f)
    assert t == pytest.approx(0.026) and "fitted" in basis and "extrapolated" not in basis
    assert "extrapolated" in workload._fitted_compute("gpt-mini", 64, f)[1]
    assert workload._fitted_compute("resnet20", 32, f) is None


def test_a_fit_of_another_build_of_the_model_is_not_read(tmp_path):
    """A fit whose model had other than the advised model's parameters (a language model built at another
    vocabulary or context) times other compute: not used."""
    from lowbw.advise import workload

    f = tmp_path / "fit.json"
    f.write_text(json.dumps({"threads": 1, "models": {"gpt-mini": {
        "batches": [4, 8, 16], "fixed_s": 0.01, "per_sample_s": 0.0005, "params": 101_312,
        "optimizer_s": {"sgd": 1e-4}, "outer_s": 2e-4}}}))
    assert workload._fitted_compute("gpt-mini", 8, f, params=101_312) is not None
    assert workload._fitted_compute("gpt-mini", 8, f, params=106_880) is None
    assert workload.fit_entry("gpt-mini", 101_312, f)[0]["optimizer_s"] == {"sgd": 1e-4}
    f.write_text(json.dumps({"threads": 1, "models": {"gpt-mini": {"batches": [4, 8, 16], "fixed_s": 0.01,
                                                                   "per_sample_s": 0.0005}}}))
    assert workload._fitted_compute("gpt-mini", 8, f, params=106_880) is None  # which build it timed: unknown


def test_a_language_model_is_advised_as_the_trainer_builds_it():
    """gpt-mini on Tiny Shakespeare: its corpus's 65 characters and its 64-character context, as the run's
    config.json counts it (106,880 parameters), and inputs of that context."""
    from lowbw.advise import workload
    from lowbw.data.text import TEXT_SPECS
    from lowbw.train.models import param_count
    from lowbw.train.workload_specs import GPT_SIZES

    want = param_count("gpt-mini", TEXT_SPECS["shakespeare"].vocab_size, 1, GPT_SIZES["gpt-mini"].block_size)
    assert want == 106_880
    assert workload.from_model("gpt-mini", 32, step_ms=10).params == want
    m = workload.build_named("gpt-mini", "cpu")
    assert tuple(workload.example_input("gpt-mini", m, 3, "cpu").shape) == (3, GPT_SIZES["gpt-mini"].block_size)
