"""sync: async_diloco, decoupled_diloco, halos (lowbw.train.schemes.async_outer and its three server policies):
their reductions to DiLoCo and to each other, DyLU, stragglers that do not stall the others, determinism,
and their configuration errors."""

from __future__ import annotations

import json

import pytest
import torch

from lowbw.runs.io import read_jsonl
from lowbw.train.config import ConfigError, RunConfig
from lowbw.train.launch import run
from lowbw.train.loop import TIME_FIELDS, Trainer
from lowbw.train.schemes.async_diloco import DelayedNesterov
from lowbw.train.schemes.async_outer import ServerPort, dylu_steps
from lowbw.train.schemes.decoupled_diloco import merge_deltas
from lowbw.train.schemes.parameter_server import server_link
from lowbw.train.world import SimWorld
from tests.sim_procs import assert_same_metrics, sim_and_procs
from tests.train.test_loop import killed_run

# equal workers on equal links of their own behind a server with a fat port: a round's messages reach the
# server, and its models the workers, at one instant (a shared 10 Mbit/s port would serve them one by one)
BASE = dict(dataset="synthetic", model="mlp", workers=2, batch_size=32, steps=7, log_every=1, progress=False,
            train_limit=400, test_limit=100, eval_every=0.5, clock="model", clock_sample_s=1e-3,
            world_period=3, bandwidth_mbit=1e5, worker_bandwidth_mbit=[10, 10])
COMPUTE_BOUND = dict(clock_sample_s=0.05, worker_bandwidth_mbit=[1000, 1000])  # 0.8 s a step, 17 ms a message
TRAINING = ("step", "samples", "epoch", "lr", "loss", "acc", "val_loss", "val_acc", "test_loss", "test_acc")


def cfg(**kw) -> RunConfig:
    return RunConfig.from_dict({**BASE, **kw})


def trained(c: RunConfig, out) -> tuple[Trainer, list[dict]]:
    out.mkdir()
    tr = Trainer(c, SimWorld(c), out)
    tr.run()
    return tr, read_jsonl(out / "metrics.jsonl")


def final_model(tr: Trainer) -> torch.Tensor:
    with tr.sync.evaluation_model() as rep:
        return rep.params[0].clone()


# ------------------------------------------------------------------------------------------ the reductions
def test_decoupled_with_quorum_all_is_diloco(tmp_path):
    """Equal learners, K = M, DyLU off: every merge is the mean of the M Deltas and DiLoCo's outer step, so
    every training metric and the final model are DiLoCo's, identical (7 steps, H = 3: two merges and the
    final one). The clock differs by design: a synchroniser's push and pull, not a ring all-reduce."""
    dil, a = trained(cfg(sync="diloco"), tmp_path / "diloco")
    dec, b = trained(cfg(sync="decoupled_diloco", async_dylu=False), tmp_path / "decoupled")
    assert torch.equal(final_model(dil), final_model(dec))
    assert len(a) == len(b) == 9
    for x, y in zip(a, b):
        assert {k: x.get(k) for k in TRAINING} == {k: y.get(k) for k in TRAINING}
    assert b[-1]["t_virtual"] > b[3]["t_virtual"] > b[2]["t_virtual"] > 0
    # not a run without communication: the merges moved the model
    alone, _ = trained(cfg(sync="local", world_period=1000), tmp_path / "alone")
    assert not torch.allclose(alone.rep.params[0], final_model(dec), atol=1e-4)


def test_async_diloco_one_worker_is_diloco(tmp_path):
    """N = 1, c = 0: Delayed Nesterov is Nesterov SGD on every Delta, operation for operation; with one
    worker async_diloco is DiLoCo, identical."""
    one = dict(workers=1, batch_size=16, worker_bandwidth_mbit=[10])
    dil, a = trained(cfg(sync="diloco", **one), tmp_path / "diloco")
    asy, b = trained(cfg(sync="async_diloco", **one), tmp_path / "async")
    assert torch.equal(final_model(dil), final_model(asy))
    for x, y in zip(a, b, strict=True):
        assert {k: x.get(k) for k in TRAINING} == {k: y.get(k) for k in TRAINING}


