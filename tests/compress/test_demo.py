"""DeMo's compressor (Peng, Quesnelle & Kingma 2024): the DCT, what it keeps, what its momentum remembers, what it
sends, and that it trains in the engine."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.fft
import torch

from lowbw.comm import ThreadCollective, run_threads
from lowbw.comm.testing import run_procs
from lowbw.compress import ErrorFeedback, State, available, make
from lowbw.compress.demo import dct_matrix, largest_divisor_at_most


def _x(shape, seed: int = 0) -> torch.Tensor:
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed))


def test_registered_and_defaults_are_the_papers():
    assert "demo" in available()
    c = make("demo")
    assert (c.chunk, c.topk, c.decay, c.sign) == (64, 32, 0.999, True)
    with pytest.raises(ValueError, match="own memory"):
        ErrorFeedback(c)


@pytest.mark.parametrize("n", [1, 2, 7, 56, 64])
def test_dct_matrix_is_scipys_orthonormal_dct_ii(n):
    d = dct_matrix(n)
    torch.testing.assert_close(d @ d.T, torch.eye(n), rtol=0, atol=1e-6)
    x = np.random.default_rng(n).standard_normal(n)
    want = scipy.fft.dct(x, type=2, norm="ortho")
    np.testing.assert_allclose((d.double() @ torch.from_numpy(x)).numpy(), want, rtol=0, atol=1e-6)


@pytest.mark.parametrize(("n", "s", "want"), [(784, 64, 56), (96, 64, 48), (10, 64, 10), (64, 64, 64),
                                              (13, 8, 1), (1, 64, 1), (4096, 64, 64)])
def test_chunks_are_the_largest_divisor_at_most_s(n, s, want):
    assert largest_divisor_at_most(n, s) == want


@pytest.mark.parametrize("shape", [(1,), (100,), (13,), (128, 96), (10, 784), (8, 3, 5, 5)])
def test_block_dct_round_trip_is_exact(shape):
    c = make("demo")
    bl = c.blocks(torch.Size(shape))
    x = _x(shape).reshape(-1)
    d1, d2 = dct_matrix(bl.c1), dct_matrix(bl.c2)
    y = bl.to_coeffs(x, d1, d2)
    assert y.shape == (bl.count, bl.size)
    torch.testing.assert_close(y.square().sum(), x.square().sum(), rtol=1e-5, atol=0)  # orthonormal: energy kept
    torch.testing.assert_close(bl.from_coeffs(y, d1, d2), x, rtol=0, atol=1e-5)


def test_a_matrix_block_gets_the_2d_dct_of_its_rows_and_columns():
    c = make("demo", chunk=8)
    x = _x((16, 24))
    bl = c.blocks(x.shape)
    assert (bl.c1, bl.c2, bl.count, bl.size) == (8, 8, 6, 64)
    d = dct_matrix(8).double()
    y = bl.to_coeffs(x.reshape(-1), dct_matrix(8), dct_matrix(8))
    block = x[8:16, 16:24].double()  # block row 1, block column 2 -> block index 1 * 3 + 2
    torch.testing.assert_close(y[5].double(), (d @ block @ d.T).reshape(-1), rtol=0, atol=1e-5)


def _threads(xs, fn):
    colls = ThreadCollective.group(len(xs), "ring", timeout=60)
    return run_threads(fn, colls, timeout=60)


@pytest.mark.parametrize("shape", [(100,), (16, 24)])
def test_with_every_coefficient_and_no_decay_the_update_is_the_sign_of_the_mean_gradient(shape):
    xs = [_x(shape, seed=r) for r in range(3)]
    mean = sum(xs) / 3
    full = make("demo", chunk=8).blocks(torch.Size(shape)).size  # k = the whole block
    for sign in (True, False):
        c = make("demo", chunk=8, topk=full, decay=0.0, sign=sign)
        outs = _threads(xs, lambda r, coll, c=c: c.aggregate(xs[r], coll, "w", State(r)))
        for out in outs:
            assert out.shape == shape
            if sign:
                assert torch.equal(out, mean.sign())
            else:
                torch.testing.assert_close(out, mean, rtol=0, atol=1e-5)


def test_momentum_keeps_what_was_not_sent_and_the_top_k_coefficients_are_sent():
    """m_new = beta * m_old + g - idct(q), q the k largest DCT coefficients of beta * m_old + g per block."""
    c = make("demo", chunk=8, topk=5, decay=0.9, sign=False)
    st = State(0)
    m_old = torch.zeros(16 * 24)
    d = dct_matrix(8).double()
    for step in range(3):
        g = _x((16, 24), seed=step)
        acc = 0.9 * m_old + g.reshape(-1)
        p = c.compress(g, "w", st)
        q = c.decompress(p).reshape(-1)
        m_new = c.momentum(st, "w")
        torch.testing.assert_close(m_new, acc - q, rtol=0, atol=1e-6)
        idx, vals = p.parts
        a = acc.view(16, 24).double()
        for b in range(6):  # each 8x8 block: the sent values are its 5 largest DCT coefficients
            i, j = divmod(b, 3)
            coef = (d @ a[8 * i: 8 * i + 8, 8 * j: 8 * j + 8] @ d.T).reshape(-1)
            top = coef.abs().topk(5).indices.sort().values
            assert idx[5 * b: 5 * b + 5].tolist() == top.tolist()
            torch.testing.assert_close(vals[5 * b: 5 * b + 5].double(), coef[top], rtol=0, atol=1e-5)
        m_old = m_new.clone()


def test_payload_bytes_are_k_indices_and_values_a_block_plus_the_header():
    c = make("demo")  # s = 64, k = 32
    p = c.compress(_x((128, 96)), "w", State(0))  # blocks 64 x 48: 2 x 2 of them
    assert [t.dtype for t in p.parts] == [torch.int16, torch.float32]
    assert p.data_nbytes == 4 * 32 * (2 + 4)
    assert p.nbytes == p.data_nbytes + 8 * 2 + 8 * 2
    p = c.compress(_x((100,)), "b", State(0))  # chunks of 50: 2 of them
    assert p.data_nbytes == 2 * 32 * 6 and p.nbytes == 2 * 32 * 6 + 8 + 16
    p = c.compress(_x((10,)), "b", State(0))  # one chunk of 10: k clamped to 10
    assert p.data_nbytes == 10 * 6
    assert make("demo", chunk=256, topk=8).compress(_x((256, 256))).parts[0].dtype == torch.int32  # 65536 a block


def test_bytes_counted_by_the_collective_are_the_payloads():
    xs = [_x((128, 96), seed=r) for r in range(2)]
    c = make("demo")

    def fn(r, coll):
        c.aggregate(xs[r], coll, "w", State(r))
        return sum(call.nbytes for call in coll.calls)

    sent = _threads(xs, fn)
    assert sent == [4 * 32 * 6] * 2


def test_different_coefficients_are_averaged_over_their_senders():
    """The reference's scatter_reduce(mean, include_self=False): each coefficient over the ranks that sent it."""
    xs = [_x((100,), seed=r) * (1 + 3 * r) for r in range(3)]
    c = make("demo", chunk=10, topk=2, sign=False)
    outs = _threads(xs, lambda r, coll: c.aggregate(xs[r], coll, "w", State(r)))
    total, count = torch.zeros(10, 10), torch.zeros(10, 10)
    for r in range(3):
        idx, vals = c.compress(xs[r], "w", State(r)).parts
        total.scatter_add_(1, idx.long().view(10, 2), vals.view(10, 2))
        count.scatter_add_(1, idx.long().view(10, 2), torch.ones(10, 2))
    assert int((count > 1).sum()) > 0 and int((count == 1).sum()) > 0  # the case that matters occurs
    want = ((total / count.clamp_min(1)) @ dct_matrix(10)).reshape(-1)  # x = D^T y per chunk
    for out in outs:
        torch.testing.assert_close(out, want, rtol=0, atol=1e-6)
    assert torch.equal(outs[0], outs[1]) and torch.equal(outs[1], outs[2])


