"""NoLoCo around your own training loop: inner steps, then an outer step that averages with one peer only.

>>> opt = torch.optim.AdamW(model.parameters(), lr=1e-3)                  # the inner optimiser
>>> outer = NoLoCo(model, opt, period=16)                                 # after init_process_group
>>> for x, y in loader:
...     loss_fn(model(x), y).backward()
...     outer.step()                     # inner step; every 16th also does the pairwise outer step

NoLoCo (Kolehmainen, Blagoev, Donaghy, Ersoy & Nies 2025, "NoLoCo: No-all-reduce Low Communication
Training Method for Large Models", Gensyn, arXiv 2506.10911): no all-reduce; every H = ``period`` inner
steps each worker averages with one peer, the pairs drawn afresh each outer step from a seeded
permutation (:func:`lowbw.comm.pairwise.pair_partners`), and takes a momentum step that also pulls its
outer weights towards the pair's. Worker i keeps its outer weights phi_i (fp32) and a momentum m_i (0 at
the start). At outer step k, with j = partner_k(i) and theta the inner weights after the H inner steps:

1. swap theta_i for theta_j with the peer (one message of the full model each way; no collective);
2. thetabar = (theta_i + theta_j) / 2;
3. m_i <- beta m_i + eta (thetabar - phi_i)      (beta = ``outer_momentum``, eta = ``outer_lr``);
4. phi_i <- phi_i + m_i;  theta_i <- phi_i (the inner optimiser keeps its state).

Source of the equations: the paper's text could not be read here (only its abstract: "a novel variant of
the Nesterov momentum optimizer by partially averaging model weights with a randomly selected other one"),
so the update is the authors' reference code, ``outer_step`` in ``src/noloco/sparse_optimizer_c.py`` of
github.com/jkolehm/noloco (groups of ``local_group_size``, here 2, from ``create_random_permutation`` of
the step). That code computes, over the group G,

    m_i <- m_i + (beta - 1) m_i + eta mean_G(theta - phi) + eta (mean_G(phi) - phi_i)

and sends both phi_j and theta_j - phi_j; since mean_G(theta - phi) + mean_G(phi) = mean_G(theta) the two
terms are eta (thetabar - phi_i), step 3, which needs only theta_j: half the bytes, the same update up to
float rounding. The paper's weights may differ from the code's single eta for both terms; lowbw uses the
code's. Its defaults: eta = 0.7, beta = 0.9 (the code's builder). The pairs' seed is ``seed``; the permutation
is torch's (the reference draws it with numpy), so the pairs are not the reference's pairs.

With 2 workers the only pair is the world: phi stays equal on both (they start equal, the update is
symmetric), thetabar - phi = -Dbar with Dbar = (1/2) sum_i (phi - theta_i) DiLoCo's averaged pseudo-gradient,
and steps 3-4 are SGD with heavy-ball momentum on Dbar (torch's buf <- beta buf + Dbar, phi <- phi - eta buf,
with m = -eta buf): ``DiLoCo(outer="sgd", outer_lr=eta, outer_momentum=beta)``, up to rounding.

Replicas are never equal (except with 2 workers): evaluate any worker's model, or average them yourself.
Buffers (batch-norm statistics) are not exchanged.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from lowbw.comm.distributed import DistCollective
from lowbw.comm.meter import Meter
from lowbw.comm.pairwise import pair_partners, swap

__all__ = ["NoLoCo", "noloco_outer"]


@torch.no_grad()
def noloco_outer(phi: torch.Tensor, m: torch.Tensor, theta: torch.Tensor, theta_peer: torch.Tensor,
                 lr: float, momentum: float) -> None:
    """Steps 2-4 of the module doc on flat fp32 rows, in place: ``m`` and ``phi`` updated, ``theta`` <- phi.
    Float addition of two numbers is commutative, so both sides of a pair compute the same thetabar."""
    bar = (theta + theta_peer) * 0.5  # 2.
    m.mul_(momentum).add_(bar - phi, alpha=lr)  # 3.
    phi.add_(m)  # 4.
    theta.copy_(phi)


class NoLoCo:
    """NoLoCo's outer loop for ``model`` trained by ``inner_optimizer`` on this rank (see the module doc).

    ``period``: H. ``outer_lr``/``outer_momentum``: eta and beta. ``seed``: the pairs' seed (the same on
    every rank). ``timeout``: seconds per wait on the peer. ``sync_start``: broadcast rank 0's parameters
    first (the one collective, at the start), so every worker starts from the same phi."""

    def __init__(self, model: torch.nn.Module, inner_optimizer: torch.optim.Optimizer, period: int = 16, *,
                 outer_lr: float = 0.7, outer_momentum: float = 0.9, seed: int = 0, group=None, timeout=None,
                 sync_start: bool = True) -> None:
        if not isinstance(period, int) or period < 1:
            raise ValueError(f"period={period!r} must be an integer >= 1")
        if not outer_lr > 0:
            raise ValueError(f"outer_lr={outer_lr!r} must be > 0")
        if not 0 <= outer_momentum < 1:
            raise ValueError(f"outer_momentum={outer_momentum!r} must be in [0, 1)")
        self.world_size = dist.get_world_size(group)
        pair_partners(self.world_size, seed, 0)  # an odd world is an error before any communication
        self.model, self.inner, self.period = model, inner_optimizer, period
        self.lr, self.momentum, self.seed, self.group, self.timeout = outer_lr, outer_momentum, seed, group, timeout
        self.rank = dist.get_rank(group)
        self.params = [p for p in model.parameters() if p.requires_grad]
        if not self.params:
            raise ValueError("NoLoCo: the model has no trainable parameters")
        self.meter = Meter()
        if sync_start:  # lowbw's broadcast: every wait on a peer times out; its bytes are not bytes_sent
            coll = DistCollective("ring", group=group, meter=Meter(), timeout=timeout)
            with torch.no_grad():
                for p in self.params:
                    p.copy_(coll.broadcast(p.detach(), 0))
        self.phi = self._flat()
        self.m = torch.zeros_like(self.phi)
        self.inner_steps = 0
        self.outer_steps = 0
        self.partners: list[int] = []  # this rank's peer at each outer step

    @property
    def bytes_sent(self) -> int:
        """Bytes this worker sent in its pairwise exchanges (4 P per outer step, P the parameters)."""
        return self.meter.bytes_sent

    def _flat(self) -> torch.Tensor:
        return torch.cat([p.detach().float().reshape(-1) for p in self.params])

    def step(self) -> bool:
        """One inner step (``step()`` then ``zero_grad()``); every H-th also the outer step. Returns whether
        an outer step was taken."""
        self.inner.step()
        self.inner.zero_grad(set_to_none=True)
        self.inner_steps += 1
        if self.inner_steps % self.period:
            return False
        self.outer_step()
        return True

    @torch.no_grad()
    def outer_step(self) -> None:
        """Steps 1-4 of the module doc (call it directly to take one out of schedule: every rank must)."""
        peer = pair_partners(self.world_size, self.seed, self.outer_steps)[self.rank]
        theta = self._flat()
        other = swap(theta, peer, self.group, self.timeout, self.meter)  # 1.
        noloco_outer(self.phi, self.m, theta, other, self.lr, self.momentum)  # 2.-4.
        off = 0
        for p in self.params:
            n = p.numel()
            p.copy_(theta[off: off + n].view_as(p))
            off += n
        self.partners.append(peer)
        self.outer_steps += 1
