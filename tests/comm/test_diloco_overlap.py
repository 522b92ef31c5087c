"""lowbw.comm.diloco with overlap: Streaming DiLoCo's tau (background exchange), strided fragments and
alpha, and one-step-delayed outer steps (PCCL's asynchronous DiLoCo), over gloo processes and threads.
The engine comparison of tau/strided/alpha is in tests/comm/test_diloco_wrapper_vs_engine.py."""

from __future__ import annotations

import pytest
import torch

from lowbw.comm import ThreadCollective, run_threads
from lowbw.comm.diloco import DiLoCo, layer_runs, split_layers
from lowbw.comm.meter import Meter
from lowbw.comm.testing import run_procs
from tests.helpers import replica_steps, tiny_mlp, worker_steps

H, STEPS = 3, 10
WIDTHS = (6, 5, 4, 2)  # the model: three Linear layers (tiny_mlp)


def _train(rank: int, coll=None, steps: int = STEPS, period: int = H, finish: bool = True, **kw) -> dict:
    torch.set_num_threads(1)
    model = tiny_mlp(rank, WIDTHS)  # different on purpose: sync_start makes them equal
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    outer = DiLoCo(model, opt, period, collective=coll, **kw)
    syncs: list[int] = []
    losses = worker_steps(model, outer, rank, steps, after=lambda: syncs.append(outer.counters.syncs))
    before = [p.detach().clone() for p in model.parameters()]
    if finish:
        outer.finish()
    return {"params": [p.detach().clone() for p in model.parameters()], "before_finish": before,
            "losses": losses, "syncs": syncs, "bytes": outer.bytes_sent, "fragments": outer.fragments}


def _proc_worker(rank: int, world_size: int, kw: dict) -> dict:
    return _train(rank, **kw)


def _threads(n: int, **kw) -> list[dict]:
    colls = ThreadCollective.group(n, "ring", meters=[Meter() for _ in range(n)])
    return run_threads(lambda r, c: _train(r, c, **kw), colls, timeout=120)


def test_strided_fragments_are_whole_layers_in_turn():
    names = [n for n, _ in tiny_mlp(0, WIDTHS).named_parameters()]  # 0.weight 0.bias 2.weight 2.bias 4.weight 4.bias
    assert layer_runs(names) == [[0, 1], [2, 3], [4, 5]]
    assert split_layers(names, 2) == [[0, 1, 4, 5], [2, 3]]
    assert layer_runs(["blocks.0.attn.w", "blocks.0.mlp.w", "blocks.1.attn.w", "head.w"]) == [[0, 1], [2], [3]]
    with pytest.raises(ValueError, match="4 strided fragments need as many layers; the model has 3"):
        split_layers(names, 4)


def test_streaming_with_delay_in_gloo_processes_matches_threads_and_lands_tau_steps_late():
    """H = 4, F = 2 strided, tau = 2, alpha = 0.5: the exchange of a fragment started after its slot (steps
    2, 4, 6, 8) lands two steps later (4, 6, 8, 10): the outer-step count rises at the landing steps only.
    Gloo processes (the exchange on the wrapper's background thread over torch.distributed) and threads give
    the same numbers bit for bit. With alpha > 0 the replicas are apart at the end of the loop; finish()
    makes them equal."""
    kw = {"period": 4, "fragments": 2, "fragment_layout": "strided", "delay": 2, "fragment_update_alpha": 0.5}
    procs = run_procs(_proc_worker, 2, kw, timeout=120)
    threads = _threads(2, **kw)
    assert procs[0]["syncs"] == [0, 0, 0, 1, 1, 2, 2, 3, 3, 4]
    for r in range(2):
        assert procs[r]["losses"] == threads[r]["losses"]
        assert procs[r]["bytes"] == threads[r]["bytes"] > 0
        for a, b in zip(procs[r]["params"], threads[r]["params"]):
            assert torch.equal(a, b)
    assert any(not torch.equal(a, b) for a, b in zip(procs[0]["before_finish"], procs[1]["before_finish"]))
    for a, b in zip(procs[0]["params"], procs[1]["params"]):
        assert torch.equal(a, b)


