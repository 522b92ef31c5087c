"""Quantizers: error bounds (property tests), unbiasedness of the stochastic ones, bit packing, fp16 range."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from lowbw.compress import State, make
from lowbw.compress._bits import pack, unpack


def _tensor(draw_arr) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(draw_arr, dtype=np.float32))


finite = st.floats(-1e30, 1e30, allow_nan=False, allow_infinity=False, width=32)
scaled_arrays = st.tuples(
    arrays(np.float32, st.integers(0, 700), elements=st.floats(-1, 1, width=32)),
    st.sampled_from([1e-30, 1e-6, 1.0, 1e6, 1e30]),
).map(lambda t: t[0] * np.float32(t[1]))


@settings(max_examples=40, deadline=None)
@given(width=st.sampled_from([1, 2, 4, 8]), n=st.integers(0, 200), seed=st.integers(0, 1000))
def test_pack_unpack_round_trip(width, n, seed):
    g = torch.Generator().manual_seed(seed)
    codes = torch.randint(0, 1 << width, (n,), generator=g, dtype=torch.uint8)
    p = pack(codes, width)
    assert p.dtype == torch.uint8 and p.numel() == math.ceil(n * width / 8)
    assert torch.equal(unpack(p, width, n), codes)


def test_pack_layout_is_little_end_first():
    assert pack(torch.tensor([1, 0, 0, 0, 0, 0, 0, 1], dtype=torch.uint8), 1).tolist() == [0b10000001]
    assert pack(torch.tensor([3, 0, 1], dtype=torch.uint8), 2).tolist() == [0b010011]


# ----- blockwise --------------------------------------------------------------------------------------------------
def _block_scales(x: torch.Tensor, b: int) -> torch.Tensor:
    """Per-element absmax of its block (reference, loop-free)."""
    n = x.numel()
    pad = (-n) % b
    xb = torch.nn.functional.pad(x.abs(), (0, pad)).view(-1, b)
    return xb.amax(1, keepdim=True).expand_as(xb).reshape(-1)[:n]


@settings(max_examples=60, deadline=None)
@given(arr=scaled_arrays, block=st.sampled_from([1, 3, 64, 100, 2048]), bits=st.sampled_from([2, 4, 8, 16]))
def test_blockwise_linear_error_bound(arr, block, bits):
    x = _tensor(arr)
    comp = make("blockwise", bits=bits, block_size=block, codebook="linear")
    y = comp.decompress(comp.compress(x))
    L = {2: 1, 4: 7, 8: 127, 16: 32767}[bits]
    s = _block_scales(x, block)
    assert torch.all((y - x).abs() <= s * (0.5 / L + 1e-6) + 1e-37)


@settings(max_examples=60, deadline=None)
@given(arr=scaled_arrays, block=st.sampled_from([1, 5, 64, 2048]), bits=st.sampled_from([4, 8, 16]))
def test_blockwise_nonlinear_error_bound_in_companded_space(arr, block, bits):
    """Levels are sign(k) (k/L)^2 absmax: in sqrt space the rounding error is at most half a level."""
    x = _tensor(arr)
    comp = make("blockwise", bits=bits, block_size=block, codebook="nonlinear")
    y = comp.decompress(comp.compress(x))
    L = {4: 7, 8: 127, 16: 32767}[bits]
    s = _block_scales(x, block).double()
    safe = torch.where(s > 0, s, torch.ones_like(s))
    cx = (x.double().abs() / safe).sqrt() * x.double().sign()
    cy = (y.double().abs() / safe).sqrt() * y.double().sign()
    assert torch.all((cx - cy).abs() <= 0.5 / L + 1e-5)
    assert torch.all(y.abs() <= s.float() * (1 + 1e-6))


@pytest.mark.parametrize("bits", [2, 4])
def test_low_bit_blockwise_packs_its_codes_and_2_bits_is_the_nearest_of_three_levels(bits):
    x = torch.randn(1001, generator=torch.Generator().manual_seed(3))
    comps = [make("blockwise", bits=bits, block_size=100, codebook=cb) for cb in ("linear", "nonlinear")]
    payloads = [c.compress(x) for c in comps]
    for p in payloads:
        assert p.data_nbytes == math.ceil(1001 * bits / 8) + 4 * 11  # packed codes + one fp32 scale per block
    if bits == 2:  # both codes have levels {-s, 0, s}: the same nearest-level rounding
        y = comps[1].decompress(payloads[1])
        assert torch.equal(y, comps[0].decompress(payloads[0]))
        s = _block_scales(x, 100)
        assert torch.equal(y, torch.where(x.abs() >= s / 2, x.sign() * s, torch.zeros_like(x)))


def test_blockwise_sign_and_exact_extremes():
    x = torch.tensor([-3.0, 0.0, 1e-3, 3.0, -1.5])
    y = make("blockwise").decompress(make("blockwise").compress(x))
    assert y[0] == -3.0 and y[3] == 3.0 and y[1] == 0.0
    assert torch.equal(torch.sign(y), torch.sign(x))


def test_blockwise_beats_bitsandbytes_on_gaussian():
    """The target's error half (the speed half is the benchmark's): rel. L2 error <= bnb's dynamic code."""
    import bitsandbytes.functional as bnbf

    x = torch.randn(1 << 20, generator=torch.Generator().manual_seed(0))
    q, stt = bnbf.quantize_blockwise(x, blocksize=2048)
    bnb_err = float((bnbf.dequantize_blockwise(q, stt) - x).norm() / x.norm())
    comp = make("blockwise", bits=8, block_size=2048, codebook="nonlinear")
    ours = float((comp.decompress(comp.compress(x)) - x).norm() / x.norm())
    assert ours <= bnb_err
    # the expected error from quantisation theory, per block of absmax a and L = 127 levels a side: a linear
    # code's step is a/L, so its squared error per element is (a/L)^2/12; the square-root companded code's
    # step at |x| is 2 sqrt(a|x|)/L (the levels' spacing, a (k/L)^2 at k = L sqrt(|x|/a)), so by Bennett's
    # integral its squared error per element is a|x|/(3 L^2)
    blocks = x.view(-1, 2048)
    a, n = blocks.abs().amax(1, keepdim=True), float(x.norm())
    linear_theory = math.sqrt(float(((a / 127) ** 2 / 12).sum() * 2048)) / n
    nonlinear_theory = math.sqrt(float((a * blocks.abs() / (3 * 127**2)).sum())) / n
    assert ours == pytest.approx(nonlinear_theory, rel=0.05)
    lin = make("blockwise", bits=8, block_size=2048, codebook="linear")
    assert float((lin.decompress(lin.compress(x)) - x).norm() / n) == pytest.approx(linear_theory, rel=0.05)


