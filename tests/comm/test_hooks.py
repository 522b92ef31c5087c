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
    rec = {"selected": [], "done_at_return": [], "buckets": []}
    state = None
    if hook_kind == "lowbw":
        state, hook = make_hook(name, algorithm=algorithm, module=model, seed=rank, **PARAMS.get(name, {}))
        orig = state.compressor.compress

        def compress(*a, **k):  # record how many entries a data-dependent sparsifier selected
            p = orig(*a, **k)
            rec["selected"].append((tuple(p.shape), p.parts[0].numel()))
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
        out["notes"] = list(state.notes)
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
    res["tiny"] = _tiny_model(rank)
    return res


def _tiny_model(rank):
    """pytorch/examples' DDP model (nn.Linear(20, 1): a 1x20 weight and a bias) under PowerSGD rank 1: no
    tensor is worth compressing ((1 + 20) x 1 x 2 >= 20), and the hook says so once."""
    import warnings

    from torch import nn
    from torch.nn.parallel import DistributedDataParallel as DDP

    from lowbw.comm.hooks import UncompressedWarning

    torch.manual_seed(0)
    model = nn.Linear(20, 1)
    ddp = DDP(model)
    state, hook = make_hook("powersgd", rank=1, module=model)
    ddp.register_comm_hook(state, hook)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for step in range(2):
            ddp(torch.randn(4, 20, generator=torch.Generator().manual_seed(10 * step + rank))).sum().backward()
    state.close()
    said = [str(w.message) for w in caught if issubclass(w.category, UncompressedWarning)]
    return {"notes": list(state.notes), "warned": said, "stats": state.stats.as_dict(),
            "bytes": state.meter.bytes_sent}


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


# ------------------------------------------------------------------ bytes on the wire, worked out by hand
# Independent of the implementation's own helpers: every number below comes from the parameters' shapes,
# the wire dtypes' sizes and each compressor's documented format (defaults: top-k/random-k/AR-top-k 1 %, DGC
# 0.1 %, SparseLoCo (authors) 82 of a 64 x 64 tile, block-wise 8-bit blocks of 2048, QSGD 127 levels in int8 per 512,
# PowerSGD rank 1 with min_compression_rate 2, DeMo 32 coefficients per block). With 2 workers a ring
# all-reduce of k values sends each value once (its two chunks, one per phase), a broadcast sends the root's
# tensor once, and a ring all-gather sends this rank's block once after its shape header of (2 + 8 dims)
# int64 = 80 bytes.
N_ELEMS = [512, 32, 1024, 32, 128, 4]  # SHAPES' element counts: 32x16, 32, 32x32, 32, 4x32, 4
N_DIMS = [2, 1, 2, 1, 2, 1]
assert [math.prod(s) for s in SHAPES] == N_ELEMS and [len(s) for s in SHAPES] == N_DIMS
K1 = [6, 1, 11, 1, 2, 1]  # ceil(1 % of n), at least 1: 5.12, 0.32, 10.24, 0.32, 1.28, 0.04
# SparseLoCo's authors' variant: 82 per 2-D tile (these matrices are one tile each, clamped to the tile's size:
# 512, 1024 and 128 values all exceed 82), max(1, round(n * 82 / 4096)) per 1-D run: 0.64 -> 1, 0.08 -> 1
K_SLC = [82, 1, 82, 1, 82, 1]
HDR = 80  # a ring all-gather's shape header


def _payload_header(dims: int, parts: int) -> int:
    """Each packed payload carries its shape and its parts' lengths as int64."""
    return 8 * dims + 8 * parts


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def _packed(name: str, n: int, d: int, i: int) -> int:
    """Bytes of tensor i's payload in a packed all-gather (data by hand + its header); a compressor not worked
    out here (one added since: its own test file checks its bytes by hand) by its payload's ``nbytes``, which
    holds for a payload whose size the shape alone sets."""
    if name == "blockwise":  # int8 codes + an fp32 scale per 2048 values
        return n + 4 * _ceil(n, 2048) + _payload_header(d, 2)
    if name == "qsgd":  # int8 codes + an fp32 norm per 512 values
        return n + 4 * _ceil(n, 512) + _payload_header(d, 2)
    if name == "terngrad":  # 2 bits a value + one fp32 scale
        return _ceil(2 * n, 8) + 4 + _payload_header(d, 2)
    if name == "twobit":  # 2 bits a value, nothing else
        return _ceil(2 * n, 8) + _payload_header(d, 1)
    if name == "signsgd":  # 1 bit a value
        return _ceil(n, 8) + _payload_header(d, 1)
    if name == "ef_signsgd":  # 1 bit a value + the fp32 mean magnitude
        return _ceil(n, 8) + 4 + _payload_header(d, 2)
    if name == "onebit":  # 1 bit a value + two fp32 means (of the positives, of the negatives) per 2048
        return _ceil(n, 8) + 8 * _ceil(n, 2048) + _payload_header(d, 2)
    if name == "topk":  # k int32 indices + k fp32 values
        return 8 * K1[i] + _payload_header(d, 2)
    if name == "dgc":  # k = ceil(0.1 % of n) int32 indices + fp32 values: 1, but 2 for the 32x32 (1.024)
        return 8 * (2 if n == 1024 else 1) + _payload_header(d, 2)
    if name == "sparseloco":  # k int16 indices, k 2-bit codes, a shift and 4 bin means (fp32) per tensor
        return 2 * K_SLC[i] + _ceil(2 * K_SLC[i], 8) + 20 + _payload_header(d, 3)
    assert not C.registry.entry(name).value_sized, name  # a size that depends on the values: work it out above
    return C.make(name, **PARAMS.get(name, {})).compress(torch.zeros(SHAPES[i])).nbytes