def test_delay_zero_alpha_zero_is_the_schedule_without_overlap():
    """tau = 0 and alpha = 0 (the defaults) against tau = 1: the same schedule, different numbers (the
    overlap changes the arithmetic: a fragment lands a step late); tau = 0 lands at the slot itself."""
    base = _threads(2, period=4, fragments=2, fragment_layout="strided")
    late = _threads(2, period=4, fragments=2, fragment_layout="strided", delay=1)
    assert base[0]["syncs"] == [0, 1, 1, 2, 2, 3, 3, 4, 4, 5]
    assert late[0]["syncs"] == [0, 0, 1, 1, 2, 2, 3, 3, 4, 4]
    assert base[0]["losses"][:2] == late[0]["losses"][:2]  # identical until the first landing differs
    assert base[0]["losses"][3] != late[0]["losses"][3]


def _delayed_by_hand(n: int, steps: int) -> list[list[torch.Tensor]]:
    """One-step-delayed DiLoCo written out for n workers in one process (the module doc's steps 1-4), SGD
    inner steps, Nesterov outer steps, then finish's landing of the last exchange."""
    models = [tiny_mlp(0, WIDTHS) for _ in range(n)]  # sync_start: everybody starts from rank 0's parameters
    opts = [torch.optim.SGD(m.parameters(), lr=0.1) for m in models]
    phi = [p.detach().clone() for p in models[0].parameters()]
    outer = torch.optim.SGD(phi, lr=0.7, momentum=0.9, nesterov=True)
    pending = None

    def mean_delta():
        out = []
        for k, s in enumerate(phi):
            ds = [s - list(m.parameters())[k] for m in models]
            total = ds[0].clone()
            for d in ds[1:]:
                total += d
            out.append(total / n)
        return out

    def apply(means):
        for s, g in zip(phi, means):
            s.grad = g
        outer.step()

    for t in range(steps):
        replica_steps(models, opts, t)
        if (t + 1) % H == 0:
            with torch.no_grad():
                new = mean_delta()  # Delta_k = phi - theta, before phi moves
                if pending is not None:
                    apply(pending)  # phi <- OuterOpt(phi, Dbar_{k-1})
                for m in models:
                    for p, s in zip(m.parameters(), phi):
                        p.copy_(s)
                pending = new
    with torch.no_grad():
        apply(pending)
        for m in models:
            for p, s in zip(m.parameters(), phi):
                p.copy_(s)
    return [[p.detach() for p in m.parameters()] for m in models]


def test_one_step_delayed_in_gloo_processes_matches_threads_and_the_algorithm_written_out():
    """overlap='delayed': three boundaries (steps 3, 6, 9); the first only resets theta to phi_0, each
    later one applies the previous boundary's averaged pseudo-gradient; finish() lands the last one. Gloo
    processes (the all-reduce on the background thread during the next H inner steps), threads and the
    algorithm by hand agree bit for bit."""
    procs = run_procs(_proc_worker, 2, {"overlap": "delayed"}, timeout=120)
    threads = _threads(2, overlap="delayed")
    ref = _delayed_by_hand(2, STEPS)
    assert procs[0]["syncs"] == [0, 0, 0, 0, 0, 1, 1, 1, 2, 2]  # outer steps land one boundary late
    for r in range(2):
        assert procs[r]["losses"] == threads[r]["losses"]
        for a, b, c in zip(procs[r]["params"], threads[r]["params"], ref[r]):
            assert torch.equal(a, b)
            assert torch.equal(a, c)
    plain = _threads(2)
    assert plain[0]["losses"][3:] != procs[0]["losses"][3:]  # not plain DiLoCo


def _eager_by_hand(steps: int, lr: float, mu: float) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Eager updates (module doc, steps 1-5) written out for 2 workers: SGD inner steps (lr 0.1), outer SGD
    with heavy-ball momentum mu (buf <- mu buf + g; phi <- phi - lr buf), each worker its own phi_i and
    buf_i; a boundary every H steps, then finish's last boundary (Delta = phi - theta, no new exchange).
    Returns each worker's flat parameters before and after finish."""
    n = 2
    models = [tiny_mlp(0, WIDTHS) for _ in range(n)]
    opts = [torch.optim.SGD(m.parameters(), lr=0.1) for m in models]

    def flat(m):
        return torch.cat([p.detach().reshape(-1) for p in m.parameters()])

    phi = [flat(m).clone() for m in models]
    buf = [torch.zeros_like(phi[0]) for _ in range(n)]
    prev = None  # every worker's Delta of the exchange in flight

    def boundary(start: bool):
        nonlocal prev
        d = [phi[i] - flat(models[i]) for i in range(n)]
        for i in range(n):
            if prev is None:
                g = d[i] / n  # the first boundary: only the own share
            else:  # own fresh share + the others' delayed shares
                g = d[i] / n + sum(prev[j] for j in range(n) if j != i) / n
            buf[i] = mu * buf[i] + g
            phi[i] = phi[i] - lr * buf[i]
            with torch.no_grad():
                torch.nn.utils.vector_to_parameters(phi[i].clone(), models[i].parameters())
        prev = d if start else None

    for t in range(steps):
        replica_steps(models, opts, t)
        if (t + 1) % H == 0:
            boundary(True)
    before = [flat(m) for m in models]
    boundary(False)
    return before, [flat(m) for m in models]


