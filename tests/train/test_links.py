"""Per-worker links in the virtual clock: equal lists are the scalar keys; a slow worker, a slow uplink and a
trace cost what lowbw.net.costlinks says; the parameter server and the testbed take them too."""

from __future__ import annotations

import json

import pytest
import torch

from lowbw.net import trace as T
from lowbw.net.trace import load_trace, rates_at
from lowbw.runs.io import read_jsonl
from lowbw.train import launch
from lowbw.train.config import RunConfig
from lowbw.train.launch import run
from lowbw.train.world import SimWorld, bandwidth_at, link_for, worker_links
from tests.conftest import netns
from tests.helpers import sim_run

BASE = sim_run(workers=4, steps=4, log_every=2, train_limit=200, test_limit=50, eval_every=1.0)
NUMEL = 1000  # a row of 4000 bytes
MBIT = 1e6


def cfg_of(**kw) -> RunConfig:
    return RunConfig.from_dict({**BASE, "link_goodput": 1.0, **kw})


def ring_mean(cfg: RunConfig, now: float = 0.0):
    """A world average of one 4000-byte row per worker through the collective (threads)."""
    w = SimWorld(cfg)
    w.now = now
    return w.exchange("world", lambda i, c: c.all_reduce(torch.ones(NUMEL)))


def clocks(out) -> dict:
    last = read_jsonl(out / "metrics.jsonl")[-1]
    return {k: last[k] for k in ("t_virtual", "t_virtual_comm", "loss", "comm_alpha_terms", "comm_beta_bytes")}


@pytest.mark.parametrize("scheme", [
    dict(),
    dict(compressor="topk", compressor_args={"ratio": 0.05}, error_feedback="on"),
    dict(sync="hierarchical", households=2, world_period=2, assignment="household", household_shards=2),
    dict(sync="ssp"),
])
def test_equal_per_worker_lists_are_the_scalar_keys(tmp_path, scheme):
    scalar = dict(bandwidth_mbit=7.0, latency_ms=3.0)
    lists = dict(bandwidth_mbit=99.0, latency_ms=0.0, worker_bandwidth_mbit=[7.0] * 4, worker_uplink_mbit=[7.0] * 4,
                 worker_latency_ms=[3.0] * 4)
    if scheme.get("sync") == "ssp":  # the server's own link is bandwidth_mbit / latency_ms
        lists.update(bandwidth_mbit=7.0, latency_ms=3.0)
    run(RunConfig.from_dict({**BASE, **scheme, **scalar}), tmp_path / "scalar", quiet=True)
    run(RunConfig.from_dict({**BASE, **scheme, **lists}), tmp_path / "lists", quiet=True)
    a, b = clocks(tmp_path / "scalar"), clocks(tmp_path / "lists")
    assert a == b  # bit-identical
    assert a["t_virtual_comm"] > 0


def test_one_slow_worker_bounds_the_ring():
    # 4 workers, worker 2 at 1 Mbit/s, the rest at 10, 2 ms latency: every one of the 2 (N-1) ring steps moves
    # M/N = 1000 bytes through the slow link
    cfg = cfg_of(worker_bandwidth_mbit=[10, 10, 1, 10], latency_ms=2.0)
    ex = ring_mean(cfg)
    assert ex.v_comm == pytest.approx(2 * 3 * (0.002 + 8 * 1000 / (1 * MBIT)))
    # the equal-link coefficients are kept (re-timing at the slowest link gives the same ring here)
    assert ex.v_alpha == 6.0 and ex.v_beta_bytes == pytest.approx(6000.0)
    even = ring_mean(cfg_of(bandwidth_mbit=10, latency_ms=2.0))
    assert even.v_comm == pytest.approx(2 * 3 * (0.002 + 8 * 1000 / (10 * MBIT)))
    # the synthesised dense average times the same way
    dm = SimWorld(cfg).dense_mean("world", [torch.ones(NUMEL) for _ in range(4)])
    assert dm.v_comm == pytest.approx(ex.v_comm)


