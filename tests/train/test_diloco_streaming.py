"""Streaming DiLoCo in the engine: fragments (diloco_fragments F) and overlapped exchanges (diloco_delay tau)."""

from __future__ import annotations

import json

import pytest
import torch

from lowbw.runs.io import read_jsonl
from lowbw.train.launch import run
from lowbw.train.loop import WALL_FIELDS, Trainer
from lowbw.train.optim import FlatOptimizer
from lowbw.train.schemes.synchronous import ModelSync
from lowbw.train.world import SimWorld
from tests.sim_procs import assert_same_metrics, sim_and_procs
from tests.train.test_diloco import cfg, trained
from tests.train.test_loop import killed_run


def no_wall(lines: list[dict]) -> list[dict]:
    return [{k: v for k, v in ln.items() if k not in WALL_FIELDS} for ln in lines]


def step_lines(lines: list[dict]) -> dict[int, dict]:
    """The first metrics line of every step (the run's last line may follow with the final synchronisation)."""
    out: dict[int, dict] = {}
    for ln in lines:
        out.setdefault(ln["step"], ln)
    return out


def per_step(lines: list[dict], key: str, steps: int) -> list[float]:
    by = step_lines(lines)
    return [by[s][key] - by[s - 1][key] for s in range(1, steps + 1)]


def _whole_row_diloco(tr: Trainer) -> None:
    """Replace ``tr``'s model synchronisation by plain DiLoCo written on the whole row, without fragments:
    Delta = start - params through the synchroniser's aggregation, one outer optimiser over [R, P]."""
    sync, rep, c = tr.sync, tr.rep, tr.cfg
    outer = FlatOptimizer("sgd", tuple(rep.params.shape), rep.device, momentum=c.outer_momentum,
                          nesterov=c.outer_optimizer == "nesterov")

    def step(level):
        ex = sync.aggregate(level, sync.start - rep.params)
        outer.step(sync.start, torch.stack(ex.outputs), c.outer_lr)
        rep.params.copy_(sync.start)
        return ex

    def model_sync(step_no, act):
        return ModelSync(foreground=[step(act.avg)], equal=True) if act.avg else ModelSync()

    sync.model_sync = model_sync
    sync.finish = lambda: ModelSync(foreground=[step("world")], equal=True)


def test_one_fragment_and_no_delay_is_plain_diloco(tmp_path):
    """F = 1, tau = 0 (the default) through the fragment machinery (a slice of the row, its chunks, its own
    outer optimiser) is plain DiLoCo written on the whole row, bit for bit: losses, bytes, clock, evaluations
    (7 steps, H = 3: two outer steps and the final one)."""
    c = cfg(sync="diloco", world_period=3, optimizer="adamw", lr=0.003, compressor="topk",
            compressor_args={"ratio": 0.1}, error_feedback="on", model="mlp", diloco_fragments=1, diloco_delay=0)
    _, frag = trained(c, tmp_path / "frag")
    (tmp_path / "whole").mkdir()
    ref = Trainer(c, SimWorld(c), tmp_path / "whole")
    _whole_row_diloco(ref)
    ref.run()
    whole = read_jsonl(tmp_path / "whole" / "metrics.jsonl")
    assert no_wall(frag) == no_wall(whole)
    assert any(ln.get("test_acc") is not None for ln in whole[1:])


def test_fragments_send_a_fraction_each_and_sync_F_times_per_period(tmp_path):
    """F = 4, H = 8, dense: an exchange every H/F = 2 steps, each about a quarter of the whole model's, and
    together (one of each fragment) the whole model's bytes."""
    kw = dict(sync="diloco", world_period=8, steps=8, model="mlp")
    _, whole = trained(cfg(**kw), tmp_path / "whole")
    tr, frag = trained(cfg(**kw, diloco_fragments=4), tmp_path / "frag")
    b1, b4 = per_step(whole, "bytes_sent", 8), per_step(frag, "bytes_sent", 8)
    assert [s for s, b in enumerate(b1, 1) if b] == [8]
    assert [s for s, b in enumerate(b4, 1) if b] == [2, 4, 6, 8]
    for b in b4[1::2]:
        assert b == pytest.approx(b1[7] / 4, rel=0.05)
    assert sum(b4) == pytest.approx(b1[7], rel=1e-3)
    # the fragments tile the row, in order, at near-equal sizes
    r = tr.sync.plan.ranges
    assert r[0][0] == 0 and r[-1][1] == tr.rep.P and all(a[1] == b[0] for a, b in zip(r, r[1:]))
    # the final synchronisation brings the three fragments with local steps since theirs (not the 4th)
    assert whole[-1]["bytes_sent"] == step_lines(whole)[8]["bytes_sent"]
    fin = frag[-1]["bytes_sent"] - step_lines(frag)[8]["bytes_sent"]
    assert fin == pytest.approx(sum(b4[:6]), rel=1e-3)


