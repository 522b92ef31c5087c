"""Batched augmentation on uint8 tensors equals the per-sample recipe (pad 4, crop, flip, normalise)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from lowbw.train.augment import Augmenter, normalize, random_crop_flip


def test_crop_flip_matches_per_sample_reference():
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 256, (16, 3, 32, 32), dtype=torch.uint8, generator=g)
    gen = torch.Generator().manual_seed(5)
    out = random_crop_flip(x, gen)
    ref_gen = torch.Generator().manual_seed(5)
    dy = torch.randint(0, 9, (16,), generator=ref_gen)
    dx = torch.randint(0, 9, (16,), generator=ref_gen)
    fl = torch.randint(0, 2, (16,), generator=ref_gen).bool()
    xp = F.pad(x, (4, 4, 4, 4))
    for i in range(16):
        crop = xp[i, :, dy[i]: dy[i] + 32, dx[i]: dx[i] + 32]
        if fl[i]:
            crop = crop.flip(-1)
        assert torch.equal(out[i], crop)
    assert out.dtype == torch.uint8


def test_normalise_and_policy():
    x = torch.full((2, 3, 4, 4), 255, dtype=torch.uint8)
    m = torch.tensor([0.5, 0.5, 0.5]).view(1, -1, 1, 1)
    s = torch.tensor([0.25, 0.5, 1.0]).view(1, -1, 1, 1)
    y = normalize(x, m, s)
    assert torch.allclose(y[0, :, 0, 0], torch.tensor([2.0, 1.0, 0.5]))
    assert Augmenter("auto", 1, (0.1,), (0.3,)).mode == "none"
    assert Augmenter("auto", 3, (), ()).mode == "crop_flip"
    a = Augmenter("none", 1, (0.1,), (0.3,))
    z = torch.zeros(1, 1, 2, 2, dtype=torch.uint8)
    assert torch.allclose(a.train(z, torch.Generator()), torch.full((1, 1, 2, 2), -1 / 3))
