"""Asynchronous DiLoCo with Delayed Nesterov and Dynamic Local Updates (``sync: async_diloco``).

Liu, Douillard et al. 2024, "Asynchronous Local-SGD Training for Language Modeling", arXiv:2401.09135; the
authors' simulation is google-deepmind/asyncdiloco (``AsyncLocalSGDToyExample.ipynb``), and their Delayed
Nesterov (DN, the paper's Algorithm 3) as utnslab/halos implements it (``src/halos/opt.py``,
``DelayedNesterovOptimizer``), which :class:`DelayedNesterov` follows operation for operation.

On the event engine of :mod:`.async_outer` (the workers' rounds, links, clock) with one server:

1. worker i takes H_i inner steps from the server's model (H, or DyLU's H_i with ``async_dylu``) and
   pushes Delta_i = start_i - theta_i;
2. on arrival the server applies Delta_i at once with DN, the t-th arrival g_t:

       Delta_acc <- Delta_acc + g_t
       t = 0 mod N:  m <- beta m + Delta_acc / N;   theta <- theta - eta ((1 - cN + c) beta m + g_t / N);
                     Delta_acc <- 0
       otherwise:    theta <- theta - eta (c beta m + g_t / N)

   with eta = ``outer_lr``, beta = ``outer_momentum``, N = ``async_buffer`` (0: M workers) and c =
   ``async_momentum_activation`` (0, the paper's DN: the momentum moves theta only every N-th update);
3. worker i joins the server's batch; at the batch's deadline (``async_grace_s`` after its first arrival;
   0: that instant) every worker of the batch is sent the server's model.

Reductions (``tests/train/test_async_outer.py``): with N = 1 and c = 0, DN is SGD with Nesterov momentum on
every arrival, the same operations as torch.optim.SGD(nesterov=True) in :class:`lowbw.train.optim.FlatOptimizer`;
so with one worker ``async_diloco`` is ``diloco`` with identical metrics. With M equal workers on equal
links, DyLU off, N = M and c = 0, a round's M Deltas arrive at one instant and are all applied before any
worker restarts, and the N updates of DN sum to theta - eta (gbar + beta m'), m' = beta m + gbar: DiLoCo's
Nesterov outer step on the mean gbar, up to rounding (N subtractions in place of one).

Variants (named): the server sends models in batches with the toy code's grace window (``max_wait_time``;
our default 0 batches only arrivals at one instant) where the paper's server answers each worker at once;
DyLU's floor is one step (the toy code's is five); each worker keeps its inner optimiser's state across
rounds (as our DiLoCo; the toy code builds a fresh one every round).
"""

from __future__ import annotations

import torch

from lowbw.train.schemes.async_outer import AsyncOuter, ServerPort, uses_worker_links
from lowbw.train.schemes.parameter_server import server_link

__all__ = ["AsyncDiLoCo", "DelayedNesterov"]


class DelayedNesterov:
    """Delayed Nesterov on one flat row (module docstring, step 2): momentum ``beta``, buffer ``N``, momentum
    activation ``c``; its state is the momentum m, the accumulated Delta_acc and the update count t."""

    def __init__(self, n: int, device, beta: float, N: int, c: float = 0.0):
        self.beta, self.N, self.c = beta, N, c
        self.m = torch.zeros(n, device=device)  # m, the momentum (m_0 = 0)
        self.acc = torch.zeros(n, device=device)  # Delta_acc, the Deltas since the last momentum update
        self.t = 0  # updates applied

    @torch.no_grad()
    def step(self, theta: torch.Tensor, g: torch.Tensor, lr: float) -> None:
        """Apply pseudo-gradient ``g`` to ``theta`` in place at rate ``lr`` (eta)."""
        N, beta, c = self.N, self.beta, self.c
        self.acc.add_(g)
        g_n = g / N if N != 1 else g
        if (self.t + 1) % N == 0:
            self.m.mul_(beta).add_(self.acc / N if N != 1 else self.acc)
            theta.sub_(g_n.add(self.m, alpha=(1 - c * N + c) * beta), alpha=lr)
            self.acc.zero_()
        elif c:
            theta.sub_(g_n.add(self.m, alpha=c * beta), alpha=lr)
        else:
            theta.sub_(g_n, alpha=lr)
        self.t += 1

    def state_dict(self) -> dict:
        return {"m": self.m.clone(), "acc": self.acc.clone(), "t": self.t}

    def load_state_dict(self, s: dict) -> None:
        self.m.copy_(s["m"])
        self.acc.copy_(s["acc"])
        self.t = int(s["t"])


class AsyncDiLoCo(AsyncOuter):
    """One server applying each Delta at once with Delayed Nesterov (module docstring)."""

    SERVER_STATE = ("theta",)
    SERVER_OPTIMIZERS = ("dn",)

    def __init__(self, cfg, world, rep, opt=None, batches=None):
        super().__init__(cfg, world, rep, opt, batches)
        self.port = ServerPort(cfg, lambda t: server_link(cfg, t), uses_worker_links(cfg, server_link(cfg)))
        self.theta = rep.params[0].clone()  # the server's model
        self.dn = DelayedNesterov(rep.P, rep.device, cfg.outer_momentum, cfg.async_buffer or self.M,
                                  cfg.async_momentum_activation)

    def port_of(self, i: int) -> ServerPort:
        return self.port

    def ports(self) -> list[ServerPort]:
        return [self.port]

    def model_for(self, server: int) -> torch.Tensor:
        return self.theta

    @property
    def global_row(self) -> torch.Tensor:
        return self.theta

    def arrive(self, i: int, delta: torch.Tensor, t: float) -> None:
        """Step 2: DN on the server's model; step 3: worker ``i`` joins the batch."""
        self.dn.step(self.theta, delta, self.cfg.outer_lr)
        self.version += 1
        self.join_batch(0, i, t)
