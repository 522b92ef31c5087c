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
