"""Batched augmentation on uint8 image tensors (no per-sample PIL): pad + random crop + flip, normalisation.

The standard CIFAR recipe (He et al. 2016; the thesis' E1): pad 4 pixels on each side, take a random 32x32
crop, flip horizontally with probability 1/2, subtract the mean and divide by the std per channel. All
random draws come from the caller's ``torch.Generator`` (one per worker), in a fixed order, so a batch is
reproducible from the generator state alone.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = ["random_crop_flip", "normalize", "Augmenter"]


def random_crop_flip(x: torch.Tensor, gen: torch.Generator, pad: int = 4, flip: bool = True) -> torch.Tensor:
    """Random ``pad``-padded crops (zero padding) and horizontal flips of a uint8 batch ``[B, C, H, W]``."""
    B, C, H, W = x.shape
    dev = x.device
    dy = torch.randint(0, 2 * pad + 1, (B,), generator=gen)
    dx = torch.randint(0, 2 * pad + 1, (B,), generator=gen)
    fl = torch.randint(0, 2, (B,), generator=gen).bool() if flip else None
    xp = F.pad(x, (pad, pad, pad, pad))
    rows = (dy[:, None] + torch.arange(H)).to(dev)  # [B, H]
    cols = (dx[:, None] + torch.arange(W)).to(dev)  # [B, W]
    if fl is not None:  # flipping = reading the crop's columns right to left
        cols = torch.where(fl.to(dev)[:, None], cols.flip(1), cols)
    bi = torch.arange(B, device=dev)[:, None, None, None]
    ci = torch.arange(C, device=dev)[None, :, None, None]
    return xp[bi, ci, rows[:, None, :, None], cols[:, None, None, :]]


def normalize(x: torch.Tensor, mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
    """uint8 ``[B, C, H, W]`` -> float32 ``(x/255 - mean) / std`` per channel."""
    return (x.float().div_(255.0) - mean).div_(std)


class Augmenter:
    """Per-dataset augmentation policy + normalisation constants on the device."""

    def __init__(self, mode: str, channels: int, mean: tuple[float, ...], std: tuple[float, ...],
                 device: str | torch.device = "cpu"):
        if mode == "auto":
            mode = "crop_flip" if channels == 3 else "none"
        if mode not in ("crop_flip", "crop", "none"):
            raise ValueError(f"augment={mode!r} is unknown")
        self.mode = mode
        m = torch.tensor(mean or (0.5,) * channels, dtype=torch.float32, device=device)
        s = torch.tensor(std or (0.25,) * channels, dtype=torch.float32, device=device)
        self.mean = m.view(1, -1, 1, 1)
        self.std = s.view(1, -1, 1, 1)

    def train(self, x: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
        if self.mode != "none":
            x = random_crop_flip(x, gen, pad=4, flip=self.mode == "crop_flip")
        return normalize(x, self.mean, self.std)

    def eval(self, x: torch.Tensor) -> torch.Tensor:
        return normalize(x, self.mean, self.std)
