"""sync: diloco in the engine: inner steps, then an outer step on the world's average pseudo-gradient."""

from __future__ import annotations

import json

import pytest
import torch

from lowbw.runs.io import read_jsonl
from lowbw.train.config import ConfigError, RunConfig
from lowbw.train.launch import run
from lowbw.train.loop import Trainer
from lowbw.train.world import SimWorld
from tests.helpers import config_of, sim_run
from tests.sim_procs import assert_same_metrics, sim_and_procs
from tests.train.test_loop import killed_run

BASE = sim_run(model="cnn", steps=7, clock_compress_mbyte_s=200.0)
cfg = config_of(BASE)


def trained(c: RunConfig, out) -> tuple[Trainer, list[dict]]:
    out.mkdir()
    tr = Trainer(c, SimWorld(c), out)
    tr.run()
    return tr, read_jsonl(out / "metrics.jsonl")


def test_outer_sgd_lr1_momentum0_is_local_sgd(tmp_path):
    """theta_start - mean(theta_start - theta_i) = mean(theta_i): the same run as local SGD, up to rounding
    (7 steps, H = 3: two outer steps and the final one)."""
    local, a = trained(cfg(sync="local", world_period=3), tmp_path / "local")
    dil, b = trained(cfg(sync="diloco", world_period=3, outer_optimizer="sgd", outer_lr=1.0, outer_momentum=0.0),
                     tmp_path / "diloco")
    assert torch.allclose(local.rep.params, dil.rep.params, rtol=0, atol=1e-6)
    assert torch.equal(dil.rep.params[0], dil.rep.params[1])
    assert len(a) == len(b) == 9  # the initial evaluation, 7 steps, the final evaluation
    for x, y in zip(a, b):
        assert x["step"] == y["step"] and x["samples"] == y["samples"]
        assert x["bytes_sent"] == y["bytes_sent"] and x["t_virtual"] == y["t_virtual"]
        for k in ("loss", "acc", "test_loss", "test_acc"):
            if x.get(k) is not None:
                assert y[k] == pytest.approx(x[k], abs=1e-5), (x["step"], k)
    # the outer step moves theta_start by a real pseudo-gradient: not a run without communication
    alone, _ = trained(cfg(sync="local", world_period=1000), tmp_path / "alone")
    assert not torch.allclose(alone.rep.params[0], dil.rep.params[0], atol=1e-4)


@pytest.mark.parametrize("outer,factor", [("nesterov", 1.9), ("sgd", 1.0)])
def test_first_outer_step_is_the_outer_optimisers_step(outer, factor):
    """After H = 2 inner steps: theta = theta_0 - lr x factor x mean_i(theta_0 - theta_i), where the first
    momentum step is Delta (sgd) or Delta + m Delta (Nesterov, m = 0.9)."""
    c = cfg(sync="diloco", world_period=2, outer_optimizer=outer, outer_lr=0.7, steps=2)
    dil = Trainer(c, SimWorld(c))
    t = cfg(sync="local", world_period=1000, steps=2)
    twin = Trainer(t, SimWorld(t))  # the same inner steps, never synchronised
    theta0 = dil.rep.params[0].clone()
    for _ in range(2):
        dil.train_step()
        twin.train_step()
    assert not torch.equal(twin.rep.params[0], twin.rep.params[1])
    delta = (theta0 - twin.rep.params).mean(0)
    want = theta0 - 0.7 * factor * delta
    for i in range(2):
        assert torch.allclose(dil.rep.params[i], want, rtol=0, atol=1e-6)
    assert dil.state.in_sync


def test_diloco_checkpoint_resume_gives_identical_later_metrics(tmp_path, monkeypatch):
    """theta_start, the outer momentum and the error-feedback residuals are part of the checkpoint."""
    c = cfg(sync="diloco", world_period=2, steps=8, checkpoint_every=3, compressor="topk",
            compressor_args={"ratio": 0.1}, error_feedback="on", optimizer="adamw", lr=0.003)
    run(c, tmp_path / "full")
    killed_run(c, tmp_path / "k", monkeypatch, after_steps=7)
    assert json.loads((tmp_path / "k" / "checkpoint" / "latest.json").read_text())["step"] == 6
    run(c, tmp_path / "k")

    def strip(lines):
        return [{k: v for k, v in ln.items() if k not in ("t_compute", "t_compress", "t_comm", "t_step", "t_meta",
                                                            "t_wall")} for ln in lines]

    assert strip(read_jsonl(tmp_path / "k" / "metrics.jsonl")) == strip(read_jsonl(tmp_path / "full" / "metrics.jsonl"))


def test_diloco_compressed_pseudo_gradient_on_procs_matches_sim(tmp_path):
    kw = dict(sync="diloco", world_period=2, steps=5, compressor="topk", compressor_args={"ratio": 0.05},
              error_feedback="on")
    sim, procs = sim_and_procs(cfg, tmp_path, **kw)
    assert len(sim) == 7
    assert_same_metrics(sim, procs)
    # compressed: the outer steps send fewer bytes than dense DiLoCo's
    run(cfg(backend="sim", **{**kw, "compressor": "none", "compressor_args": {}, "error_feedback": "auto"}),
        tmp_path / "dense", quiet=True)
    assert sim[-1]["bytes_sent"] < read_jsonl(tmp_path / "dense" / "metrics.jsonl")[-1]["bytes_sent"] / 5


@pytest.mark.parametrize("kw,key", [
    (dict(outer_lr=1.0), "outer_lr"),
    (dict(sync="local", world_period=2, outer_optimizer="sgd"), "outer_optimizer"),
    (dict(sync="diloco", world_period=2, outer_optimizer="adam"), "outer_optimizer"),
    (dict(sync="diloco", world_period=2, outer_momentum=1.0), "outer_momentum"),
])
def test_outer_keys_are_checked(kw, key):
    with pytest.raises(ConfigError) as e:
        cfg(**kw)
    assert e.value.key == key
