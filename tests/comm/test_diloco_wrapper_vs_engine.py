"""The wrapper ``lowbw.comm.DiLoCo`` in 2 gloo processes against the engine's ``sync: diloco`` (sim, 2 workers).

Both see the same model and initialisation (``build_model`` after ``torch.manual_seed(seed)``), the same
batches (each worker's :class:`lowbw.train.assign.Batches` stream) and the same learning rate. What makes
them comparable:

- the engine aggregates Delta over its chunks: ``granularity: layer`` makes them the parameter tensors, as
  the wrapper's per-parameter aggregation (with 2 workers and dense fp32 a sum of two is the same either
  way; with a compressor the chunking is the method);
- the inner optimiser: the engine's :class:`lowbw.train.optim.FlatOptimizer` against ``torch.optim``. SGD
  with momentum is the same arithmetic, element by element (buf = m buf + g, p -= lr buf). Two things are
  not (checked on one step each, then not needed here): weight decay, g + (p x wd) in the engine against
  torch's ``g.add(p, alpha=wd)``; and Adam(W): the engine takes m <- b1 m + (1 - b1) g, lr x (m / (1 - b1^t))
  / (sqrt(v / (1 - b2^t)) + eps), torch ``m.lerp_(g, 1 - b1)`` and (lr / (1 - b1^t)) x m / (sqrt(v) /
  sqrt(1 - b2^t) + eps): equal in exact arithmetic, about one float32 ulp apart per step (torch's order
  written out by hand reproduces torch bit for bit). So the bit-exact comparison uses SGD with momentum
  and no weight decay; AdamW is a separate test whose tolerance is that rounding (see its docstring);
- one intra-op thread on both sides (the matrix products' summation order).
"""

from __future__ import annotations

import pytest
import torch

from lowbw.comm.testing import run_procs
from lowbw.train.config import RunConfig
from lowbw.train.loop import Trainer
from lowbw.train.world import SimWorld
from tests.helpers import sim_run

STEPS, H = 9, 3
BASE = sim_run(steps=STEPS, eval_every=100.0, lr_schedule="constant", sync="diloco", world_period=H,
               granularity="layer", weight_decay=0.0)


