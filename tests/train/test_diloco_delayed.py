"""One-step-delayed DiLoCo and eager updates in the engine (``diloco_overlap: delayed | eager``): their
schedule, their clock and their config errors.
The comparison with the wrapper is in tests/comm/test_diloco_wrapper_vs_engine.py."""

from __future__ import annotations

import pytest

from lowbw.train.config_rules import ConfigError
from tests.sim_procs import assert_same_metrics, sim_and_procs
from tests.train.test_diloco import cfg, trained
from tests.train.test_diloco_streaming import per_step, step_lines

KW = dict(sync="diloco", world_period=4, steps=12, model="mlp")
COMPUTE_S = 1e-3 * 16  # clock_sample_s x local batch (32 / 2 workers)


@pytest.mark.parametrize("mbit", [0.5, 1000.0])
def test_delayed_outer_steps_hide_the_exchange_behind_the_next_inner_phase(tmp_path, mbit):
    """H = 4, 12 steps: plain DiLoCo waits v_comm at steps 4, 8, 12; delayed starts the exchange after step
    4 and lands it at step 8, which waits only max(0, v_comm - 4 steps of compute) (the link is free), and
    so on; the last one lands at the final synchronisation. Same bytes; at 1 Gbit/s the exchange hides
    entirely, at 0.5 Mbit/s only four steps' compute of it."""
    _, base = trained(cfg(**KW, bandwidth_mbit=mbit), tmp_path / "plain")
    _, over = trained(cfg(**KW, bandwidth_mbit=mbit, diloco_overlap="delayed"), tmp_path / "delayed")
    v, w = per_step(base, "t_virtual_comm", 12), per_step(over, "t_virtual_comm", 12)
    assert [s for s, x in enumerate(v, 1) if x] == [4, 8, 12]
    assert w[3] == 0.0  # step 4 starts the exchange, waits for nothing
    for s in (8, 12):
        assert w[s - 1] == pytest.approx(max(0.0, v[s - 5] - 4 * COMPUTE_S), abs=1e-12)
    assert (w[7] > 0) == (mbit < 1)
    assert over[-1]["bytes_sent"] == base[-1]["bytes_sent"]
    assert over[-1]["t_virtual"] < base[-1]["t_virtual"]
    lb, lo = step_lines(base), step_lines(over)
    assert lo[4]["loss"] == lb[4]["loss"] and lo[5]["loss"] != lb[5]["loss"]  # step 5: theta_0 again, not phi_1


@pytest.mark.parametrize(("kw", "key"), [
    (dict(sync="local", diloco_overlap="delayed"), "diloco_overlap"),
    (dict(sync="diloco", world_period=4, diloco_fragments=2, diloco_overlap="delayed"), "diloco_overlap"),
    (dict(sync="diloco", world_period=4, diloco_delay=1, diloco_overlap="delayed"), "diloco_overlap"),
    (dict(sync="diloco", world_period=4, diloco_fragments=2, diloco_overlap="eager"), "diloco_overlap"),
])
def test_delayed_needs_plain_diloco(kw, key):
    with pytest.raises(ConfigError) as e:
        cfg(**kw)
    assert key in str(e.value)


def test_eager_updates_have_the_delayed_clock_and_bytes_but_their_own_numbers(tmp_path):
    """Eager updates overlap the exchange exactly as one-step-delayed DiLoCo does: per step the same virtual
    communication time and bytes (0.5 Mbit/s: the landing waits what the H inner steps did not hide); their
    outer steps differ: step 5 already starts from phi_1 (the own share applied at boundary 4), not theta_0."""
    kw = dict(KW, bandwidth_mbit=0.5)
    _, de = trained(cfg(**kw, diloco_overlap="delayed"), tmp_path / "delayed")
    _, ea = trained(cfg(**kw, diloco_overlap="eager"), tmp_path / "eager")
    assert per_step(ea, "t_virtual_comm", 12) == per_step(de, "t_virtual_comm", 12)
    assert per_step(ea, "bytes_sent", 12) == per_step(de, "bytes_sent", 12)
    assert ea[-1]["bytes_sent"] == de[-1]["bytes_sent"] > 0
    ld, le = step_lines(de), step_lines(ea)
    assert le[4]["loss"] == ld[4]["loss"] and le[5]["loss"] != ld[5]["loss"]


def test_eager_updates_with_one_worker_are_plain_diloco(tmp_path):
    """M = 1: g_k = Dbar_{k-1} - Delta_{k-1} + Delta_k = Delta_k exactly: every step's loss, accuracy and
    bytes and the final evaluation equal plain DiLoCo's (14 steps, H = 4: the final synchronisation takes the
    outer step of steps 13-14 in both). Mid-run evaluations differ in timing only: eager evaluates theta_start
    at once, plain DiLoCo waits for a boundary."""
    kw = dict(KW, workers=1, steps=14)
    _, plain = trained(cfg(**kw), tmp_path / "plain")
    _, eager = trained(cfg(**kw, diloco_overlap="eager"), tmp_path / "eager")
    lp, le = step_lines(plain), step_lines(eager)
    assert sorted(lp) == sorted(le) == list(range(15))
    for s in lp:
        for k in ("loss", "acc", "bytes_sent"):
            assert lp[s][k] == le[s][k], (s, k)
    for k in ("test_loss", "test_acc"):
        assert plain[-1][k] == eager[-1][k] is not None


@pytest.mark.slow
def test_eager_on_procs_matches_sim(tmp_path):
    """Eager updates on procs (the exchange on the background thread, each process its own theta_start):
    sim's losses, bytes and clock."""
    kw = dict(KW, steps=9, bandwidth_mbit=1.0, diloco_overlap="eager")
    sim, procs = sim_and_procs(cfg, tmp_path, **kw)
    assert_same_metrics(sim, procs)


@pytest.mark.slow
def test_delayed_on_procs_matches_sim(tmp_path):
    """The exchange on procs' background thread during the next H inner steps: sim's losses, bytes and
    clock."""
    kw = dict(KW, steps=9, bandwidth_mbit=1.0, diloco_overlap="delayed")
    sim, procs = sim_and_procs(cfg, tmp_path, **kw)
    assert_same_metrics(sim, procs)
