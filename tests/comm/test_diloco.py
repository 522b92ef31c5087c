"""lowbw.comm.diloco: DiLoCo around a user's loop, over real gloo processes and over threads."""

from __future__ import annotations

import math

import pytest
import torch

from lowbw.comm import ThreadCollective, run_threads
from lowbw.comm.diloco import DiLoCo
from lowbw.comm.meter import Meter
from lowbw.comm.testing import run_procs
from tests.helpers import regression_batch, tiny_mlp, worker_steps

H, STEPS = 3, 7


def _train(rank: int, coll=None, steps: int = STEPS, inner: str = "sgd", width: int = 5, **kw) -> dict:
    """One worker: the user's loop with DiLoCo around it; the final parameters, losses and bytes."""
    torch.set_num_threads(1)
    model = tiny_mlp(rank, (6, width, 2))  # different on purpose: sync_start must make them equal
    opt = (torch.optim.SGD(model.parameters(), lr=0.1) if inner == "sgd"
           else torch.optim.AdamW(model.parameters(), lr=1e-2))
    outer = DiLoCo(model, opt, H, collective=coll, **kw)
    losses = worker_steps(model, outer, rank, steps)
    return {"params": [p.detach().clone() for p in model.parameters()], "losses": losses,
            "bytes": outer.bytes_sent, "start_bytes": outer.start_bytes_sent, "syncs": outer.counters.syncs}


def _proc_worker(rank: int, world_size: int, kw: dict) -> dict:
    return _train(rank, **kw)


def _threads(n: int, **kw) -> list[dict]:
    colls = ThreadCollective.group(n, kw.pop("algorithm", "ring"), meters=[Meter() for _ in range(n)])
    return run_threads(lambda r, c: _train(r, c, **kw), colls, timeout=120)


def _local_step(models, opts, t: int) -> None:
    """Inner step t of every worker (worker r on its own batch), plain SGD."""
    for r, (m, o) in enumerate(zip(models, opts)):
        x, y = regression_batch(r, t)
        torch.nn.functional.mse_loss(m(x), y).backward()
        o.step()
        o.zero_grad()


def _by_hand(n: int, outer_lr: float, momentum: float, nesterov: bool) -> list[list[torch.Tensor]]:
    """The algorithm written out for n workers in one process: the reference for the exact comparison."""
    models = [tiny_mlp(0) for _ in range(n)]  # sync_start: everybody starts from rank 0's parameters
    opts = [torch.optim.SGD(m.parameters(), lr=0.1) for m in models]
    start = [p.detach().clone() for p in models[0].parameters()]
    outer = torch.optim.SGD(start, lr=outer_lr, momentum=momentum, nesterov=nesterov)
    for t in range(STEPS):
        _local_step(models, opts, t)
        if (t + 1) % H == 0:
            with torch.no_grad():
                for k, s in enumerate(start):
                    deltas = [s - list(m.parameters())[k] for m in models]
                    total = deltas[0].clone()
                    for d in deltas[1:]:
                        total += d
                    s.grad = total / n
                outer.step()
                for m in models:
                    for p, s in zip(m.parameters(), start):
                        p.copy_(s)
    return [[p.detach() for p in m.parameters()] for m in models]  # per worker (the last steps are local)


def test_two_gloo_processes_match_threads_and_the_algorithm_written_out():
    kw = {"outer": "nesterov", "outer_lr": 0.7, "outer_momentum": 0.9}
    procs = run_procs(_proc_worker, 2, kw, timeout=120)
    threads = _threads(2, **kw)
    ref = _by_hand(2, 0.7, 0.9, True)
    for r in range(2):
        assert procs[r]["losses"] == threads[r]["losses"]
        assert procs[r]["bytes"] == threads[r]["bytes"] > 0
        for a, b, c in zip(procs[r]["params"], threads[r]["params"], ref[r]):
            assert torch.equal(a, b)
            assert torch.equal(a, c)
    assert procs[0]["syncs"] == STEPS // H


def test_ranks_report_equal_bytes_and_the_start_broadcast_apart():
    """The start broadcast is rank 0's alone (2 workers: it sends the model once); every rank's bytes_sent is
    its synchronisations: a dense fp32 ring of 2 sends each of the P values once per outer step, 4 P bytes."""
    procs = run_procs(_proc_worker, 2, {}, timeout=120)
    n_params = sum(p.numel() for p in tiny_mlp(0).parameters())  # 6*5 + 5 + 5*2 + 2 = 47
    assert n_params == 47 and procs[0]["syncs"] == procs[1]["syncs"] == STEPS // H == 2
    assert [r["start_bytes"] for r in procs] == [4 * 47, 0]
    assert [r["bytes"] for r in procs] == [2 * 4 * 47] * 2
    threads = _threads(2)
    assert [(r["bytes"], r["start_bytes"]) for r in threads] == [(r["bytes"], r["start_bytes"]) for r in procs]