def _wrapper_worker(rank: int, world_size: int, cd: dict) -> dict:
    """One gloo process: the user's loop (torch model, torch optimiser) with DiLoCo around it."""
    from lowbw.comm.diloco import DiLoCo
    from lowbw.train.assign import Batches, assign
    from lowbw.train.workload import load_workload

    cfg = RunConfig.from_dict(cd)
    dev = torch.device("cpu")
    data = load_workload(cfg, dev)  # the engine's dataset, model and batches, as the Trainer builds them
    torch.manual_seed(cfg.seed)
    model = data.model(cfg.model, dev)
    parts = assign(cfg.assignment, data.n_train, cfg.workers, cfg.seed, shards=cfg.shards, copies=cfg.copies,
                   households=cfg.households, household_shards=cfg.household_shards)
    batches = Batches(data, parts, [rank], cfg.seed, dev)
    if cfg.optimizer == "sgd":
        opt = torch.optim.SGD(model.parameters(), lr=cfg.lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay)
    else:
        opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, betas=(cfg.adam_beta1, cfg.adam_beta2),
                                eps=cfg.adam_eps, weight_decay=cfg.weight_decay)
    outer = DiLoCo(model, opt, cfg.world_period, outer=cfg.outer_optimizer, outer_lr=cfg.outer_lr,
                   outer_momentum=cfg.outer_momentum, algorithm=cfg.collective, fragments=cfg.diloco_fragments,
                   fragment_layout=cfg.diloco_fragment_layout, delay=cfg.diloco_delay,
                   fragment_update_alpha=cfg.diloco_alpha, overlap=cfg.diloco_overlap)
    losses = []
    model.train()
    for _ in range(cfg.steps):
        x, y = batches(0, cfg.global_batch // cfg.workers)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        losses.append(loss.item())
        outer.step()
    return {"losses": losses, "params": torch.cat([p.detach().reshape(-1) for p in model.parameters()])}


def _engine(cd: dict) -> tuple[list[list[float]], torch.Tensor]:
    """The engine's run in this process (one thread): per step both workers' losses, and replica 0's row."""
    cfg = RunConfig.from_dict(cd)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        tr = Trainer(cfg, SimWorld(cfg))
        losses = []
        real = tr.rep.forward_backward

        def spy(xs, ys, rows=None):
            out = real(xs, ys, rows)
            losses.append(list(out[0]))
            return out

        tr.rep.forward_backward = spy
        for _ in range(cfg.steps):
            tr.train_step()
        return losses, tr.rep.params[0].clone()
    finally:
        torch.set_num_threads(threads)


def _both(**kw) -> tuple[list[list[float]], torch.Tensor, list[dict]]:
    cd = {**BASE, **kw}
    eng_losses, eng_params = _engine(cd)
    wrap = run_procs(_wrapper_worker, 2, cd, timeout=180)
    return eng_losses, eng_params, wrap


def test_wrapper_in_two_gloo_processes_gives_the_engines_losses_bit_for_bit():
    """SGD (momentum 0.9) inner steps, Nesterov outer steps every H = 3 over 9 steps (three outer steps):
    every loss of every worker and the final parameters are equal, bit for bit."""
    eng_losses, eng_params, wrap = _both(optimizer="sgd", lr=0.05)
    for step in range(STEPS):
        assert [w["losses"][step] for w in wrap] == eng_losses[step], step
    assert torch.equal(wrap[0]["params"], eng_params)
    assert torch.equal(wrap[1]["params"], eng_params)
    # not a run without communication: the workers' losses differ, the models after the last outer step agree
    assert eng_losses[-1][0] != eng_losses[-1][1]


def test_wrapper_with_adamw_matches_the_engine_up_to_adams_rounding():
    """AdamW inner steps (weight decay 0.01): the engine's and torch's Adam differ in the order of float32
    operations only (module docstring): over nine steps and three outer steps the losses differ by at most a
    few 1e-7 and the parameters by about 1e-6, not bit for bit."""
    eng_losses, eng_params, wrap = _both(optimizer="adamw", lr=0.001, weight_decay=0.01)
    for step in range(STEPS):
        assert [w["losses"][step] for w in wrap] == pytest.approx(eng_losses[step], rel=1e-5, abs=1e-6), step
    torch.testing.assert_close(wrap[0]["params"], eng_params, rtol=0, atol=1e-5)


def test_streaming_wrapper_with_overlap_strided_fragments_and_alpha_gives_the_engines_losses():
    """Streaming DiLoCo as the paper runs it, through both: H = 4, F = 2 strided whole-layer fragments (the
    MLP's layers alternate), tau = 1 (each fragment's exchange runs in the wrapper's background thread for
    one inner step; the engine's sim applies it a step later) and alpha = 0.5 (a landed fragment is mixed
    with the local one). Every loss of every worker over nine steps (four exchanges started, four landed) is
    equal, bit for bit, and so are worker 0's final parameters (mixed: not theta_start)."""
    eng_losses, eng_params, wrap = _both(optimizer="sgd", lr=0.05, world_period=4, diloco_fragments=2,
                                         diloco_fragment_layout="strided", diloco_delay=1, diloco_alpha=0.5)
    for step in range(STEPS):
        assert [w["losses"][step] for w in wrap] == eng_losses[step], step
    assert torch.equal(wrap[0]["params"], eng_params)
    assert not torch.equal(wrap[0]["params"], wrap[1]["params"])  # alpha > 0: the replicas stay apart


def test_one_step_delayed_wrapper_gives_the_engines_losses():
    """``overlap="delayed"`` against ``diloco_overlap: delayed`` (H = 3, nine steps: boundaries 3, 6, 9; the
    first resets to theta_0, the later ones apply the previous boundary's average): every loss and the final
    parameters equal, bit for bit."""
    eng_losses, eng_params, wrap = _both(optimizer="sgd", lr=0.05, diloco_overlap="delayed")
    for step in range(STEPS):
        assert [w["losses"][step] for w in wrap] == eng_losses[step], step
    assert torch.equal(wrap[0]["params"], eng_params) and torch.equal(wrap[1]["params"], eng_params)


def test_eager_updates_wrapper_gives_the_engines_losses():
    """``overlap="eager"`` against ``diloco_overlap: eager`` (H = 3, nine steps: boundaries 3, 6, 9, each
    worker stepping its own theta_start with its fresh share and the other's delayed one): every loss of
    every worker and worker 0's final parameters equal, bit for bit (both call
    lowbw.comm.diloco.eager_gradient); the workers' models differ (each applied its own share first)."""
    eng_losses, eng_params, wrap = _both(optimizer="sgd", lr=0.05, diloco_overlap="eager")
    for step in range(STEPS):
        assert [w["losses"][step] for w in wrap] == eng_losses[step], step
    assert torch.equal(wrap[0]["params"], eng_params)
    assert not torch.equal(wrap[0]["params"], wrap[1]["params"])