def test_async_diloco_equal_workers_buffer_m_is_diloco_up_to_rounding(tmp_path):
    """Equal workers, DyLU off, N = M, c = 0: the M Delayed Nesterov updates of a round sum to DiLoCo's
    Nesterov outer step on the mean (M subtractions in place of one: equal up to rounding)."""
    dil, a = trained(cfg(sync="diloco"), tmp_path / "diloco")
    asy, b = trained(cfg(sync="async_diloco", async_dylu=False), tmp_path / "async")
    diff = (final_model(dil) - final_model(asy)).abs().max()
    assert 0 < diff < 1e-6 or diff == 0
    for x, y in zip(a, b, strict=True):
        for k in TRAINING:
            if x.get(k) is not None:
                assert y[k] == pytest.approx(x[k], abs=1e-5), (x["step"], k)
    # and N = 1 (Nesterov on every arrival) is a different method on the same run
    one, _ = trained(cfg(sync="async_diloco", async_dylu=False, async_buffer=1), tmp_path / "n1")
    assert (final_model(one) - final_model(dil)).abs().max() > 1e-4


def test_halos_one_region_is_its_global_server_form(tmp_path):
    """One region, K = 1, alpha = 1 and a GPS that adds what it is sent (rate 1, momentum 0, buffer 1): the
    GPS's model is the LPS's up to rounding, and HALoS is async_diloco at the LPS's rate, momentum, buffer;
    with unequal workers and DyLU on, so the arrivals are really asynchronous."""
    kw = dict(workers=3, batch_size=48, worker_speeds=[1.0, 2.0, 3.0], worker_bandwidth_mbit=[10, 20, 5],
              world_period=4, steps=9)
    asy, a = trained(cfg(sync="async_diloco", outer_lr=0.5, outer_momentum=0.8, async_buffer=2, **kw),
                     tmp_path / "async")
    hal, b = trained(cfg(sync="halos", halos_regions=1, halos_accumulation=1, halos_merge_weight=1.0,
                         outer_lr=1.0, outer_momentum=0.0, halos_global_buffer=1, halos_local_lr=0.5,
                         halos_local_momentum=0.8, halos_local_buffer=2, **kw), tmp_path / "halos")
    assert torch.allclose(final_model(asy), final_model(hal), rtol=0, atol=1e-6)
    for x, y in zip(a, b, strict=True):
        assert x["step"] == y["step"] and x["t_virtual"] == pytest.approx(y["t_virtual"], rel=1e-12)
        for k in TRAINING:
            if x.get(k) is not None:
                assert y[k] == pytest.approx(x[k], abs=1e-5), (x["step"], k)
    assert asy.sync.rounds == hal.sync.rounds and len(set(asy.sync.rounds)) > 1


def test_delayed_nesterov_buffer_sums_to_nesterov_on_the_mean():
    """Delayed Nesterov's N updates of a round equal one Nesterov step on the round's mean (the paper's
    Algorithm 3 against torch.optim.SGD(nesterov=True)), over three rounds."""
    torch.manual_seed(0)
    theta = torch.randn(50)
    ref = torch.nn.Parameter(theta.clone())
    sgd = torch.optim.SGD([ref], lr=0.7, momentum=0.9, nesterov=True)
    dn = DelayedNesterov(50, "cpu", beta=0.9, N=4)
    for _ in range(3):
        gs = [torch.randn(50) for _ in range(4)]
        for g in gs:
            dn.step(theta, g, 0.7)
        ref.grad = torch.stack(gs).mean(0)
        sgd.step()
    assert torch.allclose(theta, ref.detach(), rtol=0, atol=1e-5)