def test_outer_sgd_with_lr_1_and_no_momentum_is_model_averaging():
    """theta_start - mean(theta_start - theta_i) = mean(theta_i): local SGD, up to rounding."""
    res = _threads(3, outer="sgd", outer_lr=1.0, outer_momentum=0.0, steps=H)
    models = [tiny_mlp(0) for _ in range(3)]
    opts = [torch.optim.SGD(m.parameters(), lr=0.1) for m in models]
    for t in range(H):
        _local_step(models, opts, t)
    avg = [sum(ps) / 3 for ps in zip(*(m.parameters() for m in models))]
    for r in range(3):
        for p, a in zip(res[r]["params"], avg):
            torch.testing.assert_close(p, a.detach(), rtol=0, atol=1e-6)
    assert torch.equal(torch.cat([p.flatten() for p in res[0]["params"]]),
                       torch.cat([p.flatten() for p in res[2]["params"]]))


def test_four_bit_pseudo_gradients_send_a_sixth_and_replicas_stay_equal():
    dense = _threads(2, inner="adamw", width=512, steps=2 * H)
    q4 = _threads(2, inner="adamw", width=512, steps=2 * H, compressor="blockwise",
                  compressor_args={"bits": 4, "block_size": 64})
    assert _threads(2, steps=0, width=512)[0]["bytes"] == 0  # the start broadcast is counted apart
    d, q = dense[0]["bytes"], q4[0]["bytes"]
    assert d / 8 < q < d / 5  # 4.5 bits per value (a fp32 scale per 64) + per-tensor headers, vs 32
    for a, b in zip(q4[0]["params"], q4[1]["params"]):
        assert torch.equal(a, b)  # replicas identical after an outer step
    assert q4[0]["losses"] != dense[0]["losses"]


def test_streaming_fragments_synchronise_in_turn():
    kw = {"outer": "sgd", "outer_lr": 1.0, "outer_momentum": 0.0, "fragments": 2, "sync_start": True}
    colls = ThreadCollective.group(2, "ring")

    def worker(r, c):
        model = tiny_mlp(r)
        outer = DiLoCo(model, torch.optim.SGD(model.parameters(), lr=0.1), 4, collective=c, **kw)
        seen = []
        for t in range(8):
            x, y = regression_batch(r, t)
            torch.nn.functional.mse_loss(model(x), y).backward()
            before = outer.counters.syncs
            outer.step()
            seen.append(outer.counters.syncs - before)
        return outer.fragments, seen, [p.detach().clone() for p in model.parameters()]

    (frags, seen, p0), (_, _, p1) = run_threads(worker, colls, timeout=60)
    assert len(frags) == 2 and sorted(i for f in frags for i in f) == list(range(4))
    assert seen == [0, 1, 0, 1, 0, 1, 0, 1]  # H/F = 2: a fragment every 2 inner steps, in turn
    last_fragment = frags[1]  # synchronised at step 8 (t % H == 0): equal on both workers at the end
    for i in last_fragment:
        assert torch.equal(p0[i], p1[i])


@pytest.mark.parametrize(("kw", "match"), [
    ({"period": 0}, "period=0"),
    ({"fragments": 5}, "fragments=5"),
    ({"outer": "adam"}, "outer='adam'"),
    ({"outer": "nesterov", "outer_momentum": 0.0}, "outer_momentum > 0"),
    ({"outer_lr": -1.0}, "outer_lr=-1.0"),
    ({"algorithm": "rign"}, "algorithm='rign'"),
    ({"compressor": "blockwise", "compressor_args": {"bits": 3}}, "bits"),
])
def test_bad_settings_are_one_line_errors_before_any_communication(kw, match):
    model = tiny_mlp(0)
    coll = ThreadCollective.group(1)[0]
    args = {"period": 4, **kw}
    with pytest.raises(ValueError, match=match) as e:
        DiLoCo(model, torch.optim.SGD(model.parameters(), lr=0.1), args.pop("period"), collective=coll, **args)
    assert "\n" not in str(e.value)


def test_split_rows_cuts_near_equal_fragments_at_row_boundaries():
    """The engine's fragments: the MLP's first layer holds 3/4 of the parameters, so whole tensors cannot make
    four near-equal fragments (split_fragments gives 3 of 401408, 512, 133898); rows can, within a row."""
    from lowbw.comm.diloco import split_fragments, split_rows

    shapes = [(512, 784), (512,), (256, 512), (256,), (10, 256), (10,)]
    sizes = [math.prod(s) for s in shapes]
    assert len(split_fragments(sizes, 4)) == 3
    frags = split_rows(shapes, 4)
    assert len(frags) == 4
    covered = [(i, r) for f in frags for i, r0, r1 in f for r in range(r0, r1)]
    assert covered == [(i, r) for i, s in enumerate(shapes) for r in range(s[0])]  # each row once, in order
    n = [sum(math.prod(shapes[i][1:]) * (r1 - r0) for i, r0, r1 in f) for f in frags]
    assert max(abs(x - sum(sizes) / 4) for x in n) <= 784  # within one row of the first layer
    assert split_rows(shapes, 1) == [[(i, 0, s[0]) for i, s in enumerate(shapes)]]
    with pytest.raises(ValueError, match="cannot be cut into 3 non-empty fragments"):
        split_rows([(2,)], 3)
