"""``sync: noloco`` in the engine: every H steps each worker averages with one seeded peer and takes NoLoCo's
momentum step (lowbw.train.schemes.noloco); the clock charges one pairwise round, not a collective."""

from __future__ import annotations

import pytest
import torch

from lowbw.comm.noloco import noloco_outer
from lowbw.comm.pairwise import pair_partners, pairwise_time
from lowbw.train.config_rules import ConfigError
from tests.sim_procs import assert_same_metrics, sim_and_procs
from tests.train.test_diloco import cfg, trained
from tests.train.test_diloco_streaming import per_step, step_lines

KW = dict(sync="noloco", world_period=3, steps=9, model="mlp", workers=4)


def test_noloco_with_two_workers_is_diloco_with_heavy_ball_outer_sgd(tmp_path):
    """M = 2: the only pair is the world, phi stays equal on both, and NoLoCo's step is DiLoCo's outer SGD
    with (non-Nesterov) momentum 0.9 and rate 0.7 (the wrapper's reduction, lowbw.comm.noloco): every step's
    loss and the final evaluation equal up to rounding; the same bytes (a 2-ring all-reduce sends 4 P per
    worker, as a swap does), but one pairwise message each way instead of the ring's two steps."""
    kw = dict(KW, workers=2, bandwidth_mbit=1.0, latency_ms=50.0)
    no, a = trained(cfg(**kw), tmp_path / "noloco")
    di, b = trained(cfg(**dict(kw, sync="diloco"), outer_optimizer="sgd"), tmp_path / "diloco")
    la, lb = step_lines(a), step_lines(b)
    for s in range(1, 10):
        assert la[s]["loss"] == pytest.approx(lb[s]["loss"], rel=0, abs=1e-5), s
    assert a[-1]["test_loss"] == pytest.approx(b[-1]["test_loss"], abs=1e-5)
    assert torch.equal(no.sync.phi[0], no.sync.phi[1])
    assert a[-1]["bytes_sent"] == b[-1]["bytes_sent"] > 0
    va, vb = per_step(a, "t_virtual_comm", 9), per_step(b, "t_virtual_comm", 9)
    assert [s for s, x in enumerate(va, 1) if x] == [3, 6, 9]
    assert va[2] == pytest.approx(vb[2] - 0.050, rel=1e-9)  # one latency instead of the ring's two


def test_noloco_follows_the_seeded_pairs_and_charges_one_pairwise_round(tmp_path):
    """Four workers, three outer steps: each worker's phi is the equations run on the replicas with the pairs
    of pair_partners(4, seed, k) (checked by replaying the last round from the state before it); each round
    costs pairwise_time of the full model (one message each way, the slowest pair); the workers stay apart."""
    c = cfg(**KW, bandwidth_mbit=2.0, latency_ms=10.0)
    tr, lines = trained(c, tmp_path / "run")
    P = tr.rep.P
    v = per_step(lines, "t_virtual_comm", 9)
    one = (0.010 + c.clock_overhead_ms / 1e3, 2e6 * c.link_goodput)
    assert v[2] == v[5] == v[8] == pytest.approx(pairwise_time(4 * P, [(one, one)] * 2), rel=1e-12)
    assert lines[-1]["bytes_sent"] == 3 * 4 * 4 * P
    assert not torch.equal(tr.sync.phi[0], tr.sync.phi[1])
    assert tr.sync.round == 3


def test_noloco_outer_steps_are_the_equations_with_the_seeded_pairs():
    """Four replicas, rounds 0 and 1 (steps 3 and 6): the scheme's phi, m and parameters after each outer
    step equal noloco_outer applied to the inner weights just before it with pair_partners(4, seed, k)'s
    pairs, bit for bit; the pairs change between the rounds."""
    from lowbw.train.loop import Trainer
    from lowbw.train.world import SimWorld

    c = cfg(**KW)
    tr = Trainer(c, SimWorld(c))
    sync = tr.sync
    before = []
    real = sync.outer_step

    def spy():
        before.append((tr.rep.params.clone(), sync.phi.clone(), sync.m.clone(), sync.round))
        return real()

    sync.outer_step = spy
    for step in range(1, 7):
        tr.train_step()
        if step % 3:
            continue
        theta, phi, m, k = before[-1]
        partner = pair_partners(4, c.seed, k)
        for i in range(4):
            th = theta[i].clone()
            noloco_outer(phi[i], m[i], th, theta[partner[i]], c.outer_lr, c.outer_momentum)
            assert torch.equal(sync.phi[i], phi[i]) and torch.equal(sync.m[i], m[i]), (step, i)
            assert torch.equal(tr.rep.params[i], th), (step, i)
    assert [k for *_, k in before] == [0, 1]
    assert pair_partners(4, c.seed, 0) != pair_partners(4, c.seed, 1)
    sync.close()


@pytest.mark.parametrize(("kw", "key"), [
    (dict(workers=3), "workers"),
    (dict(compressor="qsgd"), "compressor"),
    (dict(outer_optimizer="sgd"), "outer_optimizer"),
    (dict(sync="local", outer_lr=0.5), "outer_lr"),
])
def test_noloco_config_errors(kw, key):
    with pytest.raises(ConfigError) as e:
        cfg(**{**KW, **kw})
    assert key in str(e.value)


@pytest.mark.slow
def test_noloco_on_procs_matches_sim(tmp_path):
    """Four processes swapping with their seeded peers point to point (isend/irecv with the peer timeout):
    sim's losses, bytes and clock."""
    kw = dict(KW, bandwidth_mbit=1.0)
    sim, procs = sim_and_procs(cfg, tmp_path, **kw)
    assert_same_metrics(sim, procs)