def test_delayed_nesterov_momentum_activation_moves_between_updates():
    """c > 0 applies c beta m between the momentum's updates (Algorithm 3's else branch); c = 0 does not."""
    dn0, dnc = DelayedNesterov(3, "cpu", 0.9, 2), DelayedNesterov(3, "cpu", 0.9, 2, c=0.5)
    a, b = torch.zeros(3), torch.zeros(3)
    g = torch.ones(3)
    for dn, th in ((dn0, a), (dnc, b)):
        dn.step(th, g, 1.0)
        dn.step(th, g, 1.0)  # m = 1 after the second
        dn.step(th, g, 1.0)
    # c = 0: -0.5, -(0.5 + 0.9), -0.5  = -2.4; c = 0.5: -0.5, -(0.5 + (1 - 1 + 0.5) 0.9), -(0.5 + 0.45) = -2.4
    assert torch.allclose(a, torch.full((3,), -2.4))
    assert torch.allclose(b, torch.full((3,), -2.4))
    dnc.step(b, g, 1.0)  # the 4th: m = 0.9 + 1 = 1.9, theta -= 0.5 + 0.5 x 0.9 x 1.9
    assert torch.allclose(b, torch.full((3,), -2.4 - 0.5 - 0.5 * 0.9 * 1.9))


def test_merge_deltas_weights_by_tokens():
    d = [torch.ones(2), torch.zeros(2)]
    assert torch.equal(merge_deltas(d, [1.0, 1.0]), torch.full((2,), 0.5))
    assert torch.allclose(merge_deltas(d, [3.0, 1.0]), torch.full((2,), 0.75))


# ------------------------------------------------------------------------------------------ stragglers
def test_dylu_steps():
    assert dylu_steps(6, [1.0, 3.0, 2.0], True) == [6, 2, 3]
    assert dylu_steps(6, [1.0, 3.0], False) == [6, 6]
    assert dylu_steps(2, [1.0, 5.0], True) == [2, 1]  # never below one step


@pytest.mark.parametrize("sync", ["async_diloco", "decoupled_diloco", "halos"])
def test_a_slow_worker_does_fewer_steps_and_does_not_stall_the_others(tmp_path, sync):
    """Worker 1 computes 3x as long. DyLU: its rounds are H/3 steps, so it takes about a third of worker 0's
    inner steps in the same time. The run's virtual time is that of the workers' summed rate (the straggler
    does not hold the others back): well below DiLoCo's, which waits for the straggler at every step."""
    net = dict(world_period=6, steps=12, worker_speeds=[1.0, 3.0], **COMPUTE_BOUND)
    kw = dict(sync=sync, **net)
    if sync == "decoupled_diloco":
        kw["decoupled_quorum"] = 1
    tr, lines = trained(cfg(**kw), tmp_path / sync)
    assert tr.sync.targets == [6, 2]
    s0, s1 = tr.sync.inner_steps
    assert s0 + s1 == 24 and s0 >= 2.5 * s1
    _, dil = trained(cfg(sync="diloco", **net), tmp_path / "diloco")
    # DiLoCo: 12 steps at the straggler's 2.4 s; here 24 inner steps at 1/0.8 + 1/2.4 steps a second, ~14.4 s
    assert dil[-2]["t_virtual"] >= 12 * 2.4
    assert lines[-2]["t_virtual"] < 0.6 * dil[-2]["t_virtual"]


