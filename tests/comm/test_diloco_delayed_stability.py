"""Why one-step-delayed (and eager) DiLoCo diverged in E9 (4.52 nats/char, above a uniform guess's ln 65 = 4.17):
a stale pseudo-gradient under DiLoCo's Nesterov momentum 0.9 at outer learning rate 0.7 is an unstable outer
iteration once the inner phase goes most of the way to where it is heading; PCCL's momentum-free outer SGD,
or a lowered outer learning rate (Kale et al. 2025's remedy for naive delay), is stable.

The experiment is the real wrapper (lowbw.comm.diloco.DiLoCo) on the quadratic loss 1/2 ||w - w*||^2 with inner
SGD at 0.2 for H = 16 steps, so each inner phase covers 1 - 0.8^16 = 97 % of the distance (an inner phase that
trains well, as AdamW's does). Written out, with x = phi - w* and c = 0.97, plain DiLoCo's outer step sees
Delta_k = c x_k; the delayed one sees Delta_{k-1} = c x_{k-1}, and with Nesterov momentum mu the iteration
x_{k+1} = x_k - eta (g_k + mu m_k), m_k = mu m_{k-1} + g_k, g_k = c x_{k-1} has a root outside the unit circle
for mu = 0.9, eta = 0.7 (and for mu = 0.5), inside for mu = 0 (PCCL) or eta = 0.1. Eager updates mix a fresh
1/M with a stale (M-1)/M: at E9's M = 4 the same instability.
"""

from __future__ import annotations

import pytest
import torch

from lowbw.comm import ThreadCollective, run_threads
from lowbw.comm.diloco import DiLoCo

H, OUTER_STEPS = 16, 25


class _Quadratic(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.ones(8))

    def forward(self) -> torch.Tensor:
        return 0.5 * (self.w - 3.0).pow(2).sum()  # w* = 3


def _distance(n: int, **kw) -> float:
    """||phi - w*|| / ||phi_0 - w*|| after OUTER_STEPS outer steps of ``n`` identical workers."""

    def work(rank, coll):
        torch.set_num_threads(1)
        m = _Quadratic()
        outer = DiLoCo(m, torch.optim.SGD(m.parameters(), lr=0.2), H, collective=coll, **kw)
        for _ in range(H * OUTER_STEPS):
            m().backward()
            outer.step()
        outer.finish()
        return float((m.w.detach() - 3.0).norm() / (torch.ones(8) - 3.0).norm())

    return run_threads(work, ThreadCollective.group(n, "ring"), timeout=120)[0]


def test_plain_diloco_converges_with_nesterov_0_9():
    assert _distance(1) < 1e-6


@pytest.mark.parametrize("momentum", [0.9, 0.5])
def test_one_step_delayed_diverges_with_outer_momentum(momentum):
    assert _distance(1, overlap="delayed", outer_momentum=momentum) > 2.0  # grows: farther than at the start


@pytest.mark.parametrize("kw", [{"outer": "sgd", "outer_momentum": 0.0},  # PCCL's outer step
                                {"outer_lr": 0.1}])  # a lowered outer learning rate
def test_one_step_delayed_converges_without_momentum_or_at_a_lower_outer_lr(kw):
    assert _distance(1, overlap="delayed", **kw) < 0.5  # shrinks (lr 0.1: slowly, 0.23 after 25 outer steps)


def test_eager_with_four_workers_diverges_with_nesterov_and_not_without():
    """Eager updates apply the fresh share 1/M of the pseudo-gradient and a stale (M-1)/M: with E9's M = 4,
    three quarters stale make Nesterov 0.9 at 0.7 unstable (with M = 2, half stale, it still shrinks, slowly);
    momentum-free SGD is stable."""
    assert _distance(4, overlap="eager") > 2.0
    assert _distance(4, overlap="eager", outer="sgd", outer_momentum=0.0) < 0.5
    assert _distance(2, overlap="eager") < 1.0