def test_deterministic_and_dtype_preserved():
    x = _x((64, 40)).to(torch.bfloat16)
    runs = []
    for _ in range(2):
        c, st = make("demo", chunk=16, topk=4), State(0)
        runs.append([c.decompress(c.compress(x, "w", st)) for _ in range(3)])
    for a, b in zip(*runs):
        assert a.dtype == torch.bfloat16 and a.shape == x.shape and torch.equal(a, b)
    assert make("demo").compress(torch.zeros(0, 5)).data_nbytes == 0


@pytest.mark.parametrize(("kw", "match"), [({"chunk": 0}, "chunk=0"), ({"topk": 0}, "topk=0"),
                                           ({"chunk": 8, "topk": 65}, "topk=65"), ({"decay": 1.0}, "decay=1.0"),
                                           ({"decay": -0.1}, "decay=-0.1"), ({"sign": 1}, "sign=1"),
                                           ({"error_feedback": True}, "error_feedback=True")])
def test_bad_parameters_are_named(kw, match):
    with pytest.raises(ValueError, match=match) as e:
        make("demo", **kw)
    assert "\n" not in str(e.value)


# ----- 2 gloo processes vs threads ---------------------------------------------------------------------------
STEPS = 3
SHAPES = {"w": (40, 30), "b": (30,)}