def test_the_clock_charges_each_worker_its_own_waits(tmp_path):
    """Two workers, 0.16 s and 0.32 s an inner step, H = 2, each on its own 100 Mbit/s link to a server with a
    fat port: step 1 is worker 0's two steps (t = 0.32 s: worker 1 does not hold it back); step 2 is worker
    1's first two steps, and takes in every message before worker 0's next step: worker 0's push and pull,
    worker 1's push landing at 0.64 s + one message on its link (the server port's queue is shorter)."""
    c = cfg(sync="async_diloco", async_dylu=False, world_period=2, steps=2, clock_sample_s=0.01,
            worker_speeds=[1.0, 2.0], worker_bandwidth_mbit=[100, 100], eval_every=10.0)
    tr, lines = trained(c, tmp_path / "a")
    msg = 8 * tr.rep.P * 4 / (100e6 * c.link_goodput)  # one Delta or model on a worker's link
    assert lines[1]["step"] == 1 and lines[1]["t_virtual"] == pytest.approx(0.32, rel=1e-12)
    assert lines[2]["step"] == 2 and lines[2]["t_virtual"] == pytest.approx(0.64 + msg, rel=1e-12)
    assert tr.sync.inner_steps == [2, 2] and tr.sync.rounds == [1, 1]
    # the flush: worker 0 (back at 0.32 + 2 msg) had taken no step since; worker 1's model arrives last
    assert lines[-1]["t_virtual"] == pytest.approx(0.64 + 2 * msg, rel=1e-12)


def test_a_server_port_follows_the_bandwidth_schedule():
    """A message starting after the schedule's switch crosses the server's link at the new rate; messages
    queue on one direction of the port and not across directions."""
    c = cfg(sync="async_diloco", worker_bandwidth_mbit=[], bandwidth_schedule=[0, 10, 1, 100])
    port = ServerPort(c, lambda t: server_link(c, t), False)
    n = 1_000_000
    slow, fast = 8 * n / (10e6 * c.link_goodput), 8 * n / (100e6 * c.link_goodput)
    assert port.transfer(0.0, n, "in", 0) == pytest.approx(slow, rel=1e-12)
    assert port.transfer(0.0, n, "in", 1) == pytest.approx(2 * slow, rel=1e-12)  # queued behind the first
    assert port.transfer(0.0, n, "out", 0) == pytest.approx(slow, rel=1e-12)
    assert port.transfer(5.0, n, "in", 0) == pytest.approx(5.0 + fast, rel=1e-12)


def test_without_dylu_the_fast_worker_runs_more_rounds(tmp_path):
    tr, _ = trained(cfg(sync="async_diloco", async_dylu=False, world_period=3, steps=12, worker_speeds=[1.0, 3.0],
                        **COMPUTE_BOUND), tmp_path / "a")
    assert tr.sync.targets == [3, 3]
    assert tr.sync.rounds[0] >= 2 * tr.sync.rounds[1] >= 2


def test_decoupled_quorum_one_merges_without_the_straggler(tmp_path):
    """K = 1: the fast learner's Deltas are merged without waiting for the slow one (more merges than the slow
    learner's rounds); K = all: one merge per slow round."""
    kw = dict(sync="decoupled_diloco", async_dylu=False, world_period=3, steps=12, worker_speeds=[1.0, 4.0],
              **COMPUTE_BOUND)
    k1, _ = trained(cfg(decoupled_quorum=1, **kw), tmp_path / "k1")
    k2, _ = trained(cfg(decoupled_quorum=2, **kw), tmp_path / "k2")
    assert k1.sync.version > k1.sync.rounds[1]
    assert k2.sync.version <= k2.sync.rounds[1] + 1
    assert k2.sync.rounds[0] == k2.sync.rounds[1]  # K = all: the fast learner waits for each merge


# ------------------------------------------------------------------------------------------ checkpoints
@pytest.mark.parametrize("sync,kw", [("async_diloco", {"async_grace_s": 0.05}),
                                     ("decoupled_diloco", {"decoupled_quorum": 2, "faults": ["churn:1@2:5"]}),
                                     ("halos", {"halos_regions": 3, "halos_accumulation": 2})])
