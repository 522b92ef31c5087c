"""The interface every compressor shares: registry, parameters, Payload.nbytes, shapes/dtypes, edge inputs,
non-finite inputs, state keyed by name, error feedback."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from lowbw.compress import ErrorFeedback, NonFiniteError, Payload, State, available, make
from lowbw.compress.base import HEADER_BYTES_PER_DIM, HEADER_BYTES_PER_PART

# the compressors this file was written with; every registered one (ALL) runs the shared interface's tests
KNOWN = [
    "none", "fp16", "bf16", "blockwise", "qsgd", "terngrad", "twobit", "threshold", "topk", "randomk", "dgc",
    "signsgd", "ef_signsgd", "onebit", "powersgd", "artopk", "sparseloco", "demo",
]
SHAPES = [(), (0,), (1,), (7,), (3, 0), (5, 3), (2049,), (3, 5, 7), (64, 33), (4, 1, 3, 3)]
DTYPES = [torch.float32, torch.float16, torch.bfloat16]


ALL = available()


def test_available_lists_every_method():
    assert sorted(ALL) == ALL and set(KNOWN) <= set(ALL)


@pytest.mark.parametrize("name", ALL)
def test_make_with_defaults_and_repr(name):
    c = make(name)
    assert c.name == name
    r = repr(c)  # ClassName(field=value, ...), the class of the object (a wrapper's holding its inner one)
    assert r.startswith(type(c).__name__ + "(") and r.endswith(")") and r.count("(") == r.count(")")
    assert isinstance(c.summable, bool)


@pytest.mark.parametrize(
    ("name", "params", "needle"),
    [
        ("blockwise", {"bits": 3}, "bits=3"),
        ("blockwise", {"bits": True}, "bits=True"),
        ("blockwise", {"block_size": 0}, "block_size=0"),
        ("blockwise", {"block_size": -5}, "block_size=-5"),
        ("blockwise", {"block_size": 2.5}, "block_size=2.5"),
        ("blockwise", {"codebook": "log"}, "codebook='log'"),
        ("blockwise", {"stochastic": 1}, "stochastic=1"),
        ("topk", {"ratio": 0}, "ratio=0"),
        ("topk", {"ratio": 1.5}, "ratio=1.5"),
        ("randomk", {"ratio": -0.1}, "ratio=-0.1"),
        ("dgc", {"ratio": float("nan")}, "ratio=nan"),
        ("artopk", {"ratio": 2}, "ratio=2"),
        ("artopk", {"mode": "ring"}, "mode='ring'"),
        ("threshold", {"alpha": -1.0}, "alpha=-1.0"),
        ("qsgd", {"levels": 0}, "levels=0"),
        ("qsgd", {"levels": 40000}, "levels=40000"),
        ("powersgd", {"rank": 0}, "rank=0"),
        ("dgc", {"momentum": 1.0}, "momentum=1.0"),
        ("onebit", {"granularity": "row"}, "granularity='row'"),
        ("twobit", {"threshold": 0}, "threshold=0"),
        ("topk", {"foo": 1}, "'foo'"),
        ("none", {"bits": 8}, "'bits'"),
        ("topk", {"error_feedback": "yes"}, "error_feedback='yes'"),
        ("ef_signsgd", {"error_feedback": False}, "error_feedback=False"),
    ],
)
def test_bad_parameters_name_param_value_and_allowed(name, params, needle):
    with pytest.raises(ValueError) as e:
        make(name, **params)
    msg = str(e.value)
    assert needle in msg and "allowed" in msg


def test_unknown_name():
    with pytest.raises(ValueError, match=r"name='nope'.*allowed: artopk, bf16"):
        make("nope")


def test_error_feedback_switch():
    assert isinstance(make("topk"), ErrorFeedback)
    assert not isinstance(make("topk", error_feedback=False), ErrorFeedback)
    assert isinstance(make("blockwise", error_feedback=True), ErrorFeedback)
    with pytest.raises(ValueError, match="already has error feedback"):
        ErrorFeedback(make("topk"))
    with pytest.raises(TypeError):
        ErrorFeedback("topk")
    for own in ("dgc", "powersgd", "artopk", "sparseloco", "demo"):
        with pytest.raises(ValueError, match="own memory"):
            ErrorFeedback(make(own))


# ----- exact nbytes ------------------------------------------------------------------------------------------
def _data_bytes(name: str, shape: tuple[int, ...]) -> int:
    n = math.prod(shape)
    k = 0 if n == 0 else max(1, math.ceil(0.01 * n))
    ceil = math.ceil
    if name == "sparseloco":  # authors: tiles <= 64 x 64 (1-D: runs <= 4096), 82 kept of a full tile, int16
        from lowbw.compress.demo import largest_divisor_at_most as div  # index + 2-bit code each, 5 fp32 a tensor

        if len(shape) >= 2 and n:
            rows, cols = shape[0], n // shape[0]
            size = div(rows, 64) * div(cols, 64)
            kk = (n // size) * min(82, size)
        else:
            run = div(n, 4096) if n else 1
            kk = (n // run) * min(max(1, round(run * 82 / 4096)), run)
        return 2 * kk + ceil(2 * kk / 8) + 20
    if name == "demo":  # DCT blocks: largest divisors <= 64 of rows and columns; 32 of each: int16 + fp32
        from lowbw.compress.demo import largest_divisor_at_most as div

        rows = shape[0] if len(shape) >= 2 and n else 1
        size = div(rows, 64) * div(n // rows, 64) if n else 1
        return (n // size) * min(32, size) * 6
    if name == "powersgd":
        c = make("powersgd")
        ms = c.matrix_shape(torch.Size(shape))
        return 4 * n if ms is None else 4 * (ms[0] + ms[1]) * ms[2]
    return {
        "none": 4 * n, "fp16": 2 * n, "bf16": 2 * n,
        "blockwise": n + 4 * ceil(n / 2048),
        "qsgd": n + 4 * ceil(n / 512),
        "terngrad": ceil(n / 4) + 4, "twobit": ceil(n / 4),
        "topk": 8 * k, "artopk": 8 * k, "randomk": 4 * k,
        "dgc": 8 * (0 if n == 0 else max(1, ceil(0.001 * n))),
        "signsgd": ceil(n / 8), "ef_signsgd": ceil(n / 8) + 4, "onebit": ceil(n / 8) + 8 * ceil(n / 2048),
    }[name]


@settings(max_examples=60, deadline=None)
@given(name=st.sampled_from([a for a in ALL if a != "threshold"]),
       shape=st.lists(st.integers(0, 70), min_size=0, max_size=3).map(tuple))
def test_nbytes_exact(name, shape):
    x = torch.randn(shape)
    p = make(name).compress(x)
    assert all(t.dim() == 1 for t in p.parts)
    assert p.data_nbytes == sum(t.numel() * t.element_size() for t in p.parts)
    assert p.nbytes == p.data_nbytes + HEADER_BYTES_PER_DIM * len(shape) + HEADER_BYTES_PER_PART * len(p.parts)
    if name in KNOWN:  # the bytes by hand of the compressors this file was written with; a newer one's in its own file
        assert p.data_nbytes == _data_bytes(name, shape)


def test_nbytes_other_widths():
    x = torch.randn(1000)
    assert make("blockwise", bits=16, block_size=100).compress(x).data_nbytes == 2000 + 40
    assert make("qsgd", levels=1).compress(x).data_nbytes == 250 + 8  # 2-bit codes
    assert make("qsgd", levels=7).compress(x).data_nbytes == 500 + 8  # 4-bit codes
    assert make("qsgd", levels=1000).compress(x).data_nbytes == 2000 + 8  # 16-bit codes
    p = make("threshold", alpha=0.5, error_feedback=False).compress(x)
    assert p.data_nbytes == 8 * int((x.abs() >= 0.5).sum())
    assert isinstance(p, Payload) and p.numel == 1000


# ----- shapes, dtypes, edge inputs ------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize("dtype", DTYPES)
def test_round_trip_shape_dtype_any_shape(name, dtype):
    comp = make(name)
    for shape in SHAPES:
        x = torch.randn(shape).to(dtype)
        y = comp.decompress(comp.compress(x, name=str(shape)))
        assert y.shape == x.shape and y.dtype == dtype and y.device == x.device
        assert torch.isfinite(y).all()


@pytest.mark.parametrize("name", ALL)
def test_all_zero_input(name):
    comp = make(name)
    x = torch.zeros(3000)
    y = comp.decompress(comp.compress(x))
    if name == "signsgd":
        assert torch.equal(y, torch.ones(3000))  # sign(0) decodes as +1 (documented)
    else:
        assert torch.equal(y, x)


@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_non_finite_input_raises(name, bad):
    comp = make(name)
    x = torch.randn(5000)
    x[4321] = bad
    with pytest.raises(NonFiniteError, match="non-finite"):
        comp.compress(x)


def test_non_floating_input():
    with pytest.raises(TypeError):
        make("topk").compress(torch.arange(10))
    with pytest.raises(TypeError):
        make("blockwise").compress(torch.arange(10))


@pytest.mark.parametrize("name", ALL)
def test_no_aliasing_and_input_untouched(name):
    comp = make(name)
    x = torch.randn(50, 41)
    x0 = x.clone()
    p = comp.compress(x, state=State(seed=0))
    assert torch.equal(x, x0)
    y1 = comp.decompress(p)
    x.add_(1000.0)
    assert torch.equal(comp.decompress(p), y1)
    y1.add_(1000.0)  # the output is not the payload's memory either
    assert not torch.equal(comp.decompress(p), y1)


def test_non_contiguous_input():
    x = torch.randn(30, 40).t()
    for name in ["blockwise", "topk", "onebit", "powersgd"]:
        y = make(name).decompress(make(name).compress(x))
        assert y.shape == x.shape


# ----- state and error feedback ---------------------------------------------------------------------------------
EF_METHODS = ["threshold", "topk", "randomk", "twobit", "ef_signsgd", "onebit"]


@settings(max_examples=30, deadline=None)
@given(name=st.sampled_from(EF_METHODS + ["blockwise", "qsgd", "terngrad", "signsgd"]),
       n=st.integers(1, 3000), steps=st.integers(1, 4), seed=st.integers(0, 2**16))
def test_error_feedback_conserves_mass(name, n, steps, seed):
    """sum of what was sent (decompressed) + final residual == sum of the inputs (elementwise)."""
    comp = make(name) if name in EF_METHODS else ErrorFeedback(make(name))
    g = torch.Generator().manual_seed(seed)
    state = State(seed=seed)
    sent = torch.zeros(n, dtype=torch.float64)
    total = torch.zeros(n, dtype=torch.float64)
    for _ in range(steps):
        x = torch.randn(n, generator=g)
        total += x.double()
        sent += comp.decompress(comp.compress(x, "w", state)).double()
    resid = comp.residual(state, "w").double()
    torch.testing.assert_close(sent + resid, total, rtol=1e-5, atol=1e-5)


def test_state_is_keyed_by_name_and_resets():
    comp = make("topk", ratio=0.1)
    st_ = State()
    comp.compress(torch.ones(100), "a", st_)
    comp.compress(-torch.ones(50), "b", st_)
    assert set(st_.names()) == {"a", "b"}
    assert comp.residual(st_, "a").shape == (100,) and comp.residual(st_, "b").shape == (50,)
    assert float(comp.residual(st_, "a").sum()) == pytest.approx(90.0)
    assert float(comp.residual(st_, "b").sum()) == pytest.approx(-45.0)
    st_.reset("a")
    assert "a" not in st_ and "b" in st_
    st_.reset()
    assert st_.names() == []


def test_default_state_when_none():
    comp = make("topk", ratio=0.5)
    comp.compress(torch.ones(4))
    assert float(comp.residual(None).sum()) == pytest.approx(2.0)


@pytest.mark.parametrize("name", ["qsgd", "terngrad"])
def test_state_seed_makes_stochastic_compressors_deterministic(name):
    comp = make(name)
    x = torch.randn(2000)
    a = comp.decompress(comp.compress(x, state=State(seed=7)))
    b = comp.decompress(comp.compress(x, state=State(seed=7)))
    c = comp.decompress(comp.compress(x, state=State(seed=8)))
    assert torch.equal(a, b) and not torch.equal(a, c)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (none on CPU-only machines)")
@pytest.mark.parametrize("name", ALL)
def test_cuda_matches_cpu_shapes(name):
    x = torch.randn(3000, 7, device="cuda")
    comp = make(name)
    p = comp.compress(x, state=State(seed=0))
    assert all(t.device.type == "cuda" for t in p.parts)
    y = comp.decompress(p)
    assert y.device.type == "cuda" and y.shape == x.shape
    if name in {"none", "fp16", "bf16", "blockwise", "twobit", "signsgd", "ef_signsgd", "onebit", "topk"}:
        y_cpu = make(name).decompress(make(name).compress(x.cpu(), state=State(seed=0)))
        torch.testing.assert_close(y.cpu(), y_cpu, rtol=1e-5, atol=1e-6)


def test_error_feedback_residual_untouched_when_compression_fails():
    comp = ErrorFeedback(make("fp16"))
    st_ = State()
    comp.compress(torch.tensor([1.0, 2.0]), "w", st_)
    before = comp.residual(st_, "w").clone()
    with pytest.raises(ValueError, match="fp16"):
        comp.compress(torch.tensor([1.0, 1e5]), "w", st_)
    assert torch.equal(comp.residual(st_, "w"), before)


@pytest.mark.parametrize("name", ["blockwise", "twobit", "threshold", "topk", "onebit", "signsgd", "ef_signsgd"])
def test_chunked_pipelines_match_one_chunk(monkeypatch, name):
    """CPU pipelines run in chunks of quantize.CPU_CHUNK entries: tiny chunks give the same result as one."""
    import lowbw.compress.quantize as quantize

    x = torch.randn(10_000, generator=torch.Generator().manual_seed(3))
    params = {"blockwise": {"block_size": 100}, "onebit": {"block_size": 100}, "threshold": {"alpha": 1.0},
              "twobit": {"threshold": 1.0}}.get(name, {})
    whole = make(name, **params).decompress(make(name, **params).compress(x, state=State(seed=0)))
    monkeypatch.setattr(quantize, "CPU_CHUNK", 250)
    chunked = make(name, **params).decompress(make(name, **params).compress(x, state=State(seed=0)))
    torch.testing.assert_close(chunked, whole, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize(("name", "params"), [("qsgd", {"block_size": 100}), ("terngrad", {}),
                                                ("blockwise", {"stochastic": True, "block_size": 100})])
def test_chunked_stochastic_pipelines_stay_on_the_grid(monkeypatch, name, params):
    import lowbw.compress.quantize as quantize

    monkeypatch.setattr(quantize, "CPU_CHUNK", 250)
    x = torch.randn(10_000, generator=torch.Generator().manual_seed(3))
    comp = make(name, **params)
    y = comp.decompress(comp.compress(x, state=State(seed=0)))
    assert torch.all((y == 0) | (torch.sign(y) == torch.sign(x)))
    assert float((y - x).norm() / x.norm()) < {"qsgd": 0.2, "terngrad": 3.0, "blockwise": 0.05}[name]