@pytest.mark.parametrize("tau", [0, 1])
def test_a_fragment_outer_step_by_hand(tau):
    """F = 2, H = 4: fragment 0's outer step uses Delta after step 2 and lands after step 2 + tau; the other
    fragment and (before landing) fragment 0 are the unsynchronised twin's, exactly."""
    c = cfg(sync="diloco", world_period=4, diloco_fragments=2, diloco_delay=tau, steps=4, model="mlp")
    dil = Trainer(c, SimWorld(c))
    t = cfg(sync="local", world_period=1000, steps=4, model="mlp")
    twin = Trainer(t, SimWorld(t))
    theta0 = dil.rep.params[0].clone()
    (lo, hi), (lo1, hi1) = dil.sync.plan.ranges
    assert lo == 0 and hi == lo1 and hi1 == dil.rep.P
    for _ in range(2):
        dil.train_step()
        twin.train_step()
    want = theta0[lo:hi] - 0.7 * 1.9 * (theta0 - twin.rep.params).mean(0)[lo:hi]  # Nesterov's first step
    if tau == 1:
        assert torch.equal(dil.rep.params, twin.rep.params)  # in flight: nothing applied yet
        dil.train_step()
        twin.train_step()
    for i in range(2):
        assert torch.allclose(dil.rep.params[i, lo:hi], want, rtol=0, atol=1e-6)
        assert torch.equal(dil.rep.params[i, hi:], twin.rep.params[i, hi:])
    assert not dil.state.in_sync


def _hand_overlap(base: list[dict], steps: int, compute_s: float, tau: int, sync_steps: list[int]) -> float:
    """The clock of the overlapped run from the tau = 0 run's: each exchange started at a sync step s and
    landing within the run hides min(v_comm, compute of the tau steps after s) (a free link: tau <= H/F)."""
    v = per_step(base, "t_virtual_comm", steps)
    hidden = sum(min(v[s - 1], tau * compute_s) for s in sync_steps if s + tau <= steps)
    return base[-1]["t_virtual"] - hidden


@pytest.mark.parametrize("mbit,latency_ms", [(0.5, 20.0), (1000.0, 0.0)])
def test_overlap_hides_communication_behind_the_next_steps(tmp_path, mbit, latency_ms):
    """clock=model, F = 2, H = 4, tau = 1, 8 steps: syncs after steps 2, 4, 6, 8; the first three land within
    the run, the last at the final synchronisation (nothing left to overlap). The overlapped run's clock is
    the tau = 0 run's less min(v_comm, one step's compute) per landed exchange: at 0.5 Mbit/s the link is
    the bottleneck (only a step's compute is hidden), at 1 Gbit/s the exchange hides entirely."""
    kw = dict(sync="diloco", world_period=4, diloco_fragments=2, steps=8, bandwidth_mbit=mbit,
              latency_ms=latency_ms, model="mlp")
    _, base = trained(cfg(**kw), tmp_path / "t0")
    _, over = trained(cfg(**kw, diloco_delay=1), tmp_path / "t1")
    compute_s = 1e-3 * 16  # clock_sample_s x local batch (32 / 2 workers)
    v = per_step(base, "t_virtual_comm", 8)
    assert [s for s, x in enumerate(v, 1) if x] == [2, 4, 6, 8]
    assert (min(v[1], v[3]) > compute_s) == (mbit < 1)  # the slow link is comm-heavy, the fast one is not
    want = _hand_overlap(base, 8, compute_s, 1, [2, 4, 6, 8])
    assert over[-1]["t_virtual"] == pytest.approx(want, rel=1e-12)
    assert over[-1]["t_virtual"] < base[-1]["t_virtual"]
    assert over[-1]["t_virtual"] >= over[-1]["t_virtual_compute"]
    assert over[-1]["bytes_sent"] == base[-1]["bytes_sent"]
    # the exposed communication is what the alpha-beta coefficients give at the run's own link
    for ln in over:
        alpha = latency_ms / 1e3
        re = ln["comm_alpha_terms"] * alpha + ln["comm_beta_bytes"] * 8 / (mbit * 1e6 * (1448 / 1514))
        assert re == pytest.approx(ln["t_virtual_comm"], rel=1e-9, abs=1e-12)
    # the overlapped steps pay only the rest: the step after a sync step waits max(0, v_comm - compute)
    w = per_step(over, "t_virtual_comm", 8)
    for s in (2, 4, 6):
        assert w[s] == pytest.approx(max(0.0, v[s - 1] - compute_s), abs=1e-12)


