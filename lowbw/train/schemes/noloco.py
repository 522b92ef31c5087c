"""NoLoCo in the engine (:class:`NoLoCo`, ``sync: noloco``): no all-reduce; every H inner steps each worker
averages with one peer.

NoLoCo (Kolehmainen, Blagoev, Donaghy, Ersoy & Nies 2025, "NoLoCo: No-all-reduce Low Communication Training
Method for Large Models", arXiv 2506.10911). Every worker keeps its outer weights phi_i (fp32, the start
model) and a momentum m_i (0 at the start). After the inner steps t with t % H == 0 (H = ``world_period``),
at outer step k:

1. the pairs of round k: ``pair_partners(M, seed, k)`` (:mod:`lowbw.comm.pairwise`; a seeded permutation,
   the same on every worker, new each round); worker i swaps its inner weights theta_i with its peer j: one
   message of the full model (4 P bytes) each way, no collective;
2. thetabar = (theta_i + theta_j) / 2;
3. m_i <- beta m_i + eta (thetabar - phi_i)   (beta = ``outer_momentum``, eta = ``outer_lr``; defaults 0.9,
   0.7: the defaults of the authors' code; a named variant: their experiments' configs, gensyn-ai/noloco at
   a1b4a42 ``configs/no_reduce_exp``, run beta = 0.3 for NoLoCo and 0.5 for its ``mean`` variant, eta = 0.7,
   where the ``noloco16`` preset runs the default 0.9);
4. phi_i <- phi_i + m_i;  theta_i <- phi_i (the inner optimiser keeps its state).

Steps 2-4 are :func:`lowbw.comm.noloco.noloco_outer`, the wrapper's function (its module docstring gives the
source of the equations: the authors' reference code). With M = 2 the only pair is the world and steps 3-4 are
DiLoCo's outer SGD with heavy-ball momentum beta and rate eta on the averaged pseudo-gradient (``sync: diloco,
outer_optimizer: sgd``), up to rounding.

Communication: sim takes the peer's row from the replicas held here; procs swaps it with
:func:`lowbw.comm.pairwise.swap` (point-to-point ``isend``/``irecv``, each wait bounded by the world's peer
timeout). The virtual clock charges one pairwise round, :func:`lowbw.comm.pairwise.pairwise_time` (each pair
one message each way, full duplex, the slowest pair), on the links of the round's virtual time (per-worker
links where set: direction a -> b at a's uplink latency plus b's downlink latency and the lesser of a's
uplink and b's downlink rates; a shaper's token bucket is not modelled here); its alpha-beta coefficients are
one latency term and 4 P bytes. The replicas are never equal (except M = 2): the run is evaluated on worker
0's phi. The final synchronisation is one more outer step if inner steps followed the last one.
"""

from __future__ import annotations

import time

import torch

from lowbw.comm.meter import Meter
from lowbw.comm.noloco import noloco_outer
from lowbw.comm.pairwise import pair_partners, pairwise_time, swap
from lowbw.train.schemes.synchronous import Action, ModelSync, Synchronous
from lowbw.train.world import Exchange, link_for, links_for

__all__ = ["NoLoCo", "pair_links"]


def pair_links(cfg, partner: list[int], now: float) -> list[tuple[tuple[float, float], tuple[float, float]]]:
    """Per pair of ``partner`` (each once, lower rank first) the (alpha s, bits/s) of each direction on the
    world's links at virtual time ``now`` (module docstring)."""
    links = links_for(cfg, "world", now)
    pairs = []
    for a, b in enumerate(partner):
        if a > b:
            continue
        if links is None:
            lk = link_for(cfg, "world", now)
            one = (lk.alpha_s, lk.bandwidth_bps)
            pairs.append((one, one))
        else:
            la, lb = links[a], links[b]
            pairs.append(((la.up_alpha_s + lb.down_alpha_s, min(la.up_bps, lb.down_bps)),
                          (lb.up_alpha_s + la.down_alpha_s, min(lb.up_bps, la.down_bps))))
    return pairs


class NoLoCo(Synchronous):
    """Local steps; every H steps the pairwise outer step of the module docstring."""

    def __init__(self, cfg, world, rep, opt=None, batches=None):
        super().__init__(cfg, world, rep, opt, batches)
        pair_partners(cfg.workers, cfg.seed, 0)  # an odd world is an error before any step
        self.phi = rep.params.detach().float().clone()  # phi_i of every local replica, [R, P]
        self.m = torch.zeros_like(self.phi)
        self.round = 0  # outer steps taken
        self.dirty = False  # inner steps since the last outer step
        self.meter = Meter()

    def action(self, step: int, progress: float) -> Action:
        return Action(None, "world" if step % self.cfg.world_period == 0 else None)

    @property
    def global_row(self) -> torch.Tensor:
        """Worker 0's phi: the model evaluated (the replicas are apart)."""
        return self.phi[0]

    def scheme_sync(self, step: int, act: Action) -> ModelSync:
        self.dirty = True
        if act.avg is None:
            return ModelSync(equal=False)
        return ModelSync(foreground=[self.outer_step()], equal=False)

    def finish(self) -> ModelSync:
        """One more outer step if inner steps followed the last (the workers stay apart, except M = 2)."""
        return ModelSync(foreground=[self.outer_step()] if self.dirty else [], equal=True)

    def outer_step(self) -> Exchange:
        """Steps 1-4 of the module docstring for every local replica; returns the round's exchange."""
        cfg, rep, world = self.cfg, self.rep, self.world
        partner = pair_partners(cfg.workers, cfg.seed, self.round)
        thetas = rep.params.detach().float().clone()
        nbytes = thetas.shape[1] * thetas.element_size()
        t0 = time.perf_counter()
        if world.kind == "sim":
            peers = [thetas[partner[i]] for i in world.ranks]
        else:
            peers = [swap(thetas[0], partner[world.rank], timeout=world.timeout_s, meter=self.meter)]
            self.meter.calls.clear()
        comm_s = time.perf_counter() - t0
        for i in range(len(world.ranks)):
            theta = thetas[i].clone()
            noloco_outer(self.phi[i], self.m[i], theta, peers[i], cfg.outer_lr, cfg.outer_momentum)
            rep.params[i].copy_(theta)
        self.round += 1
        self.dirty = False
        n = len(world.ranks)
        return Exchange(outputs=list(rep.params), busy_s=[0.0] * n, comm_s=[comm_s / n] * n,
                        bytes_sent=[nbytes] * n, v_comm=pairwise_time(nbytes, pair_links(cfg, partner, world.now)),
                        v_alpha=1.0, v_beta_bytes=float(nbytes))

    def state_dict(self) -> dict:
        s = super().state_dict()
        s.update(phi=self.phi.clone(), m=self.m.clone(), round=self.round, dirty=self.dirty)
        return s

    def load_state_dict(self, s: dict) -> None:
        super().load_state_dict(s)
        self.phi.copy_(s["phi"])
        self.m.copy_(s["m"])
        self.round, self.dirty = int(s["round"]), bool(s["dirty"])
