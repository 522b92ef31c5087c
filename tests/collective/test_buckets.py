"""granularity: bucket: DDP's bucket assignment, one packed call per bucket and round with each tensor's
arithmetic unchanged (threads, batched rows, the trainer on sim and procs), and the messages it counts."""

from __future__ import annotations

import threading

import pytest
import torch

from lowbw.collective.buckets import assign
from lowbw.comm import ThreadCollective
from lowbw.compress import State, make
from lowbw.runs.io import read_jsonl
from lowbw.train import batched
from lowbw.train.aggregate import aggregate_rank, buckets_of
from lowbw.train.config import RunConfig
from lowbw.train.launch import run
from tests.helpers import sim_run
from tests.sim_procs import assert_same_metrics

MB = 1 << 20


def test_assign_is_ddps_rule_from_the_models_end():
    # reverse order; a bucket closes once it reaches the cap (overshooting by its last tensor)
    assert assign([10 * MB, 10 * MB, 10 * MB, 30 * MB, 1 * MB], 25) == [[3, 4], [0, 1, 2]]
    assert assign([MB] * 3, 25) == [[0, 1, 2]]
    assert assign([], 25) == []
    with pytest.raises(ValueError, match="bucket_mb=0"):
        assign([MB], 0)


SHAPES = [(64, 32), (32,), (128, 64), (64,), (10, 10), (3, 5, 7)]


def _chunks():
    out, off = [], 0
    for i, s in enumerate(SHAPES):
        k = torch.Size(s).numel()
        out.append((f"t{i}", off, k, torch.Size(s)))
        off += k
    return out, off


COMPRESSORS = [("topk", {"ratio": 0.05}), ("powersgd", {"rank": 2}), ("fp16", {}), ("qsgd", {"levels": 8}),
               ("threshold", {"alpha": 0.5})]