def test_slow_uplinks_and_the_parameter_server(tmp_path):
    # uplinks 2 Mbit/s, downlinks 10: a ring hop i -> i+1 runs at min(U_i, D_{i+1}) = 2
    cfg = cfg_of(worker_bandwidth_mbit=[10] * 4, worker_uplink_mbit=[2] * 4)
    assert ring_mean(cfg).v_comm == pytest.approx(2 * 3 * 8 * 1000 / (2 * MBIT))
    # ps at rank 0: gather = the three 4000-byte uplinks at 2 (in parallel, 12000 bytes into a 10 Mbit/s
    # downlink take less), broadcast = 3 x 4000 bytes out of the root's 2 Mbit/s uplink
    ps = ring_mean(cfg_of(worker_bandwidth_mbit=[10] * 4, worker_uplink_mbit=[2] * 4, collective="ps"))
    assert ps.v_comm == pytest.approx(8 * 4000 / (2 * MBIT) + 3 * 8 * 4000 / (2 * MBIT))
    # only the root's uplink slow: the gather runs at the others' 10 Mbit/s uplinks into its downlink
    ps = ring_mean(cfg_of(worker_bandwidth_mbit=[10] * 4, worker_uplink_mbit=[2, 10, 10, 10], collective="ps"))
    assert ps.v_comm == pytest.approx(3 * 8 * 4000 / (10 * MBIT) + 3 * 8 * 4000 / (2 * MBIT))
    assert link_for(cfg, "world").bandwidth_bps == 2 * MBIT  # the slowest link, for adaptive rules
    # a compressed exchange on the batched path (lowbw.train.batched) times on the per-worker links too
    topk = dict(compressor="topk", compressor_args={"ratio": 0.05}, error_feedback="on")
    run(RunConfig.from_dict({**BASE, **topk, "worker_bandwidth_mbit": [10, 10, 10, 1]}), tmp_path / "slow", quiet=True)
    run(RunConfig.from_dict({**BASE, **topk, "worker_bandwidth_mbit": [10] * 4}), tmp_path / "even", quiet=True)
    run(RunConfig.from_dict({**BASE, **topk, "bandwidth_mbit": 1.0}), tmp_path / "allslow", quiet=True)
    slow, even, allslow = (clocks(tmp_path / k)["t_virtual_comm"] for k in ("slow", "even", "allslow"))
    # a ring all-gather of equal payloads is bounded by its slowest hop: one slow worker = all slow
    assert even < slow and slow == pytest.approx(allslow)
    assert bandwidth_at(cfg, 0.0) == 2.0


def test_a_trace_changes_the_rate_at_its_virtual_time(tmp_path):
    f = tmp_path / "t.csv"
    f.write_text("t_s,worker,mbit,delay_ms\n0,*,10,1\n5,3,1\n8,*,20\n")
    tr = load_trace(f, 4)
    assert rates_at(tr, 4.99, 4) == [(10e6, 1e-3)] * 4
    assert rates_at(tr, 5.0, 4)[3] == (1e6, 1e-3) and rates_at(tr, 5.0, 4)[0] == (10e6, 1e-3)
    assert rates_at(tr, 100.0, 4) == [(20e6, 1e-3)] * 4  # played once: the last values stay
    cfg = cfg_of(bandwidth_trace=str(f), bandwidth_mbit=50.0)
    assert ring_mean(cfg, 4.99).v_comm == pytest.approx(6 * (0.001 + 8 * 1000 / (10 * MBIT)))
    assert ring_mean(cfg, 5.0).v_comm == pytest.approx(6 * (0.001 + 8 * 1000 / (1 * MBIT)))
    assert [w.up_bps for w in worker_links(cfg, 9.0)] == [20 * MBIT] * 4
    # a looping (Mahimahi) trace wraps around its period
    m = tmp_path / "mm.trace"
    m.write_text("".join(f"{t}\n" for t in [50] * 10 + [150]))  # 10 packets in [0, 0.1 s), 1 in [0.1, 0.2)
    mm = load_trace(m, 4)
    assert rates_at(mm, 0.05, 1)[0][0] == pytest.approx(10 * 1500 * 8 / 0.1)
    assert rates_at(mm, 0.25, 1)[0][0] == pytest.approx(10 * 1500 * 8 / 0.1)
    assert rates_at(mm, 0.35, 1)[0][0] == pytest.approx(1500 * 8 / 0.1)


