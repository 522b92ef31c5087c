"""The batched compressor path equals the per-tensor path bit for bit, and sim's batched exchange equals the
threaded one (outputs, call records, bytes, virtual clock, losses).

Per-tensor reference: every rank's ``compress``/``aggregate`` with its own State, on the real threaded ring
collective (``lowbw.comm.ThreadCollective``) with byte meters; batched: ``compress_batch``/``aggregate_batch``
with :class:`lowbw.train.batched.RowCollective`.
"""

from __future__ import annotations

import pytest
import torch

from lowbw.comm.meter import Meter
from lowbw.comm.threads import ThreadCollective, run_threads
from lowbw.compress import State, make
from lowbw.runs.io import read_jsonl
from lowbw.train import batched
from lowbw.train.batched import RowCollective, ring_sum
from lowbw.train.config import ConfigError, RunConfig
from lowbw.train.launch import run
from lowbw.train.world import bytes_sent_of

HEADLINE = {
    "fp16": ("fp16", {}),
    "q8nl": ("blockwise", {"bits": 8, "codebook": "nonlinear"}),
    "q8lin": ("blockwise", {"bits": 8, "codebook": "linear", "block_size": 64}),
    "topk1": ("topk", {"ratio": 0.01, "error_feedback": True}),
    "dgc": ("dgc", {"ratio": 0.01}),
    "powersgd": ("powersgd", {"rank": 2}),
    # stochastic or sub-byte: the row loop inside the batched path (each row's own random stream)
    "qsgd": ("qsgd", {"levels": 8}),
    "terngrad": ("terngrad", {}),
    "twobit": ("twobit", {"threshold": 0.3}),
    "q4sr": ("blockwise", {"bits": 4, "stochastic": True, "error_feedback": True}),
}
# shapes: a conv weight (PowerSGD compresses it), a tail block for blockwise, a bias, a tiny tensor
SHAPES = [(16, 8, 3, 3), (700,), (10,), (1,)]


def grads(N: int, step: int, shape, ties: bool = False) -> torch.Tensor:
    g = torch.Generator().manual_seed(1000 * step + sum(shape))
    x = torch.randn(N, *shape, generator=g)
    if ties:  # equal magnitudes around the top-k threshold: the batched top-k must fall back to the row path
        x = x.sign() * torch.randint(0, 3, x.shape, generator=g).float()
    return x


def states(N: int) -> list[State]:
    return [State(seed=17 + r) for r in range(N)]


def same(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a.view(-1).view(torch.uint8) if a.dtype.
                                                                      is_floating_point else a, b.view(-1).view(
                                                                          torch.uint8) if b.dtype.is_floating_point
                                                                      else b)


def threaded_aggregate(comp, xs, sts, name):
    N = xs.shape[0]
    meters = [Meter() for _ in range(N)]
    colls = ThreadCollective.group(N, "ring", timeout=60.0, meters=meters)
    outs = run_threads(lambda r, c: comp.aggregate(xs[r], c, name, sts[r]), colls)
    return outs, [list(c.calls) for c in colls], [bytes_sent_of(m.calls) for m in meters]


def state_tensors(st: State, name: str) -> dict:
    return {k: v for k, v in st[name].items() if isinstance(v, torch.Tensor)}


@pytest.mark.parametrize("method", sorted(HEADLINE))
@pytest.mark.parametrize("N", [1, 3, 4])
def test_aggregate_batch_equals_per_rank_aggregate(method, N):
    name_, kw = HEADLINE[method]
    a, b = make(name_, **kw), make(name_, **kw)
    assert b.batched
    sa, sb = states(N), states(N)
    for step in range(3):
        for li, shape in enumerate(SHAPES):
            name = f"layer{li}"
            xs = grads(N, step, shape, ties=(method in ("topk1", "dgc") and li == 1 and step == 1))
            outs, calls, sent = threaded_aggregate(a, xs, sa, name)
            coll = RowCollective(N)
            got = b.aggregate_batch(xs.clone(), coll, name, sb)
            for r in range(N):
                assert same(outs[r], got), (method, step, name, r)
                assert coll.calls[r] == calls[r] and coll.sent[r] == sent[r], (method, step, name, r)
                ta, tb = state_tensors(sa[r], name), state_tensors(sb[r], name)
                assert ta.keys() == tb.keys()
                assert all(same(ta[k], tb[k]) for k in ta), (method, step, name, r)


@pytest.mark.parametrize("method", sorted(HEADLINE))
def test_compress_batch_equals_compress_rank_by_rank(method):
    name_, kw = HEADLINE[method]
    a, b = make(name_, **kw), make(name_, **kw)
    N = 3
    sa, sb = states(N), states(N)
    for step in range(3):
        for li, shape in enumerate(SHAPES):
            name = f"layer{li}"
            xs = grads(N, step, shape, ties=(li == 1 and step == 1))
            pa = [a.compress(xs[r], name, sa[r]) for r in range(N)]
            pb = b.compress_batch(xs, name, sb)
            for r in range(N):
                assert pa[r].nbytes == pb[r].nbytes and len(pa[r].parts) == len(pb[r].parts)
                assert all(same(u, v) for u, v in zip(pa[r].parts, pb[r].parts, strict=True)), (method, step, name)
                ta, tb = state_tensors(sa[r], name), state_tensors(sb[r], name)
                assert all(same(ta[k], tb[k]) for k in ta) and ta.keys() == tb.keys()
            da = torch.stack([a.decompress(p) for p in pa])
            assert same(da, b.decompress_batch(pb))