def test_eager_updates_in_two_workers_follow_the_formula_written_out():
    """overlap='eager', two workers, H = 3, six steps (two outer steps) and finish: at boundary 1 each worker
    steps with its own Delta / 2, at boundary 2 with Delta_i,2 / 2 + Delta_j,1 / 2 (its fresh share and the
    other's delayed one), finish adds the other's Delta_j,2 / 2. Each worker's parameters agree with the
    formula written out (up to the rounding of the rewritten sum), the workers' models differ before finish
    (each applied its own share first), and the run is not one-step-delayed DiLoCo."""
    kw = dict(steps=6, outer="sgd", outer_lr=0.7, outer_momentum=0.5)
    res = _threads(2, overlap="eager", **kw)
    before, after = _eager_by_hand(6, 0.7, 0.5)
    for r in range(2):
        torch.testing.assert_close(torch.cat([p.reshape(-1) for p in res[r]["before_finish"]]), before[r],
                                   rtol=0, atol=1e-6)
        torch.testing.assert_close(torch.cat([p.reshape(-1) for p in res[r]["params"]]), after[r], rtol=0, atol=1e-6)
    assert not torch.equal(before[0], before[1])
    assert res[0]["losses"][3] != res[1]["losses"][3]
    delayed = _threads(2, overlap="delayed", **kw)
    assert delayed[0]["losses"][3:] != res[0]["losses"][3:]


def test_eager_updates_with_one_worker_are_plain_diloco():
    """N = 1: g_k = Dbar_{k-1} - Delta_{k-1} + Delta_k = Delta_k exactly, so every loss and the final
    parameters equal plain DiLoCo's bit for bit (ten steps, H = 3: finish takes the outer step of step 10)."""
    plain = _threads(1)
    eager = _threads(1, overlap="eager")
    assert eager[0]["losses"] == plain[0]["losses"]
    for a, b in zip(eager[0]["params"], plain[0]["params"]):
        assert torch.equal(a, b)


@pytest.mark.parametrize(("kw", "match"), [
    ({"delay": 4}, r"delay=4 must be an integer in \[0, period=4\)"),
    ({"fragment_update_alpha": 1.0}, "fragment_update_alpha=1.0"),
    ({"fragment_layout": "random"}, "fragment_layout='random'"),
    ({"fragments": 4, "fragment_layout": "strided"}, "4 strided fragments need as many layers"),
    ({"overlap": "eager", "delay": 1}, "needs fragments=1, delay=0"),
    ({"overlap": "later"}, "overlap='later' is not known"),
    ({"overlap": "delayed", "fragments": 2}, "needs fragments=1"),
])
def test_bad_overlap_settings_are_one_line_errors(kw, match):
    model = tiny_mlp(0, WIDTHS)
    coll = ThreadCollective.group(1)[0]
    with pytest.raises(ValueError, match=match) as e:
        DiLoCo(model, torch.optim.SGD(model.parameters(), lr=0.1), 4, collective=coll, **kw)
    assert "\n" not in str(e.value)


def test_the_wait_for_a_background_exchange_times_out():
    """An exchange that never completes (a Future nobody resolves) is a PeerTimeoutError after the timeout
    (scaled by the fragment's tensors, each collective call inside having the timeout itself)."""
    import time
    from concurrent.futures import Future

    from lowbw.comm.errors import PeerTimeoutError

    model = tiny_mlp(0, WIDTHS)
    coll = ThreadCollective.group(1)[0]
    outer = DiLoCo(model, torch.optim.SGD(model.parameters(), lr=0.1), 4, collective=coll, delay=1, timeout=0.05)
    t0 = time.monotonic()
    with pytest.raises(PeerTimeoutError, match="fragment 0's exchange did not complete within 0.35 s"):
        outer._wait(0, Future())  # the wait itself, with no peer to stall
    assert time.monotonic() - t0 < 5.0
