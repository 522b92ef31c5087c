"""lowbw compressors as DDP communication hooks: every registered compressor in a real 2-process gloo DDP
run (issue 19): it trains, the bytes metered are the payloads' sizes, the Future completes only with the
exchange, per-parameter state survives DDP's bucket rebuild."""

from __future__ import annotations

import math
import time

import pytest
import torch

import lowbw.compress as C
from lowbw.comm.hooks import make_hook
from lowbw.comm.testing import run_procs

STEPS = 4
NAMES = C.available()
DELAYED = ("fp16", "none", "topk", "randomk", "powersgd", "artopk")  # one of each exchange path
PARAMS = {"twobit": {"threshold": 0.005}}  # its default 0.5 sends nothing for gradients this small
SHAPES = [(32, 16), (32,), (32, 32), (32,), (4, 32), (4,)]  # the model's parameters, in order


def _model():
    from torch import nn

    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 32), nn.Tanh(), nn.Linear(32, 4))


def _data(rank: int, step: int):
    g = torch.Generator().manual_seed(97 * step + rank)
    x = torch.randn(16, 16, generator=g)
    return x, x[:, :4] * 0.5 + 0.1 * torch.randn(16, 4, generator=g)


def _train(rank, name, hook_kind="lowbw", delay_rank1=0.0, algorithm="ring"):
    """STEPS SGD steps of DDP with ``name``'s hook; what the test needs to judge them."""
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel as DDP

    model = _model()
    p0 = torch.cat([p.detach().reshape(-1) for p in model.parameters()]).clone()
    # tiny buckets (after DDP's first-iteration rebuild): several buckets, each with several parameters
    ddp = DDP(model, bucket_cap_mb=6000 / 2**20)
    rec = {"payload_nbytes": 0, "payload_data": 0, "done_at_return": [], "buckets": []}
    state = None
    if hook_kind == "lowbw":
        state, hook = make_hook(name, algorithm=algorithm, module=model, seed=rank, **PARAMS.get(name, {}))
        orig = state.compressor.compress

        def compress(*a, **k):  # record what the compressor says it sends
            p = orig(*a, **k)
            rec["payload_nbytes"] += p.nbytes
            rec["payload_data"] += p.data_nbytes
            return p

        state.compressor.compress = compress

        def watched(st, bucket):
            fut = hook(st, bucket)
            rec["done_at_return"].append(fut.done())
            rec["buckets"].append([tuple(p.shape) for p in bucket.parameters()])
            return fut

        ddp.register_comm_hook(state, watched)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    losses = []
    for step in range(STEPS):
        x, y = _data(rank, step)
        if rank == 1 and step == 0 and delay_rank1:
            time.sleep(delay_rank1)  # rank 0's exchanges cannot finish before rank 1 arrives
        opt.zero_grad()
        loss = nn.functional.mse_loss(ddp(x), y)
        loss.backward()
        losses.append(float(loss))
        opt.step()
    out = {"losses": losses, "delta": torch.cat([p.detach().reshape(-1) for p in model.parameters()]) - p0, **rec}
    if state is not None:
        out["meter"] = state.meter.totals()
        out["estimated"] = [c.estimated for c in state.meter.calls]
        out["stats"] = state.stats.as_dict()
        cs = state.cstate
        out["state"] = {n: {k: (tuple(v.shape) if torch.is_tensor(v) else v) for k, v in cs[n].items()}
                        for n in cs.names()}
        state.close()
    return out


def _all_worker(rank, world_size):
    # one spawn for everything: DDP's first use imports torch._dynamo (seconds per process)
    res = {"torch": _train(rank, "none", hook_kind="torch")}
    for name in NAMES:
        res[name] = _train(rank, name, delay_rank1=0.3 if name in DELAYED else 0.0)
    res["fp16-native"] = _train(rank, "fp16", algorithm="native")
    res["topk-native"] = _train(rank, "topk", algorithm="native")
    res["nan"] = {name: _nan_step(rank, name) for name in ("fp16", "topk", "powersgd")}
    return res


