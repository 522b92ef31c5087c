"""The LeNet-5 workload (lowbw.train.lenet, its WorkloadSpec line): its parameter count worked out by hand, its
forward pass against the layers composed by hand with its own weights, and a short deterministic run that the
engine, the advisor and the report reach by the spec alone."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from lowbw.runs.io import read_jsonl
from lowbw.train.launch import run
from lowbw.train.lenet import LeNet5
from lowbw.train.models import MODELS, build_model, param_count
from lowbw.train.workload_specs import WORKLOADS, workload_words
from tests.helpers import config_of, sim_run, strip


def test_parameter_count_by_hand():
    # C1 6 (1 * 25 + 1), C3 16 (6 * 25 + 1), C5 400 * 120 + 120, F6 120 * 84 + 84, output 84 * 10 + 10
    assert param_count("lenet5", 10, 1, 28) == 156 + 2416 + 48_120 + 10_164 + 850 == 61_706
    # 3x16x16 (lowbw's synthetic images): S4's maps are 2x2, C5 takes 64 inputs; C1 sees 3 channels
    assert param_count("lenet5", 10, 3, 16) == 6 * 76 + 2416 + (64 * 120 + 120) + 10_164 + 850


def test_forward_is_the_layers_composed_by_hand():
    torch.manual_seed(0)
    m = build_model("lenet5", 10, 1, 28)
    x = torch.randn(3, 1, 28, 28)
    c1, c3 = m.features[0], m.features[3]
    f5, f6, out = m.classifier[1], m.classifier[3], m.classifier[5]
    h = F.avg_pool2d(torch.tanh(F.conv2d(x, c1.weight, c1.bias, padding=2)), 2)  # C1, S2: 6 x 14 x 14
    h = F.avg_pool2d(torch.tanh(F.conv2d(h, c3.weight, c3.bias)), 2)  # C3, S4: 16 x 5 x 5
    assert h.shape == (3, 16, 5, 5)
    h = torch.tanh(F.linear(h.flatten(1), f5.weight, f5.bias))
    want = F.linear(torch.tanh(F.linear(h, f6.weight, f6.bias)), out.weight, out.bias)
    torch.testing.assert_close(m(x), want, rtol=0, atol=0)


def test_too_small_an_image_is_named():
    with pytest.raises(ValueError, match="image_size=10"):
        LeNet5(10, 1, 10)


def test_its_spec_line_reaches_the_model_table_the_advisor_and_the_report():
    from lowbw.advise.validate import dataset_for
    from lowbw.advise.workload import example_input

    assert "lenet5" in MODELS and WORKLOADS["lenet5"].builds == "lowbw.train.lenet:lenet5"
    assert isinstance(build_model("lenet5", 10, 1, 28), LeNet5)
    assert dataset_for("lenet5") == "mnist"
    assert tuple(example_input("lenet5", None, 2, "meta").shape) == (2, 1, 28, 28)
    assert workload_words("lenet5", "mnist") == "LeNet-5 on MNIST"


def test_a_short_run_trains_and_is_deterministic(tmp_path):
    cfg = config_of(sim_run(model="lenet5", sync="local", world_period=2, lr=0.1))()
    run(cfg, tmp_path / "a", quiet=True)
    run(cfg, tmp_path / "b", quiet=True)
    a, b = read_jsonl(tmp_path / "a" / "metrics.jsonl"), read_jsonl(tmp_path / "b" / "metrics.jsonl")
    assert strip(a) == strip(b)
    losses = [ln["loss"] for ln in a if ln.get("loss") is not None]
    assert len(losses) == 6 and all(torch.isfinite(torch.tensor(v)) for v in losses)  # a loss every step
    assert [ln["test_acc"] for ln in a if ln.get("test_acc") is not None]  # evaluated by the image workload's metric