def test_blockwise_tiny_scales_do_not_overflow():
    x = torch.tensor([1e-38, -5e-39, 2e-45, 0.0] * 600)  # subnormal absmax per block
    for cb in ["linear", "nonlinear"]:
        comp = make("blockwise", codebook=cb, block_size=4)
        y = comp.decompress(comp.compress(x))
        assert torch.isfinite(y).all() and torch.equal(torch.sign(y[::4]), torch.sign(x[::4]))


# ----- unbiasedness -------------------------------------------------------------------------------------------------
def _mean_over_seeds(comp, x: torch.Tensor, seeds: int) -> torch.Tensor:
    acc = torch.zeros_like(x, dtype=torch.float64)
    for s in range(seeds):
        acc += comp.decompress(comp.compress(x, "w", State(seed=s))).double()
    return (acc / seeds).float()


@pytest.mark.parametrize(
    ("name", "params"),
    [
        ("blockwise", {"stochastic": True, "codebook": "linear"}),
        ("blockwise", {"stochastic": True, "codebook": "nonlinear"}),
        ("blockwise", {"stochastic": True, "bits": 4}),
        ("blockwise", {"stochastic": True, "bits": 2}),
        ("qsgd", {"levels": 4, "block_size": 64}),
        ("qsgd", {"levels": 1}),
        ("terngrad", {}),
    ],
)
def test_stochastic_quantizers_are_unbiased(name, params):
    """mean over many seeds -> input: the squared error of the mean is what its variance predicts (a biased
    quantizer's error would not shrink with the number of seeds), and far below one sample's error."""
    x = torch.randn(300, generator=torch.Generator().manual_seed(1)) * torch.logspace(-2, 1, 300)
    comp = make(name, **params)
    seeds = 600
    samples = torch.stack([comp.decompress(comp.compress(x, "w", State(seed=s))) for s in range(seeds)]).double()
    mean, var = samples.mean(0), samples.var(0)
    sq_err = float(((mean - x.double()) ** 2).sum())
    assert sq_err < 2.0 * float(var.sum()) / seeds + 1e-12, (sq_err, float(var.sum()) / seeds)
    assert sq_err < 0.01 * float(((samples[0] - x.double()) ** 2).sum()) + 1e-12