def _expected_sent(name, r0, r1, rank):
    """Bytes rank ``rank`` sends in the run (STEPS steps), worked out by hand (see above)."""
    mine = (r0, r1)[rank]
    calls = len(mine["buckets"])  # hook calls, one per bucket and step, as the test's watcher saw them
    if name in ("none", "fp16", "bf16"):  # the flat buckets in the wire dtype, all-reduced
        return STEPS * sum(N_ELEMS) * {"none": 4, "fp16": 2, "bf16": 2}[name]
    if name == "powersgd":  # per matrix P (n x 1) and Q (m x 1) in fp32; vectors and small matrices as they are
        per_step = (4 * (32 + 16)  # 32x16: (32 + 16) * 1 * 2 = 96 < 512
                    + 4 * 32  # bias
                    + 4 * (32 + 32)  # 32x32: 128 < 1024
                    + 4 * 32  # bias
                    + 4 * (4 + 32)  # 4x32: 72 < 128
                    + 4 * 4)  # bias
        return STEPS * per_step
    if name == "artopk":  # values (fp32) all-reduced; the step's leader (step mod 2) broadcasts the count
        leader = sum(8 + 4 * k for k in K1)  # (int64) and the int32 indices
        return STEPS * 4 * sum(K1) + sum(leader for step in range(STEPS) if step % 2 == rank)
    if name == "demo":  # per tensor two ring all-gathers (int16 indices, fp32 values); one block per tensor here,
        kept = [32, 32, 32, 32, 32, 4]  # k = 32 coefficients a block, at most the block's size (4 for the 4-vector)
        return STEPS * (6 * sum(kept) + 2 * HDR * len(SHAPES))
    if name == "randomk":  # the k fp32 values (shared seed: no indices), all-reduced together per bucket
        return STEPS * 4 * sum(K1)
    if name == "threshold":  # as many int32 indices + fp32 values as entries passed the threshold (data-dependent:
        # counted off the payloads the test recorded), with the header
        return sum(8 * k + _payload_header(len(shape), 2) for shape, k in mine["selected"]) + HDR * calls
    # everything else: every tensor's payload packed into one ring all-gather per bucket
    return STEPS * sum(_packed(name, n, d, i) for i, (n, d) in enumerate(zip(N_ELEMS, N_DIMS))) + HDR * calls


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


def test_a_model_too_small_to_compress_gets_a_word(runs):
    for rank in (0, 1):
        tiny = runs[rank]["tiny"]
        assert tiny["stats"]["tensors"] == 4 and tiny["stats"]["uncompressed"] == 4  # 2 steps x (weight, bias)
        assert tiny["bytes"] == 2 * 4 * (20 + 1)  # every gradient dense: 21 fp32 values a step, each sent once
        assert len(tiny["notes"]) == 1 and tiny["warned"] == tiny["notes"]  # said once, on the first step
        assert tiny["notes"][0].startswith("lowbw hook: powersgd compressed none of the model's 2 gradient tensors")
    # a model with matrices worth compressing: no word, though its biases go as they are
    ps = runs[0]["powersgd"]
    assert ps["notes"] == [] and ps["stats"]["uncompressed"] == STEPS * 3 and ps["stats"]["tensors"] == STEPS * 6


@pytest.mark.parametrize("name", ["fp16", "topk", "powersgd"])
def test_non_finite_gradients_fail_backward_with_the_compressors_error(runs, name):
    for rank in (0, 1):
        err = runs[rank]["nan"][name]
        assert err is not None and "non-finite" in err, err
