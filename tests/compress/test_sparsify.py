"""Sparsifiers: exact top-k, the magnitude threshold with accumulation, shared-seed random-k, DGC's math."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from lowbw.compress import State, make
from lowbw.compress.sparsify import random_indices, select_magnitude_at_least, topk_indices


def _topk_value_sum(x: torch.Tensor, idx: torch.Tensor) -> float:
    return float(x[idx].abs().double().sum())


@settings(max_examples=40, deadline=None)
@given(arr=arrays(np.float32, st.integers(1, 3000), elements=st.floats(-100, 100, width=32)),
       ratio=st.floats(0.0001, 1.0))
def test_topk_indices_exact(arr, ratio):
    x = torch.from_numpy(arr)
    k = max(1, math.ceil(ratio * x.numel()))
    idx = topk_indices(x, k)
    assert idx.numel() == k and idx.unique().numel() == k
    ref = x.abs().topk(k).values
    assert _topk_value_sum(x, idx) == pytest.approx(float(ref.double().sum()), rel=1e-9, abs=0)


@pytest.mark.parametrize("kind", ["gauss", "ties", "sample_unrepresentative", "heavy"])
def test_topk_fast_path_exact_on_large_inputs(kind):
    n, k = 1 << 18, 3000  # the sample is every 4th entry
    g = torch.Generator().manual_seed(0)
    if kind == "gauss":
        x = torch.randn(n, generator=g)
    elif kind == "ties":
        x = torch.randint(-3, 4, (n,), generator=g).float()
    elif kind == "sample_unrepresentative":  # the sample overestimates the threshold: forces the fallback
        x = torch.randn(n, generator=g)
        x[0::4] += 100.0
    else:
        x = torch.distributions.StudentT(1.5).sample((n,))
    idx = topk_indices(x, k)
    assert idx.numel() == k and idx.unique().numel() == k
    assert _topk_value_sum(x, idx) == pytest.approx(float(x.abs().topk(k).values.double().sum()), rel=1e-9)


def test_select_magnitude_at_least():
    x = torch.tensor([0.5, -0.5, 0.49, -2.0, 0.0])
    assert select_magnitude_at_least(x, 0.5).tolist() == [0, 1, 3]
    assert select_magnitude_at_least(torch.zeros(0), 0.1).numel() == 0


def test_topk_payload_and_residual():
    comp = make("topk", ratio=0.25)
    st_ = State()
    x = torch.tensor([1.0, -4.0, 2.0, 0.5, -3.0, 0.1, 0.2, 0.3])
    p = comp.compress(x, "w", st_)
    assert p.parts[0].tolist() == [1, 4] and p.parts[0].dtype == torch.int32
    assert p.parts[1].tolist() == [-4.0, -3.0]
    assert torch.equal(comp.residual(st_, "w"), torch.tensor([1.0, 0.0, 2.0, 0.5, 0.0, 0.1, 0.2, 0.3]))


# ----- threshold (the draft paper's method) --------------------------------------------------------------------
def test_threshold_uses_magnitude_and_accumulates():
    """|g + Z| >= alpha: negative entries are sent too (the draft's comparison without |.| would never send
    them), and sub-threshold entries accumulate in Z until they cross."""
    comp = make("threshold", alpha=1.0)
    st_ = State()
    sent = []
    for _ in range(3):
        y = comp.decompress(comp.compress(torch.tensor([0.4, -0.4, -1.5, 0.0]), "w", st_))
        sent.append(y.tolist())
    assert sent[0] == [0.0, 0.0, -1.5, 0.0]
    assert sent[1] == [0.0, 0.0, -1.5, 0.0]
    assert sent[2] == pytest.approx([1.2, -1.2, -1.5, 0.0])
    assert comp.residual(st_, "w").abs().max() < 1e-6


def test_threshold_can_send_nothing():
    p = make("threshold", alpha=10.0).compress(torch.randn(100))
    assert all(t.numel() == 0 for t in p.parts)
    assert p.nbytes == 8 * 1 + 8 * 2  # header only


# ----- random-k -------------------------------------------------------------------------------------------------
def test_random_indices_uniform_unique_sorted():
    n, k = 50, 10
    counts = torch.zeros(n)
    for s in range(2000):
        idx = random_indices(n, k, s, torch.device("cpu"))
        assert idx.numel() == k and torch.equal(idx, idx.unique())
        counts[idx] += 1
    freq = counts / 2000
    assert float((freq - k / n).abs().max()) < 0.04  # p=0.2, std 0.009
    big = random_indices(10**6, 1000, 3, torch.device("cpu"))
    assert big.numel() == 1000 and big.unique().numel() == 1000


def test_randomk_shared_indices_across_ranks_and_names():
    comp = make("randomk", ratio=0.1, error_feedback=False)
    a = comp.compress(torch.randn(1000), "w", State(seed=1))
    b = comp.compress(torch.randn(1000), "w", State(seed=2))  # another worker: other seed, same indices
    c = comp.compress(torch.randn(1000), "v", State(seed=1))
    assert a.meta["seed"] == b.meta["seed"] != c.meta["seed"]
    assert torch.equal(comp._indices(a), comp._indices(b))
    assert len(a.parts) == 1 and a.data_nbytes == 4 * 100  # values only
    st_ = State()
    s0 = comp.compress(torch.randn(1000), "w", st_).meta["seed"]
    s1 = comp.compress(torch.randn(1000), "w", st_).meta["seed"]
    assert s0 != s1  # a new index set every step


def test_randomk_decode_without_cached_indices():
    comp = make("randomk", ratio=0.1, error_feedback=False)
    x = torch.randn(500)
    p = comp.compress(x, "w", State())
    y = comp.decompress(p)
    meta = {k: v for k, v in p.meta.items() if not k.startswith("_")}
    from dataclasses import replace

    assert torch.equal(comp.decompress(replace(p, meta=meta)), y)


def test_randomk_unbiased_scaling():
    x = torch.randn(200, generator=torch.Generator().manual_seed(0))
    comp = make("randomk", ratio=0.2, unbiased=True, error_feedback=False)
    seeds = 3000
    acc = torch.zeros(200, dtype=torch.float64)
    for s in range(seeds):
        acc += comp.decompress(comp.compress(x, f"w{s}", State())).double()
    mean = acc / seeds
    # per-entry variance x^2 (n/k - 1) = 4 x^2: std of the mean 2|x|/sqrt(seeds)
    z = (mean - x.double()).abs() / (2 * x.double().abs() / math.sqrt(seeds) + 1e-12)
    assert float(z.max()) < 5.0


# ----- DGC -------------------------------------------------------------------------------------------------------
def _dgc_reference(grads, ratio, m, clip=None):
    """Naive DGC: per step clip, u = m u + g, v += u, send top-k of |v|, zero u and v there."""
    u = torch.zeros_like(grads[0])
    v = torch.zeros_like(grads[0])
    out = []
    for g in grads:
        if clip is not None and g.norm() > clip:
            g = g * (clip / g.norm())
        u = m * u + g
        v = v + u
        k = max(1, math.ceil(ratio * g.numel()))
        idx = v.abs().topk(k).indices
        sent = torch.zeros_like(v)
        sent[idx] = v[idx]
        u[idx] = 0
        v[idx] = 0
        out.append(sent)
    return out


@pytest.mark.parametrize("clip", [None, 1.0])
def test_dgc_matches_naive_reference(clip):
    g = torch.Generator().manual_seed(0)
    grads = [torch.randn(500, generator=g) for _ in range(5)]
    comp = make("dgc", ratio=0.02, momentum=0.9, clip_norm=clip)
    st_ = State()
    ours = [comp.decompress(comp.compress(x, "w", st_)) for x in grads]
    for a, b in zip(ours, _dgc_reference(grads, 0.02, 0.9, clip)):
        torch.testing.assert_close(a, b)


def test_dgc_without_momentum_conserves_mass():
    comp = make("dgc", ratio=0.05, momentum=0.0)
    st_ = State()
    total, sent = torch.zeros(300), torch.zeros(300)
    for s in range(4):
        x = torch.randn(300, generator=torch.Generator().manual_seed(s))
        total += x
        sent += comp.decompress(comp.compress(x, "w", st_))
    torch.testing.assert_close(sent + st_["w"]["dgc.v"], total)


def test_dgc_exponential_warmup():
    comp = make("dgc", ratio=0.001, warmup_steps=100)
    d = [comp.density(t) for t in range(120)]
    assert d[0] == pytest.approx(0.25)
    assert all(a > b for a, b in zip(d[:100], d[1:100]))
    assert d[100:] == [0.001] * 20
    assert d[50] == pytest.approx(math.sqrt(0.25 * 0.001))  # geometric
    st_ = State()
    p0 = comp.compress(torch.randn(1000), "w", st_)
    assert p0.parts[1].numel() == 250