def _grad(rank: int, step: int, shape) -> torch.Tensor:
    return _x(shape, seed=100 * step + 10 * rank + len(shape))


def _steps(rank: int, coll) -> list[torch.Tensor]:
    c, st = make("demo", chunk=8, topk=6, decay=0.9), State(rank)
    return [c.aggregate(_grad(rank, s, shape), coll, name, st) for s in range(STEPS) for name, shape in
            SHAPES.items()]


def _proc(rank, world_size):
    from lowbw.comm import DistCollective

    return _steps(rank, DistCollective("ring", timeout=60))


def test_two_gloo_processes_equal_threads():
    procs = run_procs(_proc, 2, timeout=120)
    threads = _threads([None, None], _steps)
    for r in range(2):
        for a, b in zip(procs[r], threads[r]):
            assert torch.equal(a, b)
    assert all(torch.equal(a, b) for a, b in zip(procs[0], procs[1]))  # every rank applies the same update
    assert {float(v) for v in procs[0][0].unique()} <= {-1.0, 0.0, 1.0}


# ----- in the engine -----------------------------------------------------------------------------------------
@pytest.mark.slow
def test_trains_in_the_engine_with_plain_sgd(tmp_path):
    """sign(Q) as the gradient of plain SGD: the loss falls and test accuracy leaves chance (0.1) behind."""
    from lowbw.comm.engine import MAX_DIMS
    from lowbw.runs.io import read_jsonl
    from lowbw.train.launch import run
    from lowbw.train.models import build_model

    # two epochs: after one, the accuracy depends on this CPU's rounding (0.34-0.4); after two it is far from chance
    steps = 240
    cfg = dict(dataset="synthetic", model="mlp", workers=2, batch_size=32, steps=steps, log_every=20, progress=False,
               train_limit=3840, test_limit=200, eval_every=1.0, compressor="demo", optimizer="sgd", momentum=0.0,
               weight_decay=0.0, lr=0.002, lr_schedule="constant", seed=0)
    run(cfg, tmp_path / "demo", quiet=True)
    rows = read_jsonl(tmp_path / "demo" / "metrics.jsonl")
    losses = [r["loss"] for r in rows if r.get("loss") is not None]
    accs = [r["test_acc"] for r in rows if r.get("test_acc") is not None]
    assert all(math.isfinite(v) for v in losses) and losses[-1] < losses[0] - 0.04, losses
    assert accs[-1] > max(0.35, accs[0] + 0.2), accs
    # what crossed the ring per rank and step: every tensor's payload, plus the collective's shape header of
    # (MAX_DIMS + 2) int64 per all-gather (lowbw.comm.engine); 2 ranks, 2 parts (all-gathers) a tensor
    params = list(build_model("mlp", 10, 3, 16).parameters())
    data = sum(make("demo").compress(torch.zeros(p.shape)).data_nbytes for p in params)
    assert data < 4 * sum(p.numel() for p in params) / 50
    assert rows[-1]["bytes_sent"] == steps * 2 * (data + 2 * len(params) * 8 * (MAX_DIMS + 2))


@pytest.mark.slow
def test_sim_and_procs_agree(tmp_path):
    """The same run (a CNN: conv kernels viewed as [out, rest]) on sim threads and on gloo processes."""
    from lowbw.runs.io import read_jsonl
    from lowbw.train.launch import run

    cfg = dict(dataset="synthetic", model="cnn", workers=2, batch_size=32, steps=4, log_every=1, progress=False,
               train_limit=400, test_limit=100, eval_every=0.5, clock="model", clock_sample_s=1e-3,
               clock_compress_mbyte_s=200.0, compressor="demo", optimizer="sgd", momentum=0.0, weight_decay=0.0,
               lr=0.001)
    out = {}
    for backend in ("sim", "procs"):
        run({**cfg, "backend": backend}, tmp_path / backend, quiet=True)
        out[backend] = read_jsonl(tmp_path / backend / "metrics.jsonl")
    assert len(out["sim"]) == len(out["procs"]) == 6
    for a, b in zip(out["sim"], out["procs"]):
        assert (a["step"], a.get("loss"), a["bytes_sent"]) == (b["step"], b.get("loss"), b["bytes_sent"])
        assert b["t_virtual"] == pytest.approx(a["t_virtual"], rel=1e-12)
    assert out["sim"][-1]["bytes_sent"] > 0
