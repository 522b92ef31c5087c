"""Error feedback under Adam, and ``compress_target: update`` (error feedback on the optimiser's step).

The anomaly (E4 on the language model: top-k 1 % with error feedback ends at 3.01 nats/char, without at 2.60,
where on the MLP under SGD error feedback helps): error feedback keeps the sum of what is sent equal to the
sum of the gradients, which is what an SGD step needs (its update is linear in the gradient), but Adam's is
not. The residual comes out in bursts of many steps' gradient, one coordinate every ~1/density steps: Adam
moves a coordinate by about the same normalised amount whatever the burst's size, and the burst enters its
second moment v, which then damps the next steps. Tang et al. 2021 (1-bit Adam) make the same point and
compress with error feedback only where the update is linear in what is compressed (after freezing v); here
each worker's own Adam step, from its uncompressed gradient, is what is compressed with error feedback.
"""

from __future__ import annotations

import pytest
import torch

from lowbw.compress import make
from lowbw.compress.base import State
from lowbw.train.config import ConfigError, RunConfig
from lowbw.train.loop import Trainer
from lowbw.train.optim import FlatOptimizer
from lowbw.train.world import SimWorld
from tests.helpers import sim_run

P, SIGNAL, STEPS, LR = 4000, 400, 300, 0.01


def _progress(mode: str, kind: str) -> tuple[float, float]:
    """One worker, gradient = 1 on the first SIGNAL coordinates (0 elsewhere) + N(0, 1) noise per step, top-k 1 %:
    (mean distance moved along the signal, median sqrt(v) of the noise coordinates; NaN for SGD)."""
    gen = torch.Generator().manual_seed(0)
    p = torch.zeros(1, P)
    opt = FlatOptimizer(kind, (1, P), "cpu", betas=(0.9, 0.99), momentum=0.9)
    comp, st = make("topk", ratio=0.01, error_feedback=mode != "noef"), State(0)
    mu = torch.zeros(P)
    mu[:SIGNAL] = 1.0
    for _ in range(STEPS):
        g = (mu + torch.randn(P, generator=gen)).view(1, P)
        if mode == "dense":
            opt.step(p, g, LR)
        elif mode == "update":  # what compress_target: update does
            d = opt.direction(p, g)
            opt.apply(p, comp.decompress(comp.compress(d[0], "w", st)).view(1, P), LR)
        else:
            opt.step(p, comp.decompress(comp.compress(g[0], "w", st)).view(1, P), LR)
    v = opt.state.get("exp_avg_sq")
    return float(-p[0, :SIGNAL].mean()), float(v[0, SIGNAL:].sqrt().median()) if v is not None else float("nan")


def test_error_feedback_recovers_dense_progress_under_sgd_but_not_under_adam():
    dense, ef, noef = (_progress(m, "sgd")[0] for m in ("dense", "ef", "noef"))
    assert ef > 0.9 * dense and noef < 0.3 * dense  # SGD: 28.3 and 3.9 against 29.0
    (dense, v_dense), (ef, v_ef), (noef, v_noef) = (_progress(m, "adamw") for m in ("dense", "ef", "noef"))
    assert ef < 0.5 * dense  # Adam: 0.77 against 2.12
    # a coordinate is sent about once in 100 steps, yet v is near dense's: the bursts are ~100 steps' worth
    assert v_ef > 3 * v_noef and v_ef > 0.5 * v_dense  # 0.81 against 0.21 (no EF) and 0.97 (dense)


def test_error_feedback_on_the_update_recovers_adams_progress():
    dense = _progress("dense", "adamw")[0]
    assert _progress("update", "adamw")[0] > 0.9 * dense  # 2.06 against 2.12


BASE = sim_run(steps=3, optimizer="adamw", lr=0.01, weight_decay=0.1)


def test_compress_target_update_applies_the_average_of_each_workers_own_adam_step():
    """With a lossless compressor (top-k of every value), one step of ``compress_target: update`` moves the
    replicas to the mean of where each one's own AdamW step (its own gradient, its own moments) would take
    it: the twin that never synchronises gives those steps. Each replica keeps its own second moment."""
    c = RunConfig.from_dict({**BASE, "compressor": "topk", "compressor_args": {"ratio": 1.0},
                             "error_feedback": "on", "compress_target": "update"})
    t = RunConfig.from_dict({**BASE, "sync": "local", "world_period": 1000})
    up, twin = Trainer(c, SimWorld(c)), Trainer(t, SimWorld(t))
    up.train_step()
    twin.train_step()
    assert torch.equal(up.rep.params[0], up.rep.params[1])
    torch.testing.assert_close(up.rep.params[0], twin.rep.params.mean(0), rtol=0, atol=1e-6)
    v_up, v_twin = up.opt.state["exp_avg_sq"], twin.opt.state["exp_avg_sq"]
    assert torch.equal(v_up, v_twin) and not torch.equal(v_up[0], v_up[1])


@pytest.mark.parametrize(("kw", "match"), [
    ({"compress_target": "update"}, "compress_target"),  # no compressor
    ({"compress_target": "update", "compressor": "topk", "sync": "local", "world_period": 4}, "compress_target"),
    ({"compress_target": "update", "compressor": "topk", "optimizer": "muon"}, "compress_target"),
    ({"compress_target": "later"}, "compress_target"),
])
def test_bad_compress_target_is_named(kw, match):
    with pytest.raises(ConfigError, match=match):
        RunConfig.from_dict({**BASE, **kw})