def test_exchanges_queue_on_the_link_when_tau_exceeds_H_over_F(tmp_path):
    """F = 2, H = 4, tau = 3 > H/F at 0.5 Mbit/s (v_comm >> a step's compute c): fragment 0 starts after step 2
    (link busy until e0 = 2c + v0), fragment 1 after step 4 but behind it on the link (until e1 = e0 + v1);
    steps 5 and 7 wait for them; the exchanges after steps 6 and 8 queue again and land at the end. The link
    is busy from step 2 on: T = 2c + 2 v0 + 2 v1. The tau = 0 run pays everything: 8c + 3 v0 + 2 v1 (its
    final synchronisation brings fragment 0 once more)."""
    kw = dict(sync="diloco", world_period=4, diloco_fragments=2, steps=8, bandwidth_mbit=0.5, model="mlp")
    _, base = trained(cfg(**kw), tmp_path / "t0")
    _, over = trained(cfg(**kw, diloco_delay=3), tmp_path / "t3")
    c = 1e-3 * 16
    v = per_step(base, "t_virtual_comm", 8)
    v0, v1 = v[1], v[3]
    assert v0 > 3 * c and v1 > 3 * c
    assert base[-1]["t_virtual"] == pytest.approx(8 * c + 3 * v0 + 2 * v1, rel=1e-12)
    w = per_step(over, "t_virtual_comm", 8)
    assert w[4] == pytest.approx(v0 - 3 * c, rel=1e-12) and w[6] == pytest.approx(v1 - 2 * c, rel=1e-12)
    assert over[-1]["t_virtual"] == pytest.approx(2 * c + 2 * v0 + 2 * v1, rel=1e-12)


def test_streaming_checkpoint_resume_gives_identical_later_metrics(tmp_path, monkeypatch):
    """F = 2, tau = 1, H = 4: the checkpoint after step 6 has fragment 0's exchange (started after step 6)
    in flight; it is part of the checkpoint and lands after step 7 of the resumed run as in the full run."""
    c = cfg(sync="diloco", world_period=4, diloco_fragments=2, diloco_delay=1, steps=8, checkpoint_every=3,
            compressor="topk", compressor_args={"ratio": 0.1}, error_feedback="on", optimizer="adamw", lr=0.003,
            bandwidth_mbit=1.0, model="mlp")
    run(c, tmp_path / "full")
    killed_run(c, tmp_path / "k", monkeypatch, after_steps=7)
    assert json.loads((tmp_path / "k" / "checkpoint" / "latest.json").read_text())["step"] == 6
    run(c, tmp_path / "k")
    assert no_wall(read_jsonl(tmp_path / "k" / "metrics.jsonl")) == no_wall(read_jsonl(tmp_path / "full" /
                                                                                       "metrics.jsonl"))


def test_streaming_on_procs_matches_sim(tmp_path):
    """F = 2, tau = 1 with top-k + error feedback on Delta: procs (the exchange in a background thread,
    waited for a step later) gives sim's losses, bytes and clock."""
    kw = dict(sync="diloco", world_period=4, diloco_fragments=2, diloco_delay=1, steps=7, compressor="topk",
              compressor_args={"ratio": 0.05}, error_feedback="on", bandwidth_mbit=1.0, model="mlp")
    sim, procs = sim_and_procs(cfg, tmp_path, **kw)
    assert_same_metrics(sim, procs)


def _timed_worker(rank: int, world_size: int, cd: dict) -> dict[str, float]:
    """One procs worker: rank 1 reaches fragment 0's exchange (after step 2) 1.5 s late; returns when (the
    system-wide monotonic clock, comparable across processes) this rank entered and left its model
    synchronisation of step 2 (the exchange's start)."""
    import time

    from lowbw.train.config import RunConfig
    from lowbw.train.world import DistWorld

    cfg = RunConfig.from_dict(cd)
    tr = Trainer(cfg, DistWorld(cfg, timeout_s=60.0))
    real, took = tr.sync.model_sync, {}

    def model_sync(step, act):
        if rank == 1 and step == 2:
            time.sleep(1.5)
        t0 = time.monotonic()
        out = real(step, act)
        took[step] = {"enter": t0, "leave": time.monotonic()}
        return out

    tr.sync.model_sync = model_sync
    for _ in range(cfg.steps):
        tr.train_step()
    tr.sync.close()
    return took[2]


