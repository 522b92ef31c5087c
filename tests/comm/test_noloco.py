"""lowbw.comm.pairwise (pairs from a seed, a timed swap, the round's alpha-beta time) and lowbw.comm.noloco
(NoLoCo's outer step with one peer) over gloo processes."""

from __future__ import annotations

import pytest
import torch

from lowbw.comm.pairwise import pair_partners, pairwise_time
from lowbw.comm.testing import run_procs
from tests.helpers import replica_steps, tiny_mlp, worker_steps

H, STEPS = 3, 9


def _loop(rank: int, make) -> dict:
    torch.set_num_threads(1)
    model = tiny_mlp(rank)  # different on purpose: sync_start makes them equal
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    outer = make(model, opt)
    losses = worker_steps(model, outer, rank, STEPS)
    return {"params": torch.cat([p.detach().reshape(-1) for p in model.parameters()]), "losses": losses,
            "bytes": outer.bytes_sent, "partners": list(getattr(outer, "partners", [])),
            "phi": getattr(outer, "phi", None)}


def _noloco_worker(rank: int, world_size: int) -> dict:
    from lowbw.comm.noloco import NoLoCo

    return _loop(rank, lambda m, o: NoLoCo(m, o, H, outer_lr=0.7, outer_momentum=0.9, seed=3))


def _diloco_worker(rank: int, world_size: int) -> dict:
    from lowbw.comm.diloco import DiLoCo

    return _loop(rank, lambda m, o: DiLoCo(m, o, H, outer="sgd", outer_lr=0.7, outer_momentum=0.9))


def test_pairs_come_from_the_seed_and_cover_every_rank():
    for n in (2, 4, 8):
        for r in range(5):
            p = pair_partners(n, seed=3, round_=r)
            assert sorted(p) == list(range(n)) and all(p[p[i]] == i != p[i] for i in range(n))
            assert p == pair_partners(n, seed=3, round_=r)  # every rank draws the same pairs
    assert len({tuple(pair_partners(8, 3, r)) for r in range(6)}) > 1  # new pairs each round
    assert pair_partners(8, 3, 0) != pair_partners(8, 4, 0)
    with pytest.raises(ValueError, match="even number of workers"):
        pair_partners(3, 0, 0)


def test_a_pairwise_round_costs_the_slowest_pair():
    """One message of B bytes each way: alpha + 8 B / bandwidth; full duplex: the slower direction, half
    duplex: both; the round: its slowest pair."""
    B = 1_000_000  # 8 Mbit
    fast, slow = (0.001, 10e6), (0.050, 1e6)  # 10 Mbit/s with 1 ms; 1 Mbit/s with 50 ms
    assert pairwise_time(B, [(fast, fast)]) == pytest.approx(0.801)
    assert pairwise_time(B, [(fast, slow)]) == pytest.approx(8.05)
    assert pairwise_time(B, [(fast, slow)], duplex=False) == pytest.approx(8.851)
    assert pairwise_time(B, [(fast, fast), (slow, slow)]) == pytest.approx(8.05)
    with pytest.raises(ValueError):
        pairwise_time(B, [])


def test_noloco_with_two_workers_is_diloco_with_heavy_ball_outer_sgd():
    """The only pair is the world: NoLoCo's step is DiLoCo's outer SGD with (non-Nesterov) momentum 0.9
    and lr 0.7 on the averaged pseudo-gradient (module doc), equal up to float rounding; the two workers'
    phi agree bit for bit; each outer step sends the model once, 4 P bytes."""
    no = run_procs(_noloco_worker, 2, timeout=120)
    di = run_procs(_diloco_worker, 2, timeout=120)
    P = 6 * 5 + 5 + 5 * 2 + 2
    assert [r["bytes"] for r in no] == [STEPS // H * 4 * P] * 2
    assert no[0]["partners"] == [1, 1, 1] and no[1]["partners"] == [0, 0, 0]
    assert torch.equal(no[0]["phi"], no[1]["phi"])
    for a, b in zip(no, di):
        assert a["losses"] == pytest.approx(b["losses"], rel=0, abs=1e-6)
        torch.testing.assert_close(a["params"], b["params"], rtol=0, atol=1e-6)
    assert no[0]["losses"][-1] != no[1]["losses"][-1]  # the workers train on different batches


def _noloco_by_hand(n: int, seed: int) -> list[torch.Tensor]:
    """NoLoCo's steps 1-4 written out for n workers in one process, pairs from pair_partners."""
    models = [tiny_mlp(0) for _ in range(n)]
    opts = [torch.optim.SGD(m.parameters(), lr=0.1) for m in models]

    def flat(m):
        return torch.cat([p.detach().reshape(-1) for p in m.parameters()])

    phi = [flat(m).clone() for m in models]
    mom = [torch.zeros_like(phi[0]) for _ in models]
    k = 0
    for t in range(STEPS):
        replica_steps(models, opts, t)
        if (t + 1) % H == 0:
            partner = pair_partners(n, seed, k)
            thetas = [flat(m) for m in models]
            for i in range(n):
                bar = (thetas[i] + thetas[partner[i]]) / 2
                mom[i] = 0.9 * mom[i] + 0.7 * (bar - phi[i])
                phi[i] = phi[i] + mom[i]
                with torch.no_grad():
                    torch.nn.utils.vector_to_parameters(phi[i].clone(), models[i].parameters())
            k += 1
    return [flat(m) for m in models]


def test_noloco_in_four_gloo_processes_follows_the_seeded_pairs_and_the_equations():
    """Four workers, three outer steps: each worker's peer is pair_partners(4, seed, k)[rank], its bytes
    one model per outer step, and its parameters those of the equations written out (up to the rounding of
    in-place against written-out arithmetic); the replicas are not all equal (no all-reduce)."""
    res = run_procs(_noloco_worker, 4, timeout=150)
    ref = _noloco_by_hand(4, seed=3)
    for r in range(4):
        assert res[r]["partners"] == [pair_partners(4, 3, k)[r] for k in range(STEPS // H)]
        torch.testing.assert_close(res[r]["params"], ref[r], rtol=0, atol=1e-6)
    assert not all(torch.equal(res[0]["params"], res[r]["params"]) for r in range(1, 4))


def _silent_peer(rank: int, world_size: int) -> str:
    import time

    from lowbw.comm.errors import PeerTimeoutError
    from lowbw.comm.pairwise import swap

    if rank == 1:
        time.sleep(3.0)  # never calls swap
        return "silent"
    t0 = time.monotonic()
    try:
        swap(torch.ones(4), 1, timeout=1.0)
    except PeerTimeoutError as e:
        return f"timeout after {time.monotonic() - t0:.1f}: {e}"
    return "no error"


def test_a_swap_with_a_silent_peer_times_out():
    out = run_procs(_silent_peer, 2, timeout=60)
    assert out[1] == "silent"
    assert out[0].startswith("timeout after") and "rank 0" in out[0], out[0]
    assert float(out[0].split()[2].rstrip(":")) < 3.0