def test_deterministic_blockwise_is_biased_but_stochastic_is_not_on_a_constant():
    x = torch.full((4096,), 0.3)
    x[0] = 1.0  # absmax 1: 0.3 sits between two levels
    det = make("blockwise", codebook="linear")
    sto = make("blockwise", codebook="linear", stochastic=True)
    assert abs(float(det.decompress(det.compress(x))[1:].mean()) - 0.3) > 1e-4
    assert abs(float(_mean_over_seeds(sto, x, 50)[1:].mean()) - 0.3) < 1e-4


# ----- qsgd / terngrad / twobit value sets --------------------------------------------------------------------------
@settings(max_examples=30, deadline=None)
@given(arr=arrays(np.float32, st.integers(1, 600), elements=st.floats(-10, 10, width=32)),
       levels=st.sampled_from([1, 2, 7, 127, 300]), seed=st.integers(0, 99))
def test_qsgd_values_on_level_grid(arr, levels, seed):
    x = _tensor(arr)
    comp = make("qsgd", levels=levels, block_size=100)
    y = comp.decompress(comp.compress(x, state=State(seed=seed)))
    for b in range(0, x.numel(), 100):
        xb, yb = x[b : b + 100].double(), y[b : b + 100].double()
        norm = float(xb.norm())
        if norm == 0:
            assert torch.all(yb == 0)
            continue
        k = yb.abs() * levels / norm
        # on the level grid, up to 1e-3 of a level or two fp32 subnormal steps (a tiny block's norm and
        # values cannot be finer than those)
        assert torch.all((k - k.round()).abs() * norm / levels <= 1e-3 * norm / levels + 2.0**-148)
        assert torch.all((k - xb.abs() * levels / norm).abs() <= 1 + 1e-3)  # a neighbouring level
        assert torch.all((yb == 0) | (torch.sign(yb) == torch.sign(xb)))


def test_terngrad_values():
    x = torch.randn(1000)
    y = make("terngrad").decompress(make("terngrad").compress(x, state=State(seed=0)))
    s = float(x.abs().max())
    assert set(torch.unique(y / s).round().tolist()) <= {-1.0, 0.0, 1.0}
    assert torch.all((y == 0) | (torch.sign(y) == torch.sign(x)))


def test_twobit_codes_and_residual():
    comp = make("twobit", threshold=0.5)
    x = torch.tensor([0.7, -0.7, 0.2, -0.2, 0.5, -0.5])
    st_ = State()
    y = comp.decompress(comp.compress(x, "w", st_))
    assert y.tolist() == [0.5, -0.5, 0.0, 0.0, 0.5, -0.5]
    torch.testing.assert_close(comp.residual(st_, "w"), torch.tensor([0.2, -0.2, 0.2, -0.2, 0.0, 0.0]))
    y2 = comp.decompress(comp.compress(torch.full((6,), 0.3), "w", st_))  # residual 0.2 + 0.3 crosses t
    assert y2.tolist() == [0.5, 0.0, 0.5, 0.0, 0.0, 0.0]


# ----- casts --------------------------------------------------------------------------------------------------------
def test_fp16_out_of_range_is_an_error_not_inf():
    with pytest.raises(ValueError, match="fp16"):
        make("fp16").compress(torch.tensor([1.0, 1e5]))
    y = make("bf16").decompress(make("bf16").compress(torch.tensor([1e30])))
    assert torch.isfinite(y).all()


@pytest.mark.parametrize("name", ["none", "fp16", "bf16"])
def test_casts_round_trip(name):
    x = torch.randn(100)
    y = make(name).decompress(make(name).compress(x))
    tol = {"none": 0.0, "fp16": 1e-3, "bf16": 1e-2}[name]
    torch.testing.assert_close(y, x, rtol=tol, atol=tol)
