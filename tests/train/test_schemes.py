"""The sync scheme registry and interface (lowbw.train.schemes): every configurable ``sync`` has one class
behind the one interface, and the Trainer holds it without asking which kind it is."""

from __future__ import annotations

import ast
import inspect
import subprocess
import sys
from pathlib import Path

import pytest

from lowbw.train import loop
from lowbw.train.config import RunConfig
from lowbw.train.config_fields import SYNC_SCHEMES
from lowbw.train.loop import Trainer
from lowbw.train.schemes import SCHEMES, scheme_class
from lowbw.train.schemes.base import ReplicaStep, Scheme
from lowbw.train.schemes.diloco import DiLoCo
from lowbw.train.schemes.noloco import NoLoCo
from lowbw.train.schemes.parameter_server import ParameterServer
from lowbw.train.schemes.synchronous import Hierarchical, LocalOnly, LocalSGD, PostLocalSGD, SyncSGD
from lowbw.train.world import SimWorld


def test_every_configurable_sync_has_one_registered_scheme_class():
    assert list(SCHEMES) == SYNC_SCHEMES
    for name in SCHEMES:
        cls = scheme_class(name)
        assert inspect.isclass(cls) and issubclass(cls, Scheme), name
        assert not inspect.isabstract(cls), name
    with pytest.raises(ValueError, match="sync='gossip'"):
        scheme_class("gossip")


def test_the_run_config_reads_the_scheme_names_without_torch():
    """The registry is data: a fresh interpreter imports it (and the schemes package) without torch."""
    code = ("import sys, lowbw.train.schemes, lowbw.train.schemes.registry as r; "
            "assert 'torch' not in sys.modules, 'torch imported'; print(len(r.SCHEMES))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert int(out.stdout) == len(SCHEMES)


def test_the_loop_never_asks_which_scheme():
    """No branch of lowbw/train/loop.py reads ``cfg.sync`` or a parameter server: the scheme object decides."""
    tree = ast.parse(Path(loop.__file__).read_text())
    names = {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    assert not names & {"ps", "ps_update", "server"}
    for node in ast.walk(tree):
        if isinstance(node, (ast.If, ast.IfExp, ast.Compare)):
            src = ast.unparse(node.test if isinstance(node, (ast.If, ast.IfExp)) else node)
            assert "cfg.sync" not in src and "self.sync is" not in src, src


@pytest.mark.parametrize("sync,cls", [("sync", SyncSGD), ("local", LocalSGD), ("post_local", PostLocalSGD),
                                      ("hierarchical", Hierarchical), ("sparta", LocalOnly),
                                      ("diloco", DiLoCo), ("ssp", ParameterServer), ("async", ParameterServer),
                                      ("noloco", NoLoCo)])
def test_the_trainer_holds_the_registered_class(sync, cls):
    kw = dict(dataset="synthetic", model="mlp", workers=4, batch_size=32, steps=2, progress=False, sync=sync)
    if sync == "hierarchical":
        kw.update(households=2)
    if sync == "sparta":
        kw.update(sparta_density=0.01)
    c = RunConfig.from_dict(kw)
    tr = Trainer(c, SimWorld(c))
    assert type(tr.sync) is cls and isinstance(tr.sync, Scheme)
    tr.train_step()
    assert tr.state.samples > 0
    tr.sync.close()


def test_schedules():
    """The synchronous schedules (action after step t, from 1): sync every step; local every L_W; post_local
    world gradients before local_start, then local; hierarchical household gradients, the world every L_W."""
    def cfg(**kw):
        return RunConfig.from_dict(dict(dataset="synthetic", model="mlp", workers=4, batch_size=32, steps=8,
                                        progress=False, **kw))

    def acts(c, progress=0.5):
        cls = scheme_class(c.sync)
        obj = cls.__new__(cls)  # the schedule reads only the config: no replicas needed
        obj.cfg = c
        return [(a.grad, a.avg) for a in (obj.action(t, progress) for t in range(1, 9))]

    assert acts(cfg(sync="sync")) == [("world", None)] * 8
    assert acts(cfg(sync="local", world_period=4)) == [(None, None)] * 3 + [(None, "world")] + [(None, None)] * 3 + [
        (None, "world")]
    assert acts(cfg(sync="post_local", world_period=4, local_start=0.5), progress=0.4) == [("world", None)] * 8
    assert acts(cfg(sync="post_local", world_period=4, local_start=0.5), progress=0.5) == acts(
        cfg(sync="local", world_period=4))
    h = acts(cfg(sync="hierarchical", households=2, world_period=4, household_period=1))
    assert h == [("household", None)] * 3 + [("household", "world")] + [("household", None)] * 3 + [
        ("household", "world")]


def test_a_scheme_gets_its_collaborators_not_the_trainer():
    """The step context's local step is a collaborator of its own (the replicas and their batch streams), not a
    method of the Trainer: a scheme's step never calls back into the Trainer."""
    c = RunConfig.from_dict(dict(dataset="synthetic", model="mlp", workers=4, batch_size=32, steps=2,
                                 progress=False))
    tr = Trainer(c, SimWorld(c))
    ctx = tr._context()
    assert isinstance(ctx.local_step, ReplicaStep)
    assert not any(isinstance(getattr(v, "__self__", None), Trainer) for v in vars(ctx).values())
    assert not any(isinstance(v, Trainer) for v in vars(ctx).values())
    tr.train_step()
    assert tr.state.samples == 32
    tr.sync.close()
