"""Natural compression (lowbw.compress.natural): values against the two powers of two around them worked out by
hand, the rounding probabilities, unbiasedness, exact bytes, determinism per seed, and the aggregate against
the rank-order mean of what every rank's payload decodes to."""

from __future__ import annotations

import math

import pytest
import torch

from lowbw.comm import ThreadCollective, run_threads
from lowbw.compress import State, available, make
from lowbw.compress.base import HEADER_BYTES_PER_DIM, HEADER_BYTES_PER_PART
from lowbw.compress.registry import entry


def test_registered_as_an_unbiased_quantizer_without_error_feedback():
    assert "natural" in available()
    e = entry("natural")
    assert e.family == "quantize" and not e.error_feedback and not e.value_sized
    assert not make("natural").summable


def test_powers_of_two_and_zero_pass_unchanged():
    # mantissa 0: the probability of rounding up is 0, whatever the draw
    x = torch.tensor([1.0, -2.0, 0.5, 0.0, 2.0 ** -126, -(2.0 ** 100), 2.0 ** -149 * 0])
    c = make("natural")
    for seed in range(5):
        assert torch.equal(c.decompress(c.compress(x, state=State(seed=seed))), x)


def test_each_value_lands_on_one_of_its_two_powers_of_two():
    # 3 = 1.5 * 2^1 -> 2 or 4; -5 = -1.25 * 2^2 -> -4 or -8; 0.75 -> 0.5 or 1; 2^-127 (subnormal) -> 0 or 2^-126
    cases = {3.0: (2.0, 4.0), -5.0: (-4.0, -8.0), 0.75: (0.5, 1.0), 2.0 ** -127: (0.0, 2.0 ** -126)}
    x = torch.tensor(list(cases)).repeat(500)
    y = make("natural").decompress(make("natural").compress(x, state=State(seed=1)))
    for i, v in enumerate(x.tolist()):
        assert y[i].item() in cases[v]


def test_rounding_probabilities_and_unbiased_mean():
    # P(up) = (|t| - 2^a) / 2^a: 3 -> 0.5, -5 -> 0.25, 0.75 -> 0.5, 1.875 -> 0.875
    probs = {3.0: 0.5, -5.0: 0.25, 0.75: 0.5, 1.875: 0.875}
    n = 40_000
    c = make("natural")
    for t, p in probs.items():
        y = c.decompress(c.compress(torch.full((n,), t), state=State(seed=7)))
        low = 2.0 ** math.floor(math.log2(abs(t)))
        up = (y.abs() == 2 * low).double().mean().item()
        sd = math.sqrt(p * (1 - p) / n)
        assert abs(up - p) < 5 * sd, (t, up)
        # unbiased: E[C(t)] = t (mean within 5 standard errors; Var C(t) = p (1 - p) (2^a)^2)
        assert abs(y.double().mean().item() - t) < 5 * sd * low


def test_largest_binade_stays_finite():
    top = 1.75 * 2.0 ** 127  # rounding up would give 2^128 = inf: kept at 2^127 (the documented variant)
    y = make("natural").decompress(make("natural").compress(torch.tensor([top, -top] * 50), state=State(seed=0)))
    assert torch.isfinite(y).all() and torch.equal(y.abs(), torch.full((100,), 2.0 ** 127))


@pytest.mark.parametrize("shape", [(0,), (1,), (7,), (9, 3), (2, 5, 11)])
def test_nbytes_is_one_exponent_byte_and_one_sign_bit_per_value(shape):
    x = torch.randn(shape, generator=torch.Generator().manual_seed(0))
    p = make("natural").compress(x, state=State(seed=0))
    n = x.numel()
    assert p.nbytes == n + math.ceil(n / 8) + HEADER_BYTES_PER_DIM * len(shape) + 2 * HEADER_BYTES_PER_PART
    y = make("natural").decompress(p)
    assert y.shape == x.shape and y.dtype == x.dtype


def test_half_input_keeps_its_dtype_and_the_same_seed_gives_the_same_bits():
    x = torch.randn(300, generator=torch.Generator().manual_seed(3))
    c = make("natural")
    a, b = c.compress(x, state=State(seed=11)), c.compress(x, state=State(seed=11))
    assert all(torch.equal(p, q) for p, q in zip(a.parts, b.parts, strict=True))
    other = c.compress(x, state=State(seed=12))
    assert not torch.equal(a.parts[0], other.parts[0])
    assert c.decompress(c.compress(x.half(), state=State(seed=11))).dtype == torch.float16


def test_aggregate_is_the_rank_order_mean_of_the_decoded_payloads():
    n = 3
    xs = [torch.randn(257, generator=torch.Generator().manual_seed(r)) * (r + 1) for r in range(n)]
    c = make("natural")
    out = run_threads(lambda r, coll: c.aggregate(xs[r], coll, "w", State(seed=100 + r)),
                      ThreadCollective.group(n, "ring"))
    decoded = [c.decompress(c.compress(xs[r], "w", State(seed=100 + r))) for r in range(n)]
    want = (decoded[0] + decoded[1] + decoded[2]) / n
    for o in out:
        torch.testing.assert_close(o, want, rtol=1e-6, atol=0)
        assert torch.equal(o, out[0])  # every rank the same bits