def test_the_training_trace_is_what_the_generator_makes():
    """wifi10 (E10): the WiFi model at a 10 Mbit/s median for 20 minutes, with dips, found by name."""
    path = T.PACKAGED / "wifi10.csv"
    assert path.read_text() == T.synthetic_csv("wifi10")
    tr = T.resolve_trace("wifi10", 4)
    mbit = sorted(s.bps / 1e6 for s in tr.steps)
    assert len(mbit) == 2400 and tr.steps[-1].t_s == 1199.5
    assert 8 < mbit[len(mbit) // 2] < 12 and mbit[0] < 3
    assert tr.source == str(path) and not tr.changes_delay


def test_a_trace_slows_a_run_after_its_step(tmp_path):
    f = tmp_path / "t.csv"
    steady = dict(steps=6, bandwidth_mbit=10.0)
    run(RunConfig.from_dict({**BASE, **steady}), tmp_path / "steady", quiet=True)
    t1 = read_jsonl(tmp_path / "steady" / "metrics.jsonl")
    # the rate drops to 1 Mbit/s once the steady run's clock passed step 2
    t_drop = next(x["t_virtual"] for x in t1 if x["step"] == 2)
    f.write_text(f"t_s,worker,mbit\n0,*,10\n{t_drop},*,1\n")
    run(RunConfig.from_dict({**BASE, **steady, "bandwidth_trace": str(f)}), tmp_path / "trace", quiet=True)
    t2 = read_jsonl(tmp_path / "trace" / "metrics.jsonl")
    at = {x["step"]: x["t_virtual"] for x in t2}
    base = {x["step"]: x["t_virtual"] for x in t1}
    assert at[2] == pytest.approx(base[2])  # before the drop: the same clock
    assert at[6] - at[4] > 5 * (base[6] - base[4])  # after: steps take ~10x the communication


@pytest.mark.parametrize("sync,slower", [("ssp", 1.5), ("async", 0.0)])
def test_the_parameter_server_on_per_worker_links(tmp_path, sync, slower):
    """SSP with bound 0 waits for the slow worker's pushes; async lets the others run ahead (and so is
    slowed by less)."""
    kw = dict(sync=sync, steps=4, bandwidth_mbit=10.0) | ({"staleness": 0} if sync == "ssp" else {})  # async: none
    run(RunConfig.from_dict({**BASE, **kw}), tmp_path / "even", quiet=True)
    run(RunConfig.from_dict({**BASE, **kw, "worker_bandwidth_mbit": [10, 10, 10, 0.5]}), tmp_path / "slow",
        quiet=True)
    even, slow = clocks(tmp_path / "even"), clocks(tmp_path / "slow")
    assert slow["t_virtual"] > even["t_virtual"]
    assert slow["t_virtual"] > slower * even["t_virtual"]
    if sync == "async":
        assert slow["t_virtual"] < 1.5 * even["t_virtual"]


def test_a_straggler_falls_behind_under_async_and_is_waited_for_under_ssp(tmp_path, monkeypatch):
    """The server's link serves pushes in the order they are ready: a slow worker's push, computed later, does
    not hold the link for the fast workers' (which held every worker to the slow one's pace, so SSP and async
    gave identical runs). With one worker three times slower, async's fast workers push more often than it and
    run ahead without bound; SSP with bound 2 keeps every worker within 2 + 1 pushes of the slowest."""
    from lowbw.train.schemes import parameter_server as ps

    spreads: list[tuple[int, list[int]]] = []
    update = ps.ParameterServer.update

    def spy(self, lr):
        info = update(self, lr)
        spreads.append((max(self.clock) - min(self.clock), list(self.clock)))
        return info

    monkeypatch.setattr(ps.ParameterServer, "update", spy)
    base = sim_run(workers=4, steps=12, bandwidth_mbit=1000.0) | dict(clock="model", clock_sample_s=0.01,
                                                                       latency_ms=0.0, worker_speeds=[1, 1, 1, 3])
    out = {}
    for name, kw in (("ssp", {"sync": "ssp", "staleness": 2}), ("async", {"sync": "async"})):
        spreads.clear()
        run(RunConfig.from_dict({**base, **kw}), tmp_path / name, quiet=True)
        out[name] = (max(s for s, _ in spreads), spreads[-1][1], clocks(tmp_path / name)["t_virtual"])
    assert out["ssp"][0] == 3 and out["async"][0] > 3
    fast, slow = out["async"][1][:3], out["async"][1][3]
    assert min(fast) > 2 * slow  # async: the straggler pushes far less often
    assert out["async"][2] < out["ssp"][2]  # and nobody waits for it


def test_testbed_arguments_of_a_run():
    cfg = cfg_of(worker_bandwidth_mbit=[10, 10, 1, 10], worker_uplink_mbit=[2, 10, 1, 10],
                 worker_latency_ms=[0, 5, 0, 0])
    links = launch.testbed_links(cfg)["links"]
    assert [(x.up_bps, x.down_bps, x.delay_s) for x in links] == [
        (2e6, 10e6, 0.0), (10e6, 10e6, 0.005), (1e6, 1e6, 0.0), (10e6, 10e6, 0.0)]
    assert launch.testbed_links(cfg_of(bandwidth_mbit=5.0)) == {"workers": 4, "rate": "5.0mbit", "delay": None}
    assert launch.testbed_links(cfg_of(bandwidth_trace="wifi"))["trace"].source.endswith("wifi.csv")
    with pytest.raises(ValueError, match="nosuch"):
        ring_mean(cfg_of(bandwidth_trace="nosuch.csv"))


@netns
def test_procs_on_the_testbed_get_the_per_worker_links(tmp_path):
    cfg = RunConfig.from_dict({**BASE, "workers": 2, "steps": 2, "backend": "procs", "testbed": True,
                               "worker_bandwidth_mbit": [50.0, 20.0], "worker_uplink_mbit": [50.0, 10.0]})
    run(cfg, tmp_path / "tb", quiet=True)
    desc = json.loads((tmp_path / "tb" / ".testbed.json").read_text())
    assert desc["emulation"] == "netns-tc"
    assert [(x["up_bps"], x["down_bps"]) for x in desc["links"]] == [(50e6, 50e6), (10e6, 20e6)]
    assert (tmp_path / "tb" / "summary.json").exists()


def test_testbed_realtime_is_checked_before_any_work(tmp_path, monkeypatch):
    """``testbed_realtime``: a SCHED_RR priority for the testbed's workers; without the testbed, out of range,
    or where this process may not use SCHED_RR, one line naming the value before the run directory exists."""
    from lowbw.net.probe import RealtimeUnavailable
    from lowbw.train.config_rules import ConfigError

    with pytest.raises(ConfigError, match="testbed_realtime.*10.*testbed=true"):
        RunConfig.from_dict({**BASE, "backend": "procs", "testbed_realtime": 10})
    with pytest.raises(ConfigError, match="testbed_realtime"):
        RunConfig.from_dict({**BASE, "backend": "procs", "testbed": True, "testbed_realtime": 100})
    cfg = RunConfig.from_dict({**BASE, "backend": "procs", "testbed": True, "testbed_realtime": 10})
    monkeypatch.setattr(launch, "realtime_available", lambda: False)
    with pytest.raises(RealtimeUnavailable, match="testbed_realtime=10: .*SCHED_RR") as ei:
        run(cfg, tmp_path / "rt", quiet=True)
    assert "\n" not in str(ei.value)
    assert not (tmp_path / "rt").exists()


@netns
def test_procs_on_the_testbed_under_sched_rr(tmp_path):
    """The testbed's workers under SCHED_RR where ``testbed_realtime`` asks for it, recorded in .testbed.json."""
    from lowbw.net.probe import realtime_available

    if not realtime_available():
        pytest.skip("this machine does not allow SCHED_RR (covered by the check above)")
    cfg = RunConfig.from_dict({**BASE, "workers": 2, "steps": 2, "backend": "procs", "testbed": True,
                               "testbed_realtime": 10})
    run(cfg, tmp_path / "tb", quiet=True)
    desc = json.loads((tmp_path / "tb" / ".testbed.json").read_text())
    assert desc["scheduling"] == "SCHED_RR priority 10"
    assert (tmp_path / "tb" / "summary.json").exists()


def test_the_shapers_bucket_on_unequal_links():
    """The testbed's tbf bucket on per-worker links: where every step waits for the slowest hop (ring calls,
    latencies alike) the clock's bucket model on the slowest link, as on an equal link of that rate; a star
    (parameter server) on unequal links keeps the plain per-worker time; equal lists time as the scalar keys."""
    import dataclasses

    from lowbw.compress.protocol import CallRecord
    from lowbw.net.costmodel import calls_time
    from lowbw.train.links import ShapedLink, WorkerLinks, comm_cost

    slow = cfg_of(worker_bandwidth_mbit=[10, 10, 10, 1], latency_ms=0.5)
    bucket = 15140.0
    shaped = dataclasses.replace(slow, clock_shaper_burst_bytes=bucket)  # as bench e10check's cells have it
    link = link_for(shaped, "world")
    assert isinstance(link, WorkerLinks) and link.bucket_bytes == bucket  # goodput 1 here
    assert link_for(slow, "world").bucket_bytes == 0.0
    ring = {0: [[CallRecord("all_reduce", 4000, "ring", 4), CallRecord("all_gather", 400, "ring", 4)]] * 4}
    plain = comm_cost(ring, link_for(slow, "world"))["v_comm"]
    with_bucket = comm_cost(ring, link)["v_comm"]
    w = link.workers
    from lowbw.net import costlinks

    assert with_bucket == pytest.approx(calls_time(ring[0], costlinks.slowest_link(list(w)), bucket))
    assert with_bucket < 0.5 * plain  # small messages leave at line rate from the bucket
    ps = {0: [[CallRecord("all_reduce", 4000, "ps", 4)]] * 4}
    assert comm_cost(ps, link)["v_comm"] == pytest.approx(comm_cost(ps, link_for(slow, "world"))["v_comm"])
    # equal per-worker lists with a bucket: exactly the scalar link's token-bucket time
    eq = dataclasses.replace(cfg_of(worker_bandwidth_mbit=[7.0] * 4, bandwidth_mbit=7.0, latency_ms=0.5),
                             clock_shaper_burst_bytes=bucket)
    scalar = cfg_of(bandwidth_mbit=7.0, latency_ms=0.5, clock_shaper_burst_bytes=bucket)
    assert isinstance(link_for(scalar, "world"), ShapedLink)
    assert comm_cost(ring, link_for(eq, "world"))["v_comm"] == pytest.approx(
        comm_cost(ring, link_for(scalar, "world"))["v_comm"], rel=1e-12)