def test_a_resumed_run_gives_identical_later_metrics(tmp_path, monkeypatch, sync, kw):
    """A run killed after step 7 resumes from its step-6 checkpoint (events in flight, the workers' rounds and
    inner optimisers, the servers' models and momenta, the ports' queues) to the uninterrupted run's metrics."""
    c = cfg(sync=sync, workers=3, batch_size=48, worker_speeds=[1.0, 2.0, 3.0], worker_bandwidth_mbit=[10, 20, 5],
            world_period=3, steps=9, checkpoint_every=3, optimizer="adamw", lr=0.003, **kw)
    run(c, tmp_path / "full", quiet=True)
    killed_run(c, tmp_path / "k", monkeypatch, after_steps=7)
    assert json.loads((tmp_path / "k" / "checkpoint" / "latest.json").read_text())["step"] == 6
    run(c, tmp_path / "k", quiet=True)
    wall = ("t_compute", "t_compress", "t_comm", "t_step", "t_meta", "t_wall")

    def strip(lines):
        return [{k: v for k, v in ln.items() if k not in wall} for ln in lines]

    assert strip(read_jsonl(tmp_path / "k" / "metrics.jsonl")) == strip(read_jsonl(tmp_path / "full" / "metrics.jsonl"))


# ------------------------------------------------------------------------------------------ churn
@pytest.mark.parametrize("sync,kw", [("async_diloco", {}), ("decoupled_diloco", {"decoupled_quorum": 2}),
                                     ("halos", {"halos_regions": 3})])
def test_a_worker_that_leaves_and_rejoins(tmp_path, sync, kw):
    """Worker 2 of 3 leaves after step 2 and rejoins after step 6 of 12: the others run on (the run ends, its
    samples all counted), worker 2 takes fewer inner steps than in the run without churn, and trains again
    after its return (more inner steps than had it left for good)."""
    base = dict(sync=sync, workers=3, batch_size=48, worker_bandwidth_mbit=[1000] * 3, clock_sample_s=0.05,
                world_period=2, steps=12, **kw)
    full, _ = trained(cfg(**base), tmp_path / "full")
    churn, lines = trained(cfg(faults=["churn:2@2:6"], **base), tmp_path / "churn")
    gone, _ = trained(cfg(faults=["churn:2@2"], **base), tmp_path / "gone")
    assert lines[-1]["samples"] == 12 * 48 and sum(churn.sync.inner_steps) == 36
    assert gone.sync.inner_steps[2] < churn.sync.inner_steps[2] < full.sync.inner_steps[2]
    assert torch.isfinite(final_model(churn)).all()


@pytest.mark.parametrize("kw,msg", [
    (dict(sync="diloco", faults=["churn:1@2:4"]), "waits for every worker"),
    (dict(sync="decoupled_diloco", faults=["churn:1@2:4"]), "can not meet"),
    (dict(sync="async_diloco", faults=["churn:2@2:4"]), "not one of the 2 workers"),
    (dict(sync="async_diloco", faults=["churn:1@4:2"]), "STEP < REJOIN"),
    (dict(sync="async_diloco", faults=["churn:0@2", "churn:1@3"]), "all 2 workers are away"),
    (dict(sync="async_diloco", faults=["leave 1"]), "expected churn:RANK@STEP"),
])
def test_churn_errors_are_one_line(kw, msg):
    with pytest.raises(ConfigError, match=msg) as e:
        cfg(**kw)
    assert "\n" not in str(e.value)


# ------------------------------------------------------------------------------------------ procs
@pytest.mark.parametrize("sync,kw", [("decoupled_diloco", {}),
                                     ("async_diloco", {"worker_speeds": [1.0, 2.5], "async_grace_s": 0.1}),
                                     ("halos", {"workers": 4, "batch_size": 32, "halos_regions": 2,
                                                "worker_speeds": [1.0, 2.0, 1.0, 3.0],
                                                "worker_bandwidth_mbit": [10, 10, 5, 10]})])
def test_procs_replays_the_sim_run(tmp_path, sync, kw):
    """One process per worker (gloo, lowbw.comm's broadcast of each arrival): the same metrics as sim, with
    quorum = all (decoupled) and with unequal workers (async_diloco, halos) alike."""
    sim, procs = sim_and_procs(cfg, tmp_path, sync=sync, steps=5, **kw)
    assert len(sim) == 7
    assert_same_metrics(sim, procs)


