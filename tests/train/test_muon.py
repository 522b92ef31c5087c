"""optimizer: muon (lowbw.train.muon) densely and as DiLoCo's inner optimiser (MuLoCo)."""

from __future__ import annotations

import pytest
import torch

from lowbw.runs.io import read_jsonl
from lowbw.train.launch import run
from lowbw.train.loop import Trainer
from lowbw.train.muon import MuonFlat, muon_tensors, newton_schulz
from lowbw.train.world import SimWorld
from tests.helpers import config_of, sim_run
from tests.sim_procs import assert_same_metrics, sim_and_procs

BASE = sim_run(optimizer="muon", lr=0.01, weight_decay=0.0, lr_schedule="constant")
cfg = config_of(BASE)


def test_newton_schulz_orthogonalises():
    """The quintic iteration brings every singular value of a random matrix into about [0.6, 1.3] and keeps
    the singular vectors: its output is close to U V^T (cosine > 0.9)."""
    g = torch.Generator().manual_seed(0)
    for shape in ((64, 32), (32, 64), (48, 48)):
        G = torch.randn(*shape, generator=g)
        O = newton_schulz(G, 5)
        s = torch.linalg.svdvals(O)
        assert float(s.min()) > 0.6 and float(s.max()) < 1.3, (shape, s.min(), s.max())
        U, _, Vh = torch.linalg.svd(G, full_matrices=False)
        cos = float((O * (U @ Vh)).sum() / (O.norm() * (U @ Vh).norm()))
        assert cos > 0.9, (shape, cos)


LAYOUT = [("fc1.weight", 0, 12, torch.Size([4, 3])), ("fc1.bias", 12, 4, torch.Size([4])),
          ("fc2.weight", 16, 8, torch.Size([2, 4])), ("fc2.bias", 24, 2, torch.Size([2]))]


def test_which_tensors_take_muon():
    assert muon_tensors(LAYOUT) == [True, False, False, False]  # the classifier (last matrix) stays on AdamW
    gpt = [("wte.weight", 0, 6, torch.Size([3, 2])), ("wpe.weight", 6, 4, torch.Size([2, 2])),
           ("blocks.0.attn.c_attn.weight", 10, 12, torch.Size([6, 2])), ("blocks.0.ln_1.weight", 22, 2,
                                                                           torch.Size([2])),
           ("blocks.0.mlp.2.weight", 24, 16, torch.Size([2, 8]))]
    assert muon_tensors(gpt) == [False, False, True, False, True]  # tied output: the last block keeps Muon


def test_muon_step_matches_the_equations_and_torch_adamw():
    """Two steps of MuonFlat on two rows against the docstring's equations per matrix and torch.optim.AdamW on
    the vectors and the classifier; rows updated together equal rows updated alone (sim == procs)."""
    g = torch.Generator().manual_seed(1)
    p0 = torch.randn(2, 26, generator=g)
    grads = [torch.randn(2, 26, generator=g) for _ in range(2)]
    lr, wd, mu = 0.05, 0.1, 0.95
    opt = MuonFlat(LAYOUT, (2, 26), "cpu", momentum=mu, weight_decay=wd, scale="shape")
    p = p0.clone()
    for gr in grads:
        opt.step(p, gr, lr)
    for r in range(2):
        alone = MuonFlat(LAYOUT, (1, 26), "cpu", momentum=mu, weight_decay=wd, scale="shape")
        q = p0[r:r + 1].clone()
        for gr in grads:
            alone.step(q, gr[r:r + 1], lr)
        assert torch.equal(q[0], p[r])
        # by hand: fc1.weight (4 x 3) with Muon
        W, M = p0[r, :12].view(4, 3).clone(), torch.zeros(4, 3)
        for gr in grads:
            G = gr[r, :12].view(4, 3)
            W.mul_(1 - lr * wd)
            M = mu * M + (1 - mu) * G
            W -= lr * (4 / 3) ** 0.5 * newton_schulz((1 - mu) * G + mu * M, 5)
        assert torch.allclose(p[r, :12], W.reshape(-1), atol=1e-6)
        # the rest with torch's AdamW (decoupled decay lr x wd)
        rest = torch.nn.Parameter(p0[r, 12:].clone())
        ref = torch.optim.AdamW([rest], lr=lr, weight_decay=wd, betas=(0.9, 0.999), eps=1e-8)
        for gr in grads:
            rest.grad = gr[r, 12:].clone()
            ref.step()
        assert torch.allclose(p[r, 12:], rest.detach(), atol=1e-6)


def _losses(lines):
    return [x["loss"] for x in lines if x.get("loss") is not None]


@pytest.mark.parametrize("model,data", [
    pytest.param("mlp", {"dataset": "mnist", "train_limit": 2000}, marks=pytest.mark.slow),
    ("gpt-tiny", {"dataset": "shakespeare", "train_limit": 20000})])
def test_dense_muon_trains(tmp_path, model, data, monkeypatch):
    """optimizer: muon, sync: sync: the training loss of the last 5 of 15 steps is well below the first's
    on the MLP (MNIST) and on the language model (Tiny Shakespeare)."""
    monkeypatch.setenv("LOWBW_DATA_MIRROR", "/work/shared/data")
    c = cfg(model=model, sync="sync", steps=15, eval_every=100.0, test_limit=500, **data)
    run(c, tmp_path / "run", quiet=True)
    losses = _losses(read_jsonl(tmp_path / "run" / "metrics.jsonl"))
    assert len(losses) == 15
    assert sum(losses[-5:]) / 5 < 0.85 * losses[0], losses


def test_muloco_with_H1_and_outer_sgd_lr1_is_dense_muon():
    """One worker: DiLoCo with H = 1 and outer SGD at rate 1 without momentum is dense Muon training up to
    rounding (theta_start - (theta_start - theta) = theta). With M > 1 it is not: the mean of M Muon updates is
    not Muon's update of the mean gradient."""
    one = dict(workers=1, batch_size=16, steps=5)
    dense = Trainer(cfg(sync="sync", **one), SimWorld(cfg(sync="sync", **one)))
    c = cfg(sync="diloco", world_period=1, outer_optimizer="sgd", outer_lr=1.0, outer_momentum=0.0, **one)
    mu = Trainer(c, SimWorld(c))
    adam = Trainer(cfg(sync="sync", optimizer="adamw", **one), SimWorld(cfg(sync="sync", optimizer="adamw", **one)))
    for _ in range(5):
        dense.train_step()
        mu.train_step()
        adam.train_step()
    assert torch.allclose(dense.rep.params, mu.rep.params, rtol=0, atol=1e-6)
    assert not torch.allclose(dense.rep.params, adam.rep.params, atol=1e-3)  # Muon is not AdamW here


def test_muloco_compressed_on_procs_matches_sim(tmp_path):
    """MuLoCo (H = 2, Nesterov outer step) with top-k pseudo-gradients and error feedback: the same metrics on
    sim and procs. (A 4-bit quantiser is not used here: the two backends' losses agree to about 1e-7, not bit
    for bit, and one value on a bin edge then moves the run by more than the tolerance.)"""
    kw = dict(sync="diloco", world_period=2, steps=5, compressor="topk", compressor_args={"ratio": 0.05},
              error_feedback="on")
    sim, procs = sim_and_procs(cfg, tmp_path, **kw)
    assert len(sim) == 7
    assert_same_metrics(sim, procs)
