"""grad_clip lands where each method family's reference clips (lowbw.train.schemes.synchronous.clips_workers).

Every test takes one step of plain SGD (momentum 0, no weight decay, constant lr) from the same initial model
on the same batches, once without clipping and once with a radius c far below the gradients' norms, and
checks the clipped run's weights against the reference's update built from the unclipped run:

* dense and compressed-gradient methods (DDP: ``clip_grad_norm_`` after backward, whose hook averaged the
  gradient): the step is the averaged gradient scaled to norm c;
* sign methods and DeMo (Bernstein et al.'s signSGD, bloc97/DeMo: each worker's raw gradient is clipped before
  its step and the signed update is never rescaled): the step is unchanged (sign(c g / ||g||) = sign(g));
* local steps and outer-step methods (DiLoCo's inner AdamW/SGD steps clip each worker's own gradient; the outer
  step's pseudo-gradient is not clipped): each replica moves by its own gradient scaled to norm c.
"""

from __future__ import annotations

import pytest
import torch

from lowbw.train.config import ConfigError, RunConfig
from lowbw.train.loop import Trainer
from lowbw.train.world import SimWorld
from tests.helpers import sim_run

BASE = sim_run(steps=4, test_limit=50, eval_every=1.0, clock_compress_mbyte_s=200.0, optimizer="sgd", momentum=0.0,
               weight_decay=0.0, lr=1.0, lr_schedule="constant", seed=0)
C = 1e-2  # the clipping radius: far below every gradient's norm here
ATOL = 1e-7  # weights of size ~1 in fp32: the difference of two of them is exact to a few 1e-8


def one_step(**kw) -> tuple[torch.Tensor, torch.Tensor]:
    """(initial weights [P], weights after one step [R, P]) of the run ``BASE`` + ``kw``."""
    c = RunConfig.from_dict({**BASE, **kw})
    tr = Trainer(c, SimWorld(c))
    w0 = tr.rep.params[0].clone()
    tr.train_step()
    return w0, tr.rep.params.clone()


def step_rows(**kw) -> torch.Tensor:
    """What the step moved each replica by, ``[R, P]``."""
    w0, w1 = one_step(**kw)
    return w1 - w0


def _clipped(v: torch.Tensor, c: float = C) -> torch.Tensor:
    """torch.nn.utils.clip_grad_norm_ of one gradient (over all parameters)."""
    return v * min(1.0, c / (float(v.norm()) + 1e-6))


@pytest.mark.parametrize("method", [
    {"compressor": "none"},
    {"compressor": "fp16"},
    {"compressor": "topk", "compressor_args": {"ratio": 0.05}, "error_feedback": "on"},
    {"compressor": "topk", "compressor_args": {"ratio": 0.05}, "error_feedback": "off"},
    {"compressor": "powersgd", "compressor_args": {"rank": 2}},
])
def test_gradient_averaging_methods_clip_the_averaged_gradient(method):
    """DDP: the step is -lr clip(mean_i C(g_i)), the same row on every replica."""
    free = step_rows(**method)
    clip = step_rows(**method, grad_clip=C)
    lr = BASE["lr"]
    avg = -free[0] / lr  # the averaged (decompressed) gradient of the unclipped run
    assert float(avg.norm()) > 10 * C
    want = -lr * _clipped(avg)
    assert torch.allclose(clip[0], want, rtol=1e-3, atol=ATOL)
    assert torch.equal(clip[0], clip[1])