@pytest.mark.parametrize("tau", [0, 1])
def test_procs_exchange_runs_in_the_background(tau):
    """procs, F = 2, tau = 1: starting fragment 0's exchange does not wait for the late peer (the collective
    runs in the background thread, waited for at step 3); with tau = 0 the step blocks until the peer comes."""
    from lowbw.comm.testing import run_procs

    cd = {**cfg(backend="procs", model="mlp").to_dict(), "sync": "diloco", "world_period": 4, "diloco_fragments": 2,
          "diloco_delay": tau, "steps": 3}
    r0, r1 = run_procs(_timed_worker, 2, cd, timeout=120)
    # an order of events, not a duration: with tau = 1 rank 0 is done before the late peer even starts (1.5 s
    # of margin); with tau = 0 it cannot be done before the peer came
    if tau:
        assert r0["leave"] < r1["enter"]
    else:
        assert r0["leave"] >= r1["enter"]


def test_procs_checkpoint_with_an_exchange_in_flight_resumes_identically(tmp_path):
    """procs, F = 2, tau = 1, H = 4, 8 steps, a checkpoint every 3: the one after step 6 waits for fragment 0's
    background exchange (started after step 6) and stores it; a rerun of the unfinished run resumes there
    and lands it after step 7 with the numbers of the uninterrupted run."""
    c = cfg(backend="procs", sync="diloco", world_period=4, diloco_fragments=2, diloco_delay=1, steps=8,
            checkpoint_every=3, compressor="topk", compressor_args={"ratio": 0.1}, error_feedback="on",
            bandwidth_mbit=1.0, model="mlp")
    d = tmp_path / "r"
    run(c, d, quiet=True, keep_checkpoint=True)
    full = read_jsonl(d / "metrics.jsonl")
    marker = json.loads((d / "checkpoint" / "latest.json").read_text())
    assert marker["step"] == 6 and len(marker["files"]) == 2
    (d / "summary.json").unlink()  # as if killed after the last line but before the summary
    run(c, d, quiet=True)
    assert no_wall(read_jsonl(d / "metrics.jsonl")) == no_wall(full)
    assert json.loads((d / "config.json").read_text())["resumes"] == 1


def test_more_fragments_than_the_model_has_rows_is_a_config_error():
    from lowbw.train.config import ConfigError

    c = cfg(model="mlp", sync="diloco", world_period=4096, diloco_fragments=4096, steps=1)
    with pytest.raises(ConfigError, match="diloco_fragments: 4096: the .* parameters cannot be cut into 4096") as e:
        Trainer(c, SimWorld(c))
    assert e.value.key == "diloco_fragments" and "\n" not in str(e.value)


def test_bench_e2e_accepts_the_diloco_presets():
    """``python -m lowbw bench e2e --methods diloco16,sdiloco16``: the cells' configs are valid procs/testbed
    run configs (checked before any run)."""
    import argparse

    from lowbw.bench.e8 import grid as e8_grid

    a = argparse.Namespace(methods="diloco16,sdiloco16", rates=[10.0], workers=[2, 4], steps=60,
                           model=e8_grid.BASE["model"], dataset="synthetic",
                           batch_size=e8_grid.BASE["batch_size"], seed=0, target=0.8)
    mcfg, _ = e8_grid.plan(a)
    assert mcfg["sdiloco16"]["diloco_fragments"] == 4 and mcfg["sdiloco16"]["diloco_delay"] == 1
    assert mcfg["diloco16"]["sync"] == "diloco"


def test_background_jobs_run_in_order_and_every_wait_times_out():
    import threading

    from lowbw.train.schemes.streaming import Background

    bg, gate, order = Background(), threading.Event(), []
    first = bg.submit(lambda: (gate.wait(10), order.append(1))[1])
    second = bg.submit(lambda: order.append(2) or "done")
    with pytest.raises(TimeoutError, match="exchange 2: no result after 0.1 s"):
        second.result(0.1, "exchange 2")  # queued behind the first, which waits for the gate
    gate.set()
    assert second.result(10, "exchange 2") == "done" and first.done.is_set() and order == [1, 2]

    def bad():
        raise ValueError("bad payload")

    with pytest.raises(ValueError, match="bad payload") as e:
        bg.submit(bad).result(10, "exchange 3")
    assert e.value.__notes__ == ["exchange 3"]
    bg.close()
    bg.thread.join(10)
    assert not bg.thread.is_alive()
