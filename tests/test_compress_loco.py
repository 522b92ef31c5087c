"""SparseLoCo's compressor: what it keeps, how it codes values, what it remembers, what it sends."""

from __future__ import annotations

import math

import pytest
import torch

from lowbw.comm import ThreadCollective, run_threads
from lowbw.compress import make
from lowbw.compress.base import State


def _x(n: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(n, generator=torch.Generator().manual_seed(seed)) * torch.logspace(-2, 0, n)


def test_keeps_the_largest_of_each_chunk_in_two_magnitudes_per_chunk():
    c = make("sparseloco", ratio=0.05, chunk=100, decay=1.0)
    x = _x(1030)
    y = c.decompress(c.compress(x, "w", State(0)))
    for a in range(0, 1030, 100):
        xc, yc = x[a:a + 100], y[a:a + 100]
        k = math.ceil(0.05 * xc.numel())
        kept = yc != 0
        assert int(kept.sum()) == k
        assert set(kept.nonzero().flatten().tolist()) == set(xc.abs().topk(k).indices.tolist())
        assert torch.equal(yc[kept].sign(), xc[kept].sign())
        mags = xc[kept].abs().sort(descending=True).values
        h = (k + 1) // 2
        want = {round(float(mags[:h].mean()), 6), round(float(mags[h:].mean() if k > h else mags[:h].mean()), 6)}
        assert {round(float(v), 6) for v in yc[kept].abs()} <= want


def test_the_accumulator_decays_and_keeps_what_was_not_sent():
    """e_new = decay * e_old + x - decoded, exactly as the module's step 1-4 say."""
    c = make("sparseloco", ratio=0.02, chunk=256, decay=0.9)
    st = State(0)
    e_old = torch.zeros(2000)
    for step in range(3):
        x = _x(2000, seed=step)
        y = c.decompress(c.compress(x, "w", st))
        e_new = st["w"]["sparseloco.e"]
        torch.testing.assert_close(e_new, 0.9 * e_old + x - y, rtol=0, atol=1e-6)
        e_old = e_new.clone()


def test_wire_bytes_and_the_average_over_ranks():
    c = make("sparseloco", ratio=0.02, chunk=4096)
    x = _x(10000)
    p = c.compress(x, "w", State(0))
    k = 2 * 82 + math.ceil(0.02 * (10000 - 8192))  # two full chunks and a tail
    assert p.data_nbytes == 2 * k + math.ceil(2 * k / 8) + 8 * 3
    colls = ThreadCollective.group(3, "ring")
    xs = [_x(10000, seed=r) for r in range(3)]

    def work(r, coll):
        st = State(r)
        out = make("sparseloco").aggregate(xs[r], coll, "w", st)
        return out, make("sparseloco").decompress(make("sparseloco").compress(xs[r], "w", State(r)))

    res = run_threads(work, colls, timeout=60)
    mean = (res[0][1] + res[1][1] + res[2][1]) / 3
    for out, _ in res:
        torch.testing.assert_close(out, mean, rtol=0, atol=1e-7)


@pytest.mark.parametrize(("kw", "match"), [({"ratio": 0.0}, "ratio=0.0"), ({"chunk": 0}, "chunk=0"),
                                           ({"decay": 1.5}, "decay=1.5"),
                                           ({"error_feedback": True}, "error_feedback=True")])
def test_bad_parameters_are_named(kw, match):
    with pytest.raises(ValueError, match=match):
        make("sparseloco", **kw)
