"""The ``dropout`` key: refused where it cannot apply, each worker's masks from its own stream (sim holding all
replicas draws what procs' one-replica processes draw), evaluation without dropout."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from lowbw.train.config import RunConfig
from lowbw.train.config_rules import ConfigError
from lowbw.train.masks import MaskStreams
from lowbw.train.models import build_model
from lowbw.train.replicas import Replicas
from tests.helpers import MIRROR, needs_corpus

TEXT = {"dataset": "shakespeare", "model": "gpt-tiny"}


@pytest.mark.parametrize("override, key, named", [
    ({"dropout": -0.1}, "dropout", "-0.1"),
    ({"dropout": 1.0}, "dropout", "1.0"),
    ({"dropout": 1.5}, "dropout", "1.5"),
    ({"dropout": 0.2, "model": "mlp", "dataset": "mnist"}, "dropout", "0.2"),
    ({"dropout": 0.1, "model": "cnn", "dataset": "cifar10_small"}, "dropout", "'cnn'"),
    ({"dropout": 0.1, "model": "my_model.py:build", "dataset": "mnist"}, "dropout", "my_model.py"),
    ({"dropout": 0.1, "sim_engine": "vmap"}, "sim_engine", "0.1"),
])
def test_bad_dropout_is_refused_in_one_line_naming_it(override, key, named):
    with pytest.raises(ConfigError) as e:
        RunConfig.from_dict({**TEXT, **override})
    assert e.value.key == key and named in str(e.value) and "\n" not in str(e.value)


def test_default_is_no_dropout_and_a_gpt_takes_the_rate():
    assert RunConfig.from_dict(TEXT).dropout == 0.0
    m = build_model("gpt-tiny", 65, 1, 32, dropout=0.2)
    rates = {mod.p for mod in m.modules() if isinstance(mod, torch.nn.Dropout)} | {b.attn.dropout for b in m.blocks}
    assert rates == {0.2}
    with pytest.raises(ValueError, match="dropout=0.2: model='mlp' has no dropout"):
        build_model("mlp", dropout=0.2)


def _step(rep: Replicas, xs, ys) -> tuple[list[float], torch.Tensor]:
    losses, _, _ = rep.forward_backward(xs, ys)
    return losses, rep.grads.clone()


CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device here (examples/gpu runs it on one)")


def _default_state(device: str) -> torch.Tensor:
    return torch.cuda.get_rng_state() if device == "cuda" else torch.get_rng_state()


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=CUDA)])
def test_sim_replica_draws_the_masks_of_its_own_process(device):
    """Four replicas in one process (sim) and worker 2 alone in its process (procs): worker 2's losses (the
    forward pass, where the masks are drawn) agree bit for bit over two steps, and on the CPU its gradients too
    (CUDA's fused attention backward may sum in another order each call); the masks differ between workers and
    steps, and the default generator is left as it was."""
    torch.manual_seed(0)
    model = build_model("gpt-tiny", 65, 1, 32, dropout=0.3, device=device)
    x = torch.randint(0, 65, (3, 32), generator=torch.Generator().manual_seed(1)).to(device)
    x_same = [x] * 4  # the same batch on every worker: only the masks tell them apart
    sim = Replicas(model, 4, device, masks=MaskStreams(7, [0, 1, 2, 3], device))
    alone = Replicas(model, 1, device, masks=MaskStreams(7, [2], device))
    before = _default_state(device)
    for _ in range(2):
        ls, gs = _step(sim, x_same, x_same)
        la, ga = _step(alone, [x], [x])
        assert ls[2] == la[0] and len(set(ls)) == 4  # each worker its own masks
        if device == "cpu":
            assert torch.equal(gs[2], ga[0])
        else:
            torch.testing.assert_close(gs[2], ga[0])
    assert _step(alone, [x], [x])[0][0] != la[0]  # a new step, new masks
    assert torch.equal(_default_state(device), before)
    # without dropout the workers' losses on one batch are equal
    plain = Replicas(build_model("gpt-tiny", 65, 1, 32, device=device), 4, device)
    plain.params.copy_(sim.params)
    assert len(set(_step(plain, x_same, x_same)[0])) == 1


def test_evaluation_runs_without_dropout():
    torch.manual_seed(0)
    drop = Replicas(build_model("gpt-tiny", 65, 1, 32, dropout=0.5), 1, masks=MaskStreams(0, [0], "cpu"))
    plain = Replicas(build_model("gpt-tiny", 65, 1, 32), 1)
    plain.params.copy_(drop.params)
    x = torch.randint(0, 65, (8, 32), generator=torch.Generator().manual_seed(3))
    a = drop.evaluate(0, x, x, 4, lambda t: t)
    assert a == drop.evaluate(0, x, x, 4, lambda t: t) == plain.evaluate(0, x, x, 4, lambda t: t)


LM = {**TEXT, "workers": 4, "batch_size": 16, "steps": 8, "log_every": 2, "optimizer": "adamw", "lr": 0.003,
      "test_limit": 40, "eval_every": 0.003, "progress": False, "threads": 1, "clock": "model",
      "clock_sample_s": 0.001, "grad_clip": 1.0, "weight_decay": 0.1, "weight_decay_on": "matrices",
      "dropout": 0.1}
DETERMINISTIC = ("loss", "acc", "val_loss", "val_acc", "val_ppl", "bytes_sent", "t_virtual", "lr", "samples")


def _train(cfg: dict, out: Path) -> list[dict]:
    from lowbw.train.launch import run

    run(RunConfig.from_dict(cfg), out, quiet=True)
    lines = map(json.loads, (out / "metrics.jsonl").read_text().splitlines())
    return [{k: x.get(k) for k in DETERMINISTIC} for x in lines]


@needs_corpus
def test_same_seed_same_metrics_with_dropout(tmp_path, monkeypatch):
    monkeypatch.setenv("LOWBW_DATA_MIRROR", str(MIRROR))
    monkeypatch.setenv("LOWBW_DATA_DIR", str(tmp_path / "cache"))
    two = {**LM, "workers": 2, "batch_size": 8, "steps": 4}
    a = _train(two, tmp_path / "a")
    assert a == _train(two, tmp_path / "b")
    assert a != _train({**two, "dropout": 0.0}, tmp_path / "c")  # the key reaches the model


@needs_corpus
@pytest.mark.parametrize("scheme", [{"sync": "sync"},
                                    pytest.param({"sync": "diloco", "world_period": 4}, marks=pytest.mark.slow)])
def test_four_workers_with_dropout_train_identically_on_sim_and_procs(scheme, tmp_path, monkeypatch):
    """sim (one process, engine loop, the ring's own sums: sim_dense collective) and procs (a process per
    worker) draw the same dropout masks: every metrics line agrees bit for bit."""
    monkeypatch.setenv("LOWBW_DATA_MIRROR", str(MIRROR))
    monkeypatch.setenv("LOWBW_DATA_DIR", str(tmp_path / "cache"))
    sim = _train({**LM, **scheme, "sim_dense": "collective"}, tmp_path / "sim")
    procs = _train({**LM, **scheme, "backend": "procs"}, tmp_path / "procs")
    assert len(sim) == len(procs) >= 4
    assert sim == procs


@needs_corpus
def test_a_resumed_run_draws_the_masks_the_uninterrupted_run_drew(tmp_path, monkeypatch):
    """The mask streams are part of the checkpoint: resuming at step 4 of 6 gives the uninterrupted metrics."""
    from lowbw.train.launch import run

    monkeypatch.setenv("LOWBW_DATA_MIRROR", str(MIRROR))
    monkeypatch.setenv("LOWBW_DATA_DIR", str(tmp_path / "cache"))
    c = {**LM, "workers": 2, "batch_size": 8, "steps": 6, "log_every": 1, "checkpoint_every": 4}
    full = _train(c, tmp_path / "full")
    run(RunConfig.from_dict(c), tmp_path / "k", quiet=True, keep_checkpoint=True)
    (tmp_path / "k" / "summary.json").unlink()  # as if killed after the checkpoint of step 4
    assert json.loads((tmp_path / "k" / "checkpoint" / "latest.json").read_text())["step"] == 4
    assert _train(c, tmp_path / "k") == full
    assert json.loads((tmp_path / "k" / "config.json").read_text())["resumes"] == 1
