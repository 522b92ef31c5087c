"""SparseLoCo's compressor: what it keeps, how it codes values, what it remembers, what it sends."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from lowbw.comm import ThreadCollective, run_threads
from lowbw.compress import make
from lowbw.compress.base import State


def _x(n: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(n, generator=torch.Generator().manual_seed(seed)) * torch.logspace(-2, 0, n)


def test_keeps_the_largest_of_each_chunk_in_two_magnitudes_per_chunk():
    c = make("sparseloco", ratio=0.05, chunk=100, decay=1.0, variant="lowbw")
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
    c = make("sparseloco", ratio=0.02, chunk=256, decay=0.9, variant="lowbw")
    st = State(0)
    e_old = torch.zeros(2000)
    for step in range(3):
        x = _x(2000, seed=step)
        y = c.decompress(c.compress(x, "w", st))
        e_new = st["w"]["sparseloco.e"]
        torch.testing.assert_close(e_new, 0.9 * e_old + x - y, rtol=0, atol=1e-6)
        e_old = e_new.clone()


def test_wire_bytes_and_the_average_over_ranks():
    c = make("sparseloco", ratio=0.02, chunk=4096, variant="lowbw")
    x = _x(10000)
    p = c.compress(x, "w", State(0))
    k = 2 * 82 + math.ceil(0.02 * (10000 - 8192))  # two full chunks and a tail
    assert p.data_nbytes == 2 * k + math.ceil(2 * k / 8) + 8 * 3
    colls = ThreadCollective.group(3, "ring")
    xs = [_x(10000, seed=r) for r in range(3)]

    def work(r, coll):
        st = State(r)
        c = make("sparseloco", variant="lowbw")
        return c.aggregate(xs[r], coll, "w", st), c.decompress(c.compress(xs[r], "w", State(r)))

    res = run_threads(work, colls, timeout=60)
    mean = (res[0][1] + res[1][1] + res[2][1]) / 3
    for out, _ in res:
        torch.testing.assert_close(out, mean, rtol=0, atol=1e-7)


@pytest.mark.parametrize(("kw", "match"), [({"ratio": 0.0}, "ratio=0.0"), ({"chunk": 0, "variant": "lowbw"}, "chunk=0"),
                                           ({"decay": 1.5}, "decay=1.5"),
                                           ({"error_feedback": True}, "error_feedback=True")])
def test_bad_parameters_are_named(kw, match):
    with pytest.raises(ValueError, match=match):
        make("sparseloco", **kw)


# ----- the authors' computation (variant="authors") against their code's outputs --------------------------------
_REF = Path(__file__).parent / "data" / "sparseloco_authors.pt"


def _ref_inputs(shapes, worker: int, step: int) -> list[torch.Tensor]:
    """The pseudo-gradients ``tests/compress/data/make_sparseloco_authors.py`` fed to the authors' code."""
    g = torch.Generator().manual_seed(1000 * worker + step)
    return [torch.randn(s, generator=g) * torch.logspace(-2, 0, int(torch.tensor(s).prod())).view(s) for s in shapes]


def test_authors_variant_equals_the_authors_code_on_identical_inputs():
    """tplr-y/CCLoco at 5bfce52 (``CCLoco.step``, 2-bit statistical quantisation, 64 x 64 tiles, top_k 32,
    1-D rate_2d, error decay 0.95), two workers, three steps, outputs stored by the script beside the fixture:
    the aggregate every step and each worker's error buffer after the last are bit-identical."""
    ref = torch.load(_REF, weights_only=False)
    shapes, steps, workers = ref["shapes"], ref["steps"], ref["workers"]
    comp = make("sparseloco", ratio=32 / 4096, decay=0.95, variant="authors", tile=64)
    states = [State(r) for r in range(workers)]
    for step in range(steps):
        xs = [_ref_inputs(shapes, r, step) for r in range(workers)]

        def work(r, coll, xs=xs):
            return [comp.aggregate(x, coll, f"t{i}", states[r]) for i, x in enumerate(xs[r])]

        res = run_threads(work, ThreadCollective.group(workers, "ring"), timeout=60)
        for i, want in enumerate(ref["outputs"][("aggregate", step)]):
            for r in range(workers):
                assert torch.equal(res[r][i], want.to_dense()), (step, i, r)
    for r in range(workers):
        for i, want in enumerate(ref["outputs"][("error", r)]):
            assert torch.equal(states[r][f"t{i}"]["sparseloco.e"].view(want.shape), want), (r, i)


def test_authors_aggregate_is_the_mean_over_the_workers_that_sent_an_index():
    """Where one of two workers sent an index, the authors' aggregate is its decoded value, ``lowbw``'s half of
    it (sum / R); where both sent it, both give the mean of the two decoded values."""
    xs = [_x(8192, seed=r).view(64, 128) for r in range(2)]
    for variant, kw, share in (("authors", {"tile": 64}, 1.0), ("lowbw", {"chunk": 4096}, 0.5)):
        comp = make("sparseloco", ratio=0.02, decay=1.0, variant=variant, **kw)
        dec = [comp.decompress(comp.compress(xs[r], "w", State(r))) for r in range(2)]

        def work(r, coll, comp=comp):
            return comp.aggregate(xs[r], coll, "w", State(r))

        out = run_threads(work, ThreadCollective.group(2, "ring"), timeout=60)[0]
        one = (dec[0] != 0) ^ (dec[1] != 0)
        both = (dec[0] != 0) & (dec[1] != 0)
        assert one.any() and both.any()
        torch.testing.assert_close(out[one], share * (dec[0] + dec[1])[one], rtol=0, atol=1e-7)
        torch.testing.assert_close(out[both], ((dec[0] + dec[1]) / 2)[both], rtol=0, atol=1e-7)


def test_authors_tiles_and_payload_bytes():
    """2-D sides cut at their largest divisor <= 64, 1-D runs at the largest divisor <= 4096; k int16 indices,
    2-bit codes and 5 fp32 (the shift and 4 bin means) per tensor."""
    comp = make("sparseloco", ratio=0.02, variant="authors")
    for shape, tiles, k in [((128, 192), 2 * 3, 82), ((96, 120), 2 * 2, 82), ((4100,), 2, round(2050 * 82 / 4096)),
                            ((100,), 1, 2), ((8, 3, 5, 5), 3, 82)]:  # [8, 75]: 8 x 25 tiles
        x = _x(math.prod(shape)).view(shape)
        p = comp.compress(x, "w", State(0))
        n = tiles * k
        assert p.data_nbytes == 2 * n + math.ceil(2 * n / 8) + 4 * 5, shape
        y = comp.decompress(p)
        assert int((y != 0).sum()) <= n and y.shape == x.shape


def test_variants_are_named_and_their_own_keys_checked():
    assert make("sparseloco").params["variant"] == "authors"
    with pytest.raises(ValueError, match="variant='x'"):
        make("sparseloco", variant="x")
    with pytest.raises(ValueError, match="chunk=4096"):
        make("sparseloco", chunk=4096)  # the authors' variant has tiles, not runs
    with pytest.raises(ValueError, match="tile=64"):
        make("sparseloco", variant="lowbw", tile=64)
