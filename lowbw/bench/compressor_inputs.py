"""E2's input tensors (``numel`` fp32 entries each, reproducible from a seed): ``gaussian`` N(0, 1);
``student_t3`` a heavy-tailed synthetic (Student t, 3 dof); ``resnet20`` real gradients of ResNet-20 on CIFAR-10
(successive SGD steps' gradients concatenated until ``numel``; random images where the dataset is not available,
which the description says)."""

from __future__ import annotations

import os
from pathlib import Path

import torch

from lowbw.data import load
from lowbw.train.models import build_model

__all__ = ["INPUTS", "make_input"]

INPUTS = ["gaussian", "resnet20", "student_t3"]


def _resnet_gradients(numel: int, seed: int, batch: int = 64) -> tuple[torch.Tensor, str]:
    """Concatenated real ResNet-20 gradients of successive SGD steps on CIFAR-10 (random images if absent)."""
    g = torch.Generator().manual_seed(seed)
    source = "cifar10"
    try:
        mirror = os.environ.get("LOWBW_DATA_MIRROR")
        shared = Path(__file__).resolve().parents[3] / "shared" / "data"
        if not mirror and shared.is_dir():
            mirror = str(shared)
        ds = load("cifar10", mirror=mirror, download_ok=False)
        images, labels = ds.x_train, ds.y_train
        mean = torch.tensor(ds.mean).view(1, 3, 1, 1)
        std = torch.tensor(ds.std).view(1, 3, 1, 1)
    except Exception as e:  # noqa: BLE001 - any failure to get the data: fall back, and say so
        source = f"random images ({type(e).__name__}: no CIFAR-10 here)"
        images = torch.randint(0, 256, (1024, 32, 32, 3), generator=g, dtype=torch.uint8)
        labels = torch.randint(0, 10, (1024,), generator=g)
        mean, std = torch.full((1, 3, 1, 1), 0.5), torch.full((1, 3, 1, 1), 0.25)
    torch.manual_seed(seed)
    model = build_model("resnet20")
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    chunks, have = [], 0
    while have < numel:
        idx = torch.randint(0, images.shape[0], (batch,), generator=g)
        x = (images[idx].permute(0, 3, 1, 2).float() / 255 - mean) / std
        opt.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(model(x), labels[idx]).backward()
        flat = torch.cat([p.grad.reshape(-1) for p in model.parameters() if p.grad is not None])
        chunks.append(flat)
        have += flat.numel()
        opt.step()
    return torch.cat(chunks)[:numel].contiguous(), f"resnet20 gradients, {len(chunks)} SGD steps on {source}"


def make_input(kind: str, numel: int, seed: int = 0) -> tuple[torch.Tensor, str]:
    """(fp32 tensor of ``numel`` entries, description)."""
    g = torch.Generator().manual_seed(seed)
    if kind == "gaussian":
        return torch.randn(numel, generator=g), "N(0,1)"
    if kind == "student_t3":
        z = torch.randn(numel, generator=g)
        chi2 = torch.randn(3, numel, generator=g).square_().sum(0)
        return z / (chi2 / 3).sqrt_(), "Student t, 3 dof"
    if kind == "resnet20":
        return _resnet_gradients(numel, seed)
    raise ValueError(f"input={kind!r} is unknown; allowed: {', '.join(INPUTS)}")
