"""Models: parameter counts of the references, counted on the meta device; CIFAR models run on 32x32."""

from __future__ import annotations

import pytest
import torch

from lowbw.train.models import IMAGENET_MODELS, build_model, grad_bytes, param_count


@pytest.mark.parametrize("name,classes,channels,size,count", [
    ("resnet20", 10, 3, 32, 269_722),      # He et al. 2016: 0.27M
    ("resnet32", 10, 3, 32, 464_154),      # 0.46M
    ("resnet56", 10, 3, 32, 853_018),      # 0.85M
    ("vgg16", 10, 3, 32, 14_728_266),
    ("cnn", 10, 3, 32, 356_810),
    ("mlp", 10, 1, 28, 535_818),
    ("resnet50", 1000, 3, 224, 25_557_032),        # torchvision resnet50
    ("vgg16_imagenet", 1000, 3, 224, 138_357_544),  # torchvision vgg16 (the draft's table)
    ("inception_v4", 1000, 3, 299, 42_679_816),     # timm inception_v4
])
def test_parameter_counts_on_meta(name, classes, channels, size, count):
    assert param_count(name, classes, channels, size) == count
    assert grad_bytes(name, classes, channels, size) == 4 * count


def test_meta_build_allocates_nothing_and_runs():
    for name in IMAGENET_MODELS:
        m = build_model(name, 1000, 3, 224, device="meta")
        assert all(p.device.type == "meta" for p in m.parameters())
        size = 299 if name == "inception_v4" else 224
        assert m(torch.empty(2, 3, size, size, device="meta")).shape == (2, 1000)


@pytest.mark.parametrize("name", ["resnet20", "vgg16", "cnn", "mlp"])
def test_small_models_forward_backward(name):
    torch.manual_seed(0)
    c, s = (1, 28) if name == "mlp" else (3, 32)
    m = build_model(name, 10, c, s)
    out = m(torch.randn(4, c, s, s))
    assert out.shape == (4, 10)
    out.sum().backward()
    assert all(p.grad is not None for p in m.parameters())


def test_unknown_model_is_named():
    with pytest.raises(ValueError, match="resnet21"):
        build_model("resnet21")


def test_every_model_has_one_workload_spec_that_builds_and_runs_it():
    from lowbw.advise.workload import build_named, example_input
    from lowbw.data.specs import SPECS
    from lowbw.data.text import TEXT_SPECS
    from lowbw.train.models import MODELS, model_kind
    from lowbw.train.targets import METRICS
    from lowbw.train.workload_specs import WORKLOADS

    assert list(WORKLOADS) == list(MODELS)
    assert IMAGENET_MODELS == ("resnet50", "vgg16_imagenet", "inception_v4")
    for name, w in WORKLOADS.items():
        assert w.model == name and w.metric in METRICS and model_kind(name) == w.kind
        assert w.dataset in (TEXT_SPECS if w.kind == "text" else SPECS)
        assert w.higher_is_better == (w.kind == "image")  # accuracy up, loss down
        m = build_named(name, "meta")
        out = m(example_input(name, m, 2, "meta"))
        assert out.shape[0] == 2 and (w.kind == "text" or out.shape[-1] == w.num_classes)


def test_a_new_workload_reaches_the_advisor_and_the_report_by_its_spec(monkeypatch):
    from lowbw.advise import workload as aw
    from lowbw.advise.validate import dataset_for
    from lowbw.train import workload_specs as ws

    # a spec line only (its builder is mlp's, under a new name): nothing else names the model
    monkeypatch.setitem(ws.WORKLOADS, "mlp-wide", ws.WorkloadSpec("mlp-wide", "Wide MLP", "image",
                                                                  "fashion_mnist", 1, 28, 10, "test_acc"))
    assert dataset_for("mlp-wide") == "fashion_mnist"
    assert ws.workload_words("mlp-wide", "fashion_mnist") == "Wide MLP on Fashion-MNIST"
    assert tuple(aw.example_input("mlp-wide", None, 3, "meta").shape) == (3, 1, 28, 28)
    assert ws.workload_words("gpt-mini", "shakespeare") == "gpt-mini on Tiny Shakespeare"
    assert ws.workload_words("mlp", "mnist") == "MLP on MNIST"
    with pytest.raises(ValueError, match="model='nope' is unknown"):
        dataset_for("nope")