def _threads(name, kw, bucket_mb, N=4, steps=3):
    chunks, P = _chunks()
    rows = torch.randn(N, P, generator=torch.Generator().manual_seed(1))
    colls = ThreadCollective.group(N, "ring")
    comp = make(name, **kw)
    states = [State(seed=r) for r in range(N)]
    outs = [[] for _ in range(N)]

    def work(r):
        for s in range(steps):
            outs[r].append(aggregate_rank(rows[r] * (s + 1), chunks, colls[r], comp, states[r], bucket_mb))

    ts = [threading.Thread(target=work, args=(r,)) for r in range(N)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return outs, colls[0].calls


@pytest.mark.parametrize("name,kw", COMPRESSORS)
def test_a_bucket_packs_the_calls_and_keeps_each_tensors_arithmetic(name, kw):
    per_tensor, calls_layer = _threads(name, kw, None)
    packed, calls_bucket = _threads(name, kw, 25.0)
    for a, b in zip(per_tensor, packed):
        for x, y in zip(a, b):
            assert torch.equal(x, y)  # bit for bit, ring all-reduce over 4 ranks included
    rounds = {"powersgd": 2}.get(name, 1)
    assert len(calls_bucket) == 3 * rounds  # one bucket: one call per round per step
    assert len(calls_layer) > len(calls_bucket)


def test_small_buckets_make_one_call_per_bucket_and_round():
    chunks, _ = _chunks()
    nb = len(buckets_of(chunks, 0.02))  # 20 KB buckets: several
    assert 1 < nb < len(chunks)
    _, calls = _threads("topk", {"ratio": 0.05}, 0.02, steps=1)
    assert len(calls) == nb


@pytest.mark.parametrize("name,kw", [("topk", {"ratio": 0.05}), ("powersgd", {"rank": 2})])
def test_batched_bucket_matches_the_threads(name, kw):
    """The sim backend's batched rows give what the ranks' threads give: outputs, call records, bytes."""
    chunks, P = _chunks()
    N = 4
    rows = torch.randn(N, P, generator=torch.Generator().manual_seed(1))
    colls = ThreadCollective.group(N, "ring")
    comp = make(name, **kw)
    outs = [None] * N
    states = [State(seed=r) for r in range(N)]

    def work(r):
        outs[r] = aggregate_rank(rows[r], chunks, colls[r], comp, states[r], 25.0)

    ts = [threading.Thread(target=work, args=(r,)) for r in range(N)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()

    class World:  # what batched.exchange reads of a SimWorld
        kind, ranks, now = "sim", list(range(N)), 0.0
        cfg = RunConfig.from_dict({"workers": N, "compressor": name, "compressor_args": kw})

    ex = batched.exchange(World, "world", rows, chunks, make(name, **kw), [State(seed=r) for r in range(N)], 25.0)
    for r in range(N):
        assert torch.equal(ex.outputs[r], outs[r])
        assert ex.calls[r] == colls[r].calls


BASE = sim_run(model="cnn", workers=4, steps=4, clock_compress_mbyte_s=200.0, latency_ms=0.0)
QUALITY = ("loss", "acc", "test_loss", "test_acc")


def _metrics(tmp_path, name, **kw):
    run(RunConfig.from_dict({**BASE, **kw}), tmp_path / name, quiet=True)
    return read_jsonl(tmp_path / name / "metrics.jsonl")


@pytest.mark.parametrize("comp", [dict(compressor="topk", compressor_args={"ratio": 0.05}, error_feedback="on"),
                                  dict(compressor="powersgd", compressor_args={"rank": 2})])
def test_bucketed_and_per_tensor_runs_give_identical_metrics(tmp_path, comp):
    layer = _metrics(tmp_path, "layer", granularity="layer", **comp)
    bucket = _metrics(tmp_path, "bucket", **comp)  # auto: bucket with a compressor
    assert len(layer) == len(bucket) > 2
    for x, y in zip(layer, bucket):
        assert [x.get(k) for k in QUALITY] == [y.get(k) for k in QUALITY]
        assert y["messages"] < x["messages"] or x["step"] == 0
    steps = bucket[-1]["step"]
    assert bucket[-1]["messages"] == steps * {"topk": 1, "powersgd": 2}[comp["compressor"]]


@pytest.mark.slow
@pytest.mark.parametrize("comp", [dict(compressor="topk", compressor_args={"ratio": 0.05}, error_feedback="on"),
                                  dict(compressor="powersgd", compressor_args={"rank": 2})])
def test_a_bucketed_run_is_the_same_on_sim_and_procs(tmp_path, comp):
    kw = dict(BASE, granularity="bucket", latency_ms=50.0, **comp)
    sim = _metrics(tmp_path, "sim", backend="sim", **kw)
    procs = _metrics(tmp_path, "procs", backend="procs", **kw)
    assert_same_metrics(sim, procs)
    assert [x["messages"] for x in sim] == [x["messages"] for x in procs]


def test_the_exchange_benchmarks_bound_and_targets():
    from lowbw.bench.exchange import bound_seconds, check_targets

    # a ring all-reduce on 4 workers: 2(N-1) = 6 latency steps; lowbw's all-gather: 3 (sizes) + 3 (payload)
    assert bound_seconds([("all_reduce", 4000, "ring", 4, False)], 6000, 0.05, 1e7) == pytest.approx(0.3 + 0.0048)
    assert bound_seconds([("all_gather", 800, "ring", 4, False)], 2400, 0.05, 1e7) == pytest.approx(0.3 + 0.00192)
    # sizes known (a bucket of top-k payloads): the payload's pass alone
    assert bound_seconds([("all_gather", 800, "ring", 4, True)], 2400, 0.05, 1e7) == pytest.approx(0.15 + 0.00192)
    rows = [dict(method="dense", granularity="flat", seconds=0.8, ratio=1.0, bytes_sent=600, payload_bytes=400),
            dict(method="topk1", granularity="layer", seconds=9.0, ratio=1.3, bytes_sent=100, payload_bytes=90),
            dict(method="topk1", granularity="bucket", seconds=0.4, ratio=1.2, bytes_sent=101, payload_bytes=91)]
    t = check_targets(rows)["topk1"]
    assert t["below_dense"] and t["within_bound"] and t["bytes_ok"] and t["met"]
    rows[2]["ratio"] = 1.31
    assert not check_targets(rows)["topk1"]["met"]


def test_the_exchange_benchmark_keeps_its_realtime_run_apart():
    """Without --out, the run under SCHED_RR writes exchange_realtime.json, not over the fair scheduler's file."""
    from lowbw.bench.exchange import default_out

    assert default_out(None) == "runs/bench/exchange.json"
    assert default_out(10) == "runs/bench/exchange_realtime.json"


def test_a_bucket_of_topk_gathers_once_without_a_size_exchange():
    """top-k's payloads have fixed lengths: the bucket's one all-gather carries the parts alone and is recorded
    (and timed) without lowbw.comm's size exchange; its outputs stay those of the per-tensor exchange."""
    from lowbw.net.costmodel import LinkParams, calls_time

    _, calls = _threads("topk", {"ratio": 0.05}, 25.0, steps=1)
    (c,) = calls
    assert c.op == "all_gather" and c.sizes_known
    per_tensor = sum(torch.Size(s).numel() for s in SHAPES)
    assert c.nbytes < per_tensor  # the parts' bytes, no lengths header
    link = LinkParams(0.05, 1e300)
    assert calls_time([c], link) == pytest.approx(3 * 0.05)  # N - 1 = 3 latency steps, not 6


def test_the_papers_exchange_numbers_are_catalogued_and_come_from_the_stored_file():
    import json
    from pathlib import Path

    from lowbw.report.catalog import MACROS
    from lowbw.report.e1_exchange import exchange_numbers

    doc = json.loads((Path(__file__).resolve().parents[2] / "paper/measured/host/exchange.json").read_text())
    out = exchange_numbers(doc)
    assert set(out) <= set(MACROS)
    assert set(MACROS) & {k for k in MACROS if k.startswith("EOneExch")} == set(out) | {"EOneExchNotRun"}
    rows = {(r["method"], r["granularity"]): r for r in doc["rows"]}
    assert out["EOneExchTopkBucketCalls"] == str(rows[("topk1", "bucket")]["calls"])