@pytest.mark.parametrize("method", [{"compressor": "signsgd", "error_feedback": "off"}, {"compressor": "demo"}])
def test_sign_methods_and_demo_clip_each_workers_gradient_and_never_the_signed_step(method):
    """The references clip each worker's raw gradient before the sign and never rescale the signed update:
    every weight moves by lr, by 0 (signSGD: where the two workers' signs disagree; DeMo: where sign(Q) is 0),
    or for signSGD exactly as the unclipped run (the sign of c g / ||g|| is the sign of g). Before the fix the
    clip of the aggregate moved them by lr / ||update||."""
    free = step_rows(**method)
    clip = step_rows(**method, grad_clip=C)
    lr = BASE["lr"]
    moved = clip.abs()
    assert torch.all(((moved - lr).abs() < 1e-6 * lr) | (moved < 1e-6 * lr))
    assert float(moved.max()) == pytest.approx(lr, rel=1e-6)
    if method["compressor"] == "signsgd":
        assert torch.equal(clip, free)


def test_scaled_sign_compresses_the_clipped_worker_gradient():
    """EF-SignSGD (Karimireddy et al.: x -= C(p), p the worker's gradient): one worker, so C(c g / ||g||) =
    c / ||g|| C(g) per tensor: the unclipped step scaled by c / ||g|| (g from a dense run on the same batch),
    not to norm c (the old clip of the compressed step)."""
    one = dict(workers=1, batch_size=16)
    g = -step_rows(**one)[0] / BASE["lr"]
    free = step_rows(**one, compressor="ef_signsgd")[0]
    clip = step_rows(**one, compressor="ef_signsgd", grad_clip=C)[0]
    assert float(g.norm()) > 10 * C and abs(float(free.norm()) / BASE["lr"] - float(g.norm())) > 0.05 * float(g.norm())
    assert torch.allclose(clip, free * (C / (float(g.norm()) + 1e-6)), rtol=1e-3, atol=ATOL)


def test_demo_with_one_worker_moves_each_weight_by_lr_whatever_the_clip():
    """bloc97/DeMo with one worker: sign(Q(clip(g))) = sign(Q(g)): clip or not, the same step of size lr."""
    free = step_rows(compressor="demo", workers=1, batch_size=16)
    clip = step_rows(compressor="demo", workers=1, batch_size=16, grad_clip=C)
    assert torch.equal(clip, free)
    assert float(clip.abs().max()) == pytest.approx(BASE["lr"], rel=1e-6)


@pytest.mark.parametrize("scheme", [
    {"sync": "local", "world_period": 1000},
    {"sync": "diloco", "world_period": 1000, "optimizer": "sgd"},
])
def test_local_and_outer_step_methods_clip_each_workers_inner_gradient(scheme):
    """An inner step moves each replica by -lr clip(g_i), its own gradient clipped (DiLoCo's reference clips
    the inner optimiser's gradients)."""
    free = step_rows(**scheme)
    clip = step_rows(**scheme, grad_clip=C)
    lr = BASE["lr"]
    for i in range(2):
        g = -free[i] / lr
        assert float(g.norm()) > 10 * C
        assert torch.allclose(clip[i], -lr * _clipped(g), rtol=1e-3, atol=ATOL)
    assert not torch.allclose(clip[0], clip[1])  # each its own gradient, not an average


def test_diloco_outer_step_is_not_clipped():
    """H = 1, outer SGD lr 1 momentum 0: the outer step applies the mean of the (clipped) inner steps exactly;
    clipping the pseudo-gradient too would shrink it to norm c."""
    kw = dict(sync="diloco", world_period=1, outer_optimizer="sgd", outer_lr=1.0, outer_momentum=0.0)
    local = step_rows(sync="local", world_period=1000, grad_clip=C)
    dil = step_rows(**kw, grad_clip=C)
    want = local.mean(0)
    assert float(want.norm()) > 0.5 * BASE["lr"] * C
    assert torch.allclose(dil[0], want, rtol=1e-3, atol=ATOL)
    assert torch.equal(dil[0], dil[1])


def test_a_ddp_hook_cannot_clip_a_sign_methods_worker_gradient():
    with pytest.raises(ConfigError) as e:
        RunConfig.from_dict({**BASE, "backend": "procs", "ddp_hook": True, "compressor": "demo", "grad_clip": 1.0})
    assert e.value.key == "grad_clip" and "\n" not in str(e.value)
