"""sync: desloc (lowbw.train.schemes.desloc): local Adam, its parameters and each moment averaged on its own period."""

from __future__ import annotations

import pytest
import torch

from lowbw.runs.io import read_jsonl
from lowbw.train.config import ConfigError
from lowbw.train.launch import run
from lowbw.train.loop import Trainer
from lowbw.train.schemes.desloc import periods
from lowbw.train.world import SimWorld
from tests.helpers import config_of, sim_run, strip
from tests.sim_procs import assert_same_metrics, sim_and_procs

BASE = sim_run(optimizer="adam", lr=0.001, weight_decay=0.0)
cfg = config_of(BASE)


def test_moments_never_averaged_is_local_adam_without_state_sync(tmp_path):
    """K_u, K_v beyond the run: the same run as sync: local with Adam, every metric equal."""
    run(cfg(sync="local", world_period=2), tmp_path / "local", quiet=True)
    run(cfg(sync="desloc", world_period=2, desloc_m1_period=100, desloc_m2_period=100), tmp_path / "d", quiet=True)
    a, b = read_jsonl(tmp_path / "local" / "metrics.jsonl"), read_jsonl(tmp_path / "d" / "metrics.jsonl")
    assert strip(a) == strip(b)


def test_equal_periods_are_local_adam():
    """K_x = K_u = K_v = 2 (Local Adam): after step 2 the parameters and both moments are the workers' means
    of an unsynchronised twin's; every period sends three model-sized all-reduces; step 3 then differs from
    the twin's."""
    c = cfg(sync="desloc", world_period=2, desloc_m1_period=2, desloc_m2_period=2)
    d = Trainer(c, SimWorld(c))
    t = cfg(sync="local", world_period=1000)
    twin = Trainer(t, SimWorld(t))
    for _ in range(2):
        d.train_step()
        twin.train_step()
    assert not torch.equal(twin.opt.state["exp_avg"][0], twin.opt.state["exp_avg"][1])
    for key in ("exp_avg", "exp_avg_sq"):
        want = twin.opt.state[key].mean(0)
        for i in range(2):
            assert torch.allclose(d.opt.state[key][i], want, rtol=1e-6, atol=1e-12), key
    for i in range(2):
        assert torch.allclose(d.rep.params[i], twin.rep.params.mean(0), rtol=0, atol=1e-7)
    assert d.state.in_sync
    loc = cfg(sync="local", world_period=2)
    local = Trainer(loc, SimWorld(loc))
    for _ in range(2):
        local.train_step()
    assert d.state.bytes_sent == 3 * local.state.bytes_sent > 0
    d.train_step()
    twin.train_step()
    assert not torch.allclose(d.rep.params[0], twin.rep.params[0], atol=1e-6)


def test_default_periods_are_three_and_six_times_K_x():
    assert periods(cfg(sync="desloc", world_period=4)) == {"exp_avg": 12, "exp_avg_sq": 24}
    assert periods(cfg(sync="desloc", world_period=4, desloc_m1_period=5)) == {"exp_avg": 5, "exp_avg_sq": 24}


@pytest.mark.parametrize("kw,key", [
    (dict(sync="desloc", optimizer="sgd"), "optimizer"),
    (dict(sync="local", desloc_m1_period=4), "desloc_m1_period"),
    (dict(sync="desloc", compressor="topk", compressor_args={"ratio": 0.1}), "compressor"),
])
def test_desloc_keys_are_checked(kw, key):
    with pytest.raises(ConfigError) as e:
        cfg(**kw)
    assert e.value.key == key


def test_desloc_on_procs_matches_sim(tmp_path):
    kw = dict(sync="desloc", world_period=2, desloc_m1_period=4, desloc_m2_period=2, steps=5)
    sim, procs = sim_and_procs(cfg, tmp_path, **kw)
    assert len(sim) == 7
    assert_same_metrics(sim, procs)