def test_error_feedback_residuals_and_topk_ties():
    """Top-k with EF on rows with massive ties (the batched top-k takes the per-row route there)."""
    comp, ref = make("topk", ratio=0.05), make("topk", ratio=0.05)
    sa, sb = states(2), states(2)
    x = torch.tensor([[1.0, -1.0, 1.0, 0.5] * 10, [2.0, 0.0, -2.0, 2.0] * 10])
    pb = comp.compress_batch(x, "t", sb)
    for r in range(2):
        pa = ref.compress(x[r], "t", sa[r])
        assert same(pa.parts[0], pb[r].parts[0]) and same(pa.parts[1], pb[r].parts[1])
        assert same(ref.residual(sa[r], "t"), comp.residual(sb[r], "t"))
    # mass is conserved row by row: decoded + residual = input
    dec = comp.decompress_batch(pb)
    assert torch.equal(dec + torch.stack([comp.residual(s, "t") for s in sb]), x)


def test_exchange_bench_runs():
    from lowbw.bench.train import exchange

    res = exchange(model="cnn", workers=2, reps=1, methods=("dense", "topk1"))
    assert set(res["exchange_s_median"]) == {"dense", "topk1/threads", "topk1/batched"}
    assert res["speedup_batched"]["topk1"] > 0


def test_ring_sum_is_the_threaded_ring_in_half_precision():
    xs = (torch.randn(4, 1001, generator=torch.Generator().manual_seed(0)) * 100).half()
    colls = ThreadCollective.group(4, "ring", timeout=30.0)
    outs = run_threads(lambda r, c: c.all_reduce(xs[r]), colls)
    assert all(same(o, ring_sum(xs)) for o in outs)
    # and differs from a plain fp32 sum rounded once (the check above is not vacuous)
    assert not torch.equal(ring_sum(xs), xs.float().sum(0).half())


def test_unbatched_compressors_refuse_and_bad_input_is_named():
    q = make("threshold")  # payloads of different lengths per rank: no batched path
    assert not q.batched
    with pytest.raises(TypeError, match="no batched path"):
        q.aggregate_batch(torch.zeros(2, 4), RowCollective(2), "x", states(2))
    with pytest.raises(ValueError, match="one per row"):
        make("fp16").compress_batch(torch.zeros(2, 4), "x", states(3))
    with pytest.raises(ValueError, match=r"need \[3"):
        RowCollective(3).all_reduce(torch.zeros(2, 4))
    with pytest.raises(ValueError, match="non-finite"):
        make("blockwise").compress_batch(torch.tensor([[1.0, float("nan")], [0.0, 1.0]]), "x", states(2))


# ----------------------------------------------------------------------------------------------- sim runs
RUN = dict(dataset="synthetic", model="cnn", workers=4, batch_size=64, steps=4, log_every=1, progress=False,
           train_limit=400, test_limit=100, eval_every=0.5, clock="model", clock_sample_s=1e-3)
RUN_METHODS = {
    "fp16": {"compressor": "fp16"},
    "q8nl": {"compressor": "blockwise", "compressor_args": {"bits": 8}},
    "topk1": {"compressor": "topk", "compressor_args": {"ratio": 0.01}, "error_feedback": "on"},
    "dgc": {"compressor": "dgc", "compressor_args": {"ratio": 0.01}, "momentum": 0.0},
    "powersgd": {"compressor": "powersgd", "compressor_args": {"rank": 2}},
    "qsgd": {"compressor": "qsgd", "compressor_args": {"levels": 8}},  # stochastic: the same random streams
    "hier_topk": {"compressor": "topk", "compressor_args": {"ratio": 0.01}, "sync": "hierarchical",
                  "households": 2, "household_period": 1, "world_period": 2},
}


@pytest.mark.parametrize("method", sorted(RUN_METHODS))
def test_sim_batched_exchange_equals_threaded(tmp_path, method):
    c = {**RUN, **RUN_METHODS[method]}
    run({**c, "sim_compress": "threads"}, tmp_path / "loop")
    run({**c, "sim_compress": "batched"}, tmp_path / "batched")
    lo, ba = read_jsonl(tmp_path / "loop" / "metrics.jsonl"), read_jsonl(tmp_path / "batched" / "metrics.jsonl")
    keys = ("step", "loss", "acc", "test_acc", "bytes_sent", "t_virtual", "t_virtual_comm", "comm_alpha_terms",
            "comm_beta_bytes")
    assert len(lo) == len(ba) > 4
    for x, y in zip(lo, ba, strict=True):
        assert {k: x.get(k) for k in keys} == {k: y.get(k) for k in keys}
    assert any(x["bytes_sent"] for x in lo)


def test_sim_batched_path_is_taken(tmp_path, monkeypatch):
    seen = []
    real = batched.exchange
    monkeypatch.setattr(batched, "exchange", lambda *a, **k: seen.append(1) or real(*a, **k))
    run({**RUN, **RUN_METHODS["topk1"], "steps": 2}, tmp_path / "r")
    assert len(seen) == 2
    run({**RUN, **RUN_METHODS["topk1"], "steps": 2, "sim_compress": "threads"}, tmp_path / "l")
    assert len(seen) == 2
    with pytest.raises(ConfigError, match="sim_compress.*'fast'"):
        RunConfig.from_dict({**RUN, "sim_compress": "fast"})
