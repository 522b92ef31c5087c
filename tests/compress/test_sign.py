"""Sign compressors: signSGD, EF-signSGD's scale, 1-bit SGD's mean reconstruction (block and column)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from lowbw.compress import State, make


@settings(max_examples=30, deadline=None)
@given(arr=arrays(np.float32, st.integers(0, 500), elements=st.floats(-5, 5, width=32)))
def test_signsgd_decodes_signs(arr):
    x = torch.from_numpy(arr)
    y = make("signsgd").decompress(make("signsgd").compress(x))
    assert torch.equal(y, torch.where(x < 0, -1.0, 1.0))


def test_ef_signsgd_scale_is_mean_abs():
    x = torch.tensor([1.0, -3.0, 0.5, -0.5])
    comp = make("ef_signsgd")
    st_ = State()
    y = comp.decompress(comp.compress(x, "w", st_))
    assert y.tolist() == [1.25, -1.25, 1.25, -1.25]
    torch.testing.assert_close(comp.residual(st_, "w"), x - y)


def _onebit_reference(x: torch.Tensor, groups: list[torch.Tensor]) -> torch.Tensor:
    out = torch.empty_like(x)
    for idx in groups:
        v = x[idx]
        pos, neg = v[v >= 0], v[v < 0]
        out[idx] = torch.where(v >= 0, pos.mean() if pos.numel() else 0.0, neg.mean() if neg.numel() else 0.0)
    return out


@settings(max_examples=30, deadline=None)
@given(arr=arrays(np.float32, st.integers(1, 600), elements=st.floats(-5, 5, width=32)),
       block=st.sampled_from([1, 7, 64, 2048]))
def test_onebit_block_mean_reconstruction(arr, block):
    x = torch.from_numpy(arr)
    comp = make("onebit", block_size=block)
    y = comp.decompress(comp.compress(x, "w", State()))
    n = x.numel()
    groups = [torch.arange(i, min(i + block, n)) for i in range(0, n, block)]
    torch.testing.assert_close(y, _onebit_reference(x, groups), rtol=1e-5, atol=1e-5)
    # the mean reconstruction preserves each group's sum
    for gidx in groups:
        assert float(y[gidx].sum()) == pytest.approx(float(x[gidx].sum()), abs=1e-3)


@pytest.mark.parametrize("shape", [(6, 5), (4, 3, 2), (9,), ()])
def test_onebit_column_mean_reconstruction(shape):
    x = torch.randn(shape, generator=torch.Generator().manual_seed(0))
    comp = make("onebit", granularity="column")
    p = comp.compress(x, "w", State())
    y = comp.decompress(p)
    flat = x.reshape(-1)
    if len(shape) >= 2:
        cols = flat.numel() // shape[0]
        groups = [torch.arange(j, flat.numel(), cols) for j in range(cols)]
    else:
        groups = [torch.arange(flat.numel())]
    torch.testing.assert_close(y.reshape(-1), _onebit_reference(flat, groups), rtol=1e-5, atol=1e-6)
    assert p.parts[1].numel() == 2 * len(groups)