@pytest.mark.netns
@pytest.mark.slow
def test_the_testbed_replays_the_sim_run(tmp_path):
    """procs inside the tc testbed (each worker in its own namespace behind a 50 Mbit/s link): HALoS with
    two regions of unequal workers trains to the sim run's losses, its broadcasts crossing the shaped links."""
    from lowbw.net.testbed import netns_missing

    if netns_missing():
        pytest.skip("needs root, ip netns and tc: " + "; ".join(netns_missing()))
    kw = dict(sync="halos", workers=4, batch_size=32, halos_regions=2, worker_speeds=[1.0, 2.0, 1.0, 3.0],
              bandwidth_mbit=50.0, worker_bandwidth_mbit=[], steps=4)
    _, sim = trained(cfg(**kw), tmp_path / "sim")
    run(cfg(backend="procs", testbed=True, **kw), tmp_path / "tb", quiet=True)
    tb = read_jsonl(tmp_path / "tb" / "metrics.jsonl")
    assert_same_metrics(sim, tb)
    assert json.loads((tmp_path / "tb" / "config.json").read_text())["emulation"] == "netns-tc"
    assert tb[-1]["t_comm"] > 0  # the shaped links really carried the Deltas


# ------------------------------------------------------------------------------------------ determinism, config
@pytest.mark.parametrize("sync,kw", [("async_diloco", {"async_grace_s": 0.5}),
                                     ("decoupled_diloco", {"decoupled_quorum": 2, "async_grace_s": 0.2}),
                                     ("halos", {"halos_regions": 2, "halos_region_mbit": 100.0})])
def test_same_config_and_seed_give_identical_metrics(tmp_path, sync, kw):
    c = cfg(sync=sync, workers=4, batch_size=32, worker_speeds=[1.0, 1.5, 2.0, 3.0],
            worker_bandwidth_mbit=[10, 5, 20, 10], steps=9, **kw)
    _, a = trained(c, tmp_path / "a")
    _, b = trained(c, tmp_path / "b")
    wall = {"t_compute", "t_compress", "t_comm", "t_step", "t_meta", "t_wall"}
    assert set(TIME_FIELDS) > wall
    strip = [{k: v for k, v in x.items() if k not in wall} for x in a]
    assert strip == [{k: v for k, v in x.items() if k not in wall} for x in b]
    assert a[-1]["t_virtual"] > 0 and a[-1]["bytes_sent"] > 0


@pytest.mark.parametrize("kw,key", [
    (dict(sync="async_diloco", backend="procs", clock="measured"), "clock"),
    (dict(sync="decoupled_diloco", decoupled_quorum=3), "decoupled_quorum"),
    (dict(sync="halos", workers=3, batch_size=48, worker_bandwidth_mbit=[], halos_regions=2), "halos_regions"),
    (dict(sync="diloco", async_buffer=2), "async_buffer"),
    (dict(sync="async_diloco", halos_regions=2), "halos_regions"),
    (dict(sync="async_diloco", decoupled_quorum=1), "decoupled_quorum"),
    (dict(sync="decoupled_diloco", async_buffer=2), "async_buffer"),
    (dict(sync="halos", async_momentum_activation=0.5), "async_momentum_activation"),
    (dict(sync="halos", outer_optimizer="sgd"), "outer_optimizer"),
    (dict(sync="decoupled_diloco", compressor="topk"), "compressor"),
    (dict(sync="async_diloco", async_buffer=1, async_momentum_activation=0.5), "async_momentum_activation"),
    (dict(sync="halos", halos_merge_weight=0.0), "halos_merge_weight"),
])
def test_bad_values_are_one_line_errors_naming_the_key(kw, key):
    with pytest.raises(ConfigError) as e:
        cfg(**kw)
    assert key in str(e.value) and "\n" not in str(e.value)