def _nan_step(rank, name):
    """A backward pass whose gradients hold NaN on every rank: the hook's error reaches backward."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    model = _model()
    ddp = DDP(model)
    state, hook = make_hook(name, module=model, timeout=30)
    ddp.register_comm_hook(state, hook)
    x, _ = _data(rank, 0)
    try:
        ddp(x * float("nan")).sum().backward()
    except Exception as e:  # noqa: BLE001 - what DDP re-raises is the test's subject
        return f"{type(e).__name__}: {e}"
    finally:
        state.close()
    return None


@pytest.fixture(scope="module")
def runs():
    return run_procs(_all_worker, 2, timeout=300)


def _cos(a, b):
    return float(a @ b / (a.norm() * b.norm()))


def _expected_sent(name, r0, r1, rank):
    """Bytes rank ``rank`` sends in the run, from the compressor's payloads and the algorithm's pattern."""
    mine = (r0, r1)[rank]
    comp = C.make(name, **PARAMS.get(name, {}))
    buckets = mine["stats"]["buckets"]
    if name in ("none", "fp16", "bf16"):  # the flat bucket, ring all-reduce: 2(N-1)/N M = M for N = 2
        return mine["stats"]["dense_bytes"] // {"none": 1, "fp16": 2, "bf16": 2}[name]
    if name == "powersgd":
        per_step = 0
        for s in SHAPES:
            ms = comp.matrix_shape(torch.Size(s))
            per_step += 4 * ((ms[0] + ms[1]) * ms[2] if ms else math.prod(s))
        return STEPS * per_step
    if name == "artopk":  # leader (step mod 2) broadcasts count + indices; values all-reduced (ring)
        from lowbw.compress.artopk import index_dtype, topk_count

        total = 0
        for step in range(STEPS):
            for s in SHAPES:
                n = math.prod(s)
                k = topk_count(comp.ratio, n)
                isz = torch.empty(0, dtype=index_dtype(n)).element_size()
                total += 4 * k + ((8 + k * isz) if step % 2 == rank else 0)
        return total
    if name == "demo":  # its own aggregate per tensor: two ring all-gathers (indices, values), 80-byte header each
        return mine["payload_data"] + 2 * 80 * len(SHAPES) * STEPS
    if comp.summable:  # random-k: the values, all-reduced together per bucket
        return mine["payload_data"]
    # all the bucket's payloads packed (exactly Payload.nbytes each) in one ring all-gather (+ 80-byte header)
    return mine["payload_nbytes"] + 80 * buckets


@pytest.mark.parametrize("name", NAMES)
def test_every_compressor_as_a_hook(runs, name):
    r0, r1 = runs[0][name], runs[1][name]
    dense = runs[0]["none"]["delta"]
    for r in (r0, r1):
        assert all(math.isfinite(v) for v in r["losses"])
        # bytes metered = what the compressor's payloads and the algorithm's pattern say
        assert r["meter"]["bytes_sent"] > 0
    for rank, r in enumerate((r0, r1)):
        assert r["meter"]["bytes_sent"] == _expected_sent(name, r0, r1, rank), rank
    # several buckets of several parameters; DDP rebuilt them after the first step
    assert max(len(b) for b in r0["buckets"]) > 1 and r0["stats"]["iterations"] == STEPS
    # trains in the dense run's direction; the exact and nearly exact ones agree with it
    assert _cos(r0["delta"], dense) > 0.3, _cos(r0["delta"], dense)
    tol = {"none": 1e-6, "fp16": 2e-3, "bf16": 2e-2, "blockwise": 2e-2}.get(name)
    rel = float((r0["delta"] - dense).norm() / dense.norm())
    if tol is not None:
        assert rel < tol, rel
    unbiased = {"qsgd": 0.1, "terngrad": 0.8}.get(name)  # one noisy sample per step: close, not equal
    if unbiased is not None:
        assert rel < unbiased, rel
    # every rank ends with the same model
    torch.testing.assert_close(r0["delta"], r1["delta"], rtol=0, atol=0)


def test_plain_hook_equals_torch_ddp(runs):
    torch.testing.assert_close(runs[0]["none"]["delta"], runs[0]["torch"]["delta"], rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("name", ["topk", "dgc", "powersgd", "ef_signsgd"])
def test_state_is_per_parameter_and_survives_the_bucket_rebuild(runs, name):
    st = runs[0][name]["state"]
    names = [f"{i * 2}.{w}" for i in range(3) for w in ("weight", "bias")]
    assert sorted(st) == sorted(names), st  # named after the module's parameters, never "bucket<k>"
    for n, s in zip(names, SHAPES):
        slot = st[n]
        if name == "powersgd":
            assert slot["powersgd.iter"] == STEPS  # never reset by the rebuild after step 1
            if len(s) == 2:
                assert slot["powersgd.q"] == (s[1], 1)  # the warm-start Q of this matrix
        elif name == "dgc":
            assert any(v == (math.prod(s),) for v in slot.values()), slot
        else:
            assert slot["ef.residual"] == (math.prod(s),)


def test_powersgd_compresses_per_parameter(runs):
    r = runs[0]["powersgd"]
    assert r["meter"]["bytes_sent"] <= 0.25 * r["stats"]["dense_bytes"]  # rank 1 of 32x32 matrices


@pytest.mark.parametrize("name", DELAYED)
def test_future_completes_only_with_the_exchange(runs, name):
    # rank 1 arrived 0.3 s late at step 0: a hook that communicated inside the call (or returned a completed
    # Future early) would show done() on return; ours return at once with the exchange still running
    flags = runs[0][name]["done_at_return"]
    n0 = len(runs[0][name]["buckets"]) // STEPS
    assert flags[:n0] and not any(flags[:n0]), flags


def test_native_traffic_is_metered(runs):
    fp16 = runs[0]["fp16-native"]
    assert all(fp16["estimated"]) and fp16["meter"]["bytes_sent"] == fp16["stats"]["dense_bytes"] // 2
    topk = runs[0]["topk-native"]  # all-gathers take our ring under native (measured), nothing estimated
    assert not any(topk["estimated"]) and topk["meter"]["bytes_sent"] == runs[0]["topk"]["meter"]["bytes_sent"]


def test_make_hook_checks_its_arguments():
    with pytest.raises(ValueError, match="algorithm"):
        make_hook("fp16", algorithm="carrier-pigeon")
    with pytest.raises(ValueError, match="ratio"):
        make_hook("topk", ratio=2.0)
    with pytest.raises(ValueError, match="granularity='layer'"):
        make_hook("topk", granularity="layer")
    with pytest.raises(ValueError, match="gather='tree'"):
        make_hook("topk", gather="tree")
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
    x = torch.randn(5, 6, generator=torch.Generator().manual_seed(rank))
    from lowbw.comm import metering

    with metering() as m:  # a caller's meter sees the exchange, though it runs on the hook's thread
        ddp(x).square().mean().backward()
    assert m.bytes_sent == state.meter.bytes_sent
    return [p.grad.clone() for p in model.parameters()], m.bytes_sent


def test_hook_registers_with_ddp_as_is():
    res = run_procs(_direct_worker, 2, timeout=120)
    torch.manual_seed(0)
    ref = torch.nn.Linear(6, 3)
    grads = []
    for r in range(2):
        ref.zero_grad()
        ref(torch.randn(5, 6, generator=torch.Generator().manual_seed(r))).square().mean().backward()
        grads.append([p.grad.clone() for p in ref.parameters()])
    for (got, nbytes) in res:
        assert nbytes > 0  # the gradients went through our ring
        for g, a, b in zip(got, *grads):
            torch.testing.assert_close(g, (a + b) / 2, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("name", ["fp16", "topk", "powersgd"])
def test_non_finite_gradients_fail_backward_with_the_compressors_error(runs, name):
    for rank in (0, 1):
        err = runs[rank]["nan"][name]
        assert err is not None and "non-finite" in err, err
