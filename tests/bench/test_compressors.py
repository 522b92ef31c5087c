"""Smoke test of the E2 benchmark (lowbw.bench.compressors) on tiny inputs: columns, JSON, targets, notebook."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from lowbw.bench.compressors import _matrix_shape, make_input, run_benchmark, table

COLUMNS = {"input", "method", "params", "baseline", "ratio", "rel_l2_error", "bias", "throughput_gbps",
           "peak_extra_mem_bytes", "encode_s", "decode_s", "ok"}


def test_run_benchmark_small(tmp_path, monkeypatch):
    # no dataset here (an empty cache and an empty mirror): the resnet20 input falls back to random images
    monkeypatch.setenv("LOWBW_DATA_DIR", str(tmp_path / "cache"))
    (tmp_path / "mirror").mkdir()
    monkeypatch.setenv("LOWBW_DATA_MIRROR", str(tmp_path / "mirror"))
    out = tmp_path / "compressors.json"
    df = run_benchmark(numel=6000, methods=["blockwise", "topk", "powersgd"], inputs=["gaussian", "resnet20"],
                       reps=1, out=out)
    assert set(df.columns) >= COLUMNS
    assert df.ok.all(), df[~df.ok].to_dict("records")
    assert {"bnb.quantize_blockwise", "torch.fp16_compress_hook", "torch.powerSGD_hook"} <= set(df.method)
    ours = df[(df.method == "blockwise") & (df.params == "bits=8, codebook=nonlinear")]
    assert len(ours) == 2 and (ours.ratio > 3.9).all()
    assert (df.peak_extra_mem_bytes.dropna() > 0).all()
    data = json.loads(out.read_text())
    assert {"rows", "provenance", "targets", "inputs", "config"} <= set(data)
    assert set(data["targets"]["blockwise8_nonlinear_vs_bnb"]) == {"gaussian", "resnet20"}
    assert "random images" in data["inputs"]["resnet20"]
    assert set(data["head_to_head"]) == {"gaussian", "resnet20"}
    assert data["targets"]["blockwise8_nonlinear_vs_bnb"]["gaussian"]["speed_from"] == "head_to_head (fastest calls)"
    # our PowerSGD and torch's hook compute the same thing: same error for the same seed and rank
    for kind in ("gaussian", "resnet20"):
        a = df[(df.input == kind) & (df.method == "powersgd") & (df.params == "rank=1")].rel_l2_error.item()
        b = df[(df.input == kind) & (df.method == "torch.powerSGD_hook") & (df.params == "rank=1")].rel_l2_error.item()
        assert abs(a - b) < 1e-4
    assert "| gaussian | blockwise |" in table(df)


def test_inputs_and_matrix_view():
    x, desc = make_input("student_t3", 1000)
    assert x.shape == (1000,) and x.dtype == torch.float32 and "t" in desc
    assert _matrix_shape(25_000_000) == (5000, 5000)
    assert _matrix_shape(7) == (1, 7)


def test_notebook_is_parameterised():
    nb = json.loads((Path(__file__).resolve().parents[2] / "notebooks" / "compression.ipynb").read_text())
    assert nb["metadata"]["kernelspec"]["name"] == "python3"
    params = [c for c in nb["cells"] if "parameters" in c.get("metadata", {}).get("tags", [])]
    assert len(params) == 1
    src = "".join(params[0]["source"])
    assert "numel" in src and "out" in src and "config_json" in src


# the settings E2 measured before they moved into the registrations (commit d7c92da's METHODS, in its order)
OLD_METHODS = [
    ("none", {}), ("fp16", {}), ("bf16", {}), ("blockwise", {"bits": 8, "codebook": "nonlinear"}),
    ("blockwise", {"bits": 8, "codebook": "linear"}),
    ("blockwise", {"bits": 8, "codebook": "nonlinear", "stochastic": True}),
    ("blockwise", {"bits": 16, "codebook": "nonlinear"}), ("qsgd", {"levels": 127}), ("qsgd", {"levels": 7}),
    ("terngrad", {}), ("twobit", {"threshold": "1std"}), ("threshold", {"alpha": "2.5std"}), ("topk", {"ratio": 0.01}),
    ("randomk", {"ratio": 0.01}), ("dgc", {"ratio": 0.001}), ("signsgd", {}), ("ef_signsgd", {}), ("onebit", {}),
    ("powersgd", {"rank": 1}), ("powersgd", {"rank": 4}), ("artopk", {"ratio": 0.01}),
]


def test_the_benchmark_measures_what_the_registrations_say(monkeypatch):
    from lowbw.bench import compressors as bench
    from lowbw.compress import registry as reg
    from lowbw.compress.quantize import Cast

    assert reg.bench_settings() == bench.METHODS
    old = {n for n, _ in OLD_METHODS}  # a compressor registered since adds its rows at its module's place
    assert [m for m in bench.METHODS if m[0] in old] == OLD_METHODS
    monkeypatch.setattr(reg, "_REGISTRY", dict(reg._REGISTRY))  # a compressor added for this test only
    reg.register("castx", family="precision", bench=({"a": 1}, {"a": 2}))(lambda a=1: Cast("fp16"))
    assert reg.bench_settings()[-2:] == [("castx", {"a": 1}), ("castx", {"a": 2})]
    assert reg.entry("castx").family == "precision"
    with pytest.raises(ValueError, match="family='bogus' is not known"):
        reg.register("castz", family="bogus")
