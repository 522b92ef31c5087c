"""sync: sparta and sparta_density with diloco (lowbw.train.schemes.sparta): a random part of the parameters averaged
after every step."""

from __future__ import annotations

import pytest
import torch

from lowbw.comm.registry import expected
from lowbw.runs.io import read_jsonl
from lowbw.train.config import ConfigError
from lowbw.train.launch import run
from lowbw.train.loop import Trainer
from lowbw.train.schemes.sparta import indices
from lowbw.train.world import SimWorld
from tests.helpers import config_of, sim_run, strip
from tests.sim_procs import assert_same_metrics, sim_and_procs

BASE = sim_run()
cfg = config_of(BASE)


def test_density_one_is_per_step_parameter_averaging(tmp_path):
    """p = 1: every parameter averaged after every step = sync: local with world_period 1, every metric equal
    (bytes and virtual time included)."""
    run(cfg(sync="local", world_period=1), tmp_path / "local", quiet=True)
    run(cfg(sync="sparta", sparta_density=1.0), tmp_path / "sparta", quiet=True)
    a, b = read_jsonl(tmp_path / "local" / "metrics.jsonl"), read_jsonl(tmp_path / "sparta" / "metrics.jsonl")
    assert strip(a) == strip(b)


def test_a_step_averages_exactly_its_indices():
    """p = 0.1: after a step the k drawn coordinates agree on both workers (the mean of an unsynchronised
    twin's), the rest do not; the step sends one all-reduce of k fp32 values; worker 0's model is evaluable."""
    c = cfg(sync="sparta", sparta_density=0.1, steps=3)
    sp = Trainer(c, SimWorld(c))
    t = cfg(sync="local", world_period=1000, steps=3)
    twin = Trainer(t, SimWorld(t))
    sp.train_step()
    twin.train_step()
    P = sp.rep.P
    k = round(0.1 * P)
    idx = indices(c.seed, 1, P, k)
    assert len(set(idx.tolist())) == k
    assert torch.equal(sp.rep.params[0, idx], sp.rep.params[1, idx])
    assert torch.allclose(sp.rep.params[0, idx], twin.rep.params[:, idx].mean(0), rtol=0, atol=1e-7)
    rest = torch.ones(P, dtype=torch.bool)
    rest[idx] = False
    assert torch.equal(sp.rep.params[:, rest], twin.rep.params[:, rest])
    assert not torch.equal(sp.rep.params[0, rest], sp.rep.params[1, rest])
    assert sp.state.bytes_sent == sum(expected("ring", k * 4, 2, r)[0] for r in range(2))
    assert not sp.state.in_sync and sp.evaluable
    assert not torch.equal(indices(c.seed, 2, P, k), idx)  # a fresh draw every step


def test_sparta_composes_with_diloco():
    """diloco (H = 3) + p = 0.05: the outer steps as diloco's plus one sparse all-reduce every step."""
    kw = dict(sync="diloco", world_period=3, steps=6)
    plain = Trainer(cfg(**kw), SimWorld(cfg(**kw)))
    both = Trainer(cfg(sparta_density=0.05, **kw), SimWorld(cfg(sparta_density=0.05, **kw)))
    for _ in range(6):
        plain.train_step()
        both.train_step()
    k = round(0.05 * plain.rep.P)
    per_step = sum(expected("ring", k * 4, 2, r)[0] for r in range(2))
    assert both.state.bytes_sent == plain.state.bytes_sent + 6 * per_step
    assert both.state.in_sync
    assert not torch.allclose(both.rep.params, plain.rep.params, atol=1e-6)


@pytest.mark.parametrize("kw,key", [
    (dict(sync="sparta"), "sparta_density"),
    (dict(sync="local", world_period=2, sparta_density=0.01), "sparta_density"),
    (dict(sync="sparta", sparta_density=0.01, world_period=4), "world_period"),
    (dict(sync="sparta", sparta_density=1.5), "sparta_density"),
])
def test_sparta_keys_are_checked(kw, key):
    with pytest.raises(ConfigError) as e:
        cfg(**kw)
    assert e.value.key == key


@pytest.mark.parametrize("kw", [dict(sync="sparta", sparta_density=0.05),
                                dict(sync="diloco", world_period=2, sparta_density=0.05)])
def test_sparta_on_procs_matches_sim(tmp_path, kw):
    sim, procs = sim_and_procs(cfg, tmp_path, steps=4, **kw)
    assert len(sim) >= 6
    assert_same_metrics(sim, procs)
