"""lowbw compressors as DDP communication hooks: 2 gloo processes, checked against the manual math."""

from __future__ import annotations

import pytest
import torch

from lowbw.comm.hooks import make_hook
from lowbw.comm.testing import run_procs

STEPS = 3


def _data(rank: int, step: int):
    g = torch.Generator().manual_seed(97 * step + rank)
    return torch.randn(5, 6, generator=g), torch.randn(5, 3, generator=g)


CONFIGS = [("fp16", "native", {}), ("topk", "ring", {"ratio": 0.3}), ("none", "tree", {})]


def _ddp_worker(rank, world_size):
    # one spawn for every configuration: DDP's first use imports torch._dynamo (seconds per process)
    return [_train(rank, *cfg) for cfg in CONFIGS]


def _train(rank, compressor, algorithm, params):
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 3))
    # tiny buckets (after DDP's first-iteration rebuild): several buckets with their own state
    ddp = DDP(model, bucket_cap_mb=100 / 2**20)
    state, hook = make_hook(compressor, algorithm=algorithm, **params)
    index = {id(p): i for i, p in enumerate(model.parameters())}
    calls = []

    def recording_hook(st, bucket):
        inp = bucket.buffer().clone()
        fut = hook(st, bucket)
        layout = [(index[id(p)], p.numel()) for p in bucket.parameters()]
        calls.append({"index": bucket.index(), "input": inp, "output": fut.value().clone(), "layout": layout})
        return fut

    ddp.register_comm_hook(state, recording_hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    steps = []
    for step in range(STEPS):
        calls.clear()
        x, y = _data(rank, step)
        opt.zero_grad()
        nn.functional.mse_loss(ddp(x), y).backward()
        grads = [p.grad.clone() for p in model.parameters()]
        steps.append({"calls": list(calls), "grads": grads})
        opt.step()
    return {"steps": steps, "records": list(state.coll.calls), "meter": state.meter.totals()}


def _manual_fp16(xs):
    h = [x.half().float() for x in xs]
    return (h[0] + h[1]).half().float() / 2


class _ManualTopK:
    """Top-k with error feedback, written out: corrected = g + e; send the k largest |corrected|; e = rest."""

    def __init__(self, ratio):
        self.ratio = ratio
        self.res = {}  # (rank, bucket index) -> residual

    def __call__(self, xs, idx):
        import math

        out = torch.zeros_like(xs[0])
        for r, x in enumerate(xs):
            e = self.res.get((r, idx))
            c = x + e if e is not None and e.shape == x.shape else x.clone()
            k = min(c.numel(), max(1, math.ceil(self.ratio * c.numel())))
            top = c.abs().topk(k).indices
            sent = torch.zeros_like(c)
            sent[top] = c[top]
            self.res[(r, idx)] = c - sent
            out += sent
        return out / 2


@pytest.fixture(scope="module")
def ddp_results():
    return run_procs(_ddp_worker, 2, timeout=180)


@pytest.mark.parametrize("cfg", range(len(CONFIGS)), ids=[c[0] for c in CONFIGS])
def test_hook_equals_manual_math(ddp_results, cfg):
    compressor, algorithm, params = CONFIGS[cfg]
    res = [r[cfg] for r in ddp_results]
    manual = _ManualTopK(params.get("ratio", 1.0)) if compressor == "topk" else None
    n_buckets = set()
    for step in range(STEPS):
        c0, c1 = res[0]["steps"][step]["calls"], res[1]["steps"][step]["calls"]
        assert [c["index"] for c in c0] == [c["index"] for c in c1]
        n_buckets.add(len(c0))
        for a, b in zip(c0, c1):
            xs = [a["input"], b["input"]]
            if compressor == "fp16":
                want = _manual_fp16(xs)
            elif compressor == "topk":
                want = manual(xs, a["index"])
            else:
                want = (xs[0] + xs[1]) / 2
            for c in (a, b):
                torch.testing.assert_close(c["output"], want, rtol=1e-6, atol=1e-7)
        # DDP put the hook's output into .grad
        for r, calls in ((0, c0), (1, c1)):
            grads = res[r]["steps"][step]["grads"]
            for c in calls:
                off = 0
                for pi, n in c["layout"]:
                    torch.testing.assert_close(grads[pi].reshape(-1), c["output"][off:off + n], rtol=0, atol=0)
                    off += n
    assert max(n_buckets) > 1  # several buckets after DDP's rebuild
    recs = res[0]["records"]
    assert recs and {r.world_size for r in recs} == {2}
    if compressor == "topk":
        assert {r.op for r in recs} == {"all_gather"} and res[0]["meter"]["bytes_sent"] > 0
    else:
        assert {(r.op, r.algorithm) for r in recs} == {("all_reduce", algorithm)}


def test_make_hook_checks_its_arguments():
    with pytest.raises(ValueError, match="algorithm"):
        make_hook("fp16", algorithm="carrier-pigeon")
    with pytest.raises(ValueError, match="ratio"):
        make_hook("topk", ratio=2.0)
    state, hook = make_hook("none")
    assert callable(hook) and state.algorithm == "native"


def _direct_worker(rank, world_size):
    """The README's usage verbatim: the hook itself (no wrapper) registered with DDP."""
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.manual_seed(0)
    model = nn.Linear(6, 3)
    ddp = DDP(model)
    state, hook = make_hook("none", algorithm="ring")
    ddp.register_comm_hook(state, hook)  # DDP checks the hook's signature and return annotation
    x, y = _data(rank, 0)
    nn.functional.mse_loss(ddp(x), y).backward()
    return [p.grad.clone() for p in model.parameters()], state.meter.totals()["bytes_sent"]


def test_hook_registers_with_ddp_as_is():
    res = run_procs(_direct_worker, 2, timeout=120)
    torch.manual_seed(0)
    ref = torch.nn.Linear(6, 3)
    grads = []
    for r in range(2):
        ref.zero_grad()
        x, y = _data(r, 0)
        torch.nn.functional.mse_loss(ref(x), y).backward()
        grads.append([p.grad.clone() for p in ref.parameters()])
    for (got, nbytes) in res:
        assert nbytes > 0  # the gradients went through our ring
        for g, a, b in zip(got, *grads):
            torch.testing.assert_close(g, (a + b) / 2, rtol=1e-6, atol=1e-7)
