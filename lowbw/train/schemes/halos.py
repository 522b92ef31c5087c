"""HALoS (``sync: halos``): hierarchical asynchronous local SGD with regional (local) parameter servers, a
global parameter server, and momentum at both levels.

Kim et al. 2025, "HALoS: Hierarchical Asynchronous Local SGD over Slow Networks for Geo-Distributed
Large Language Model Training", ICML 2025, arXiv:2506.04531; code utnslab/halos at 4b5bf73
(``src/halos/simulation/exec_halos.py``: ``LocalParameterServer``, ``HalosSimulator``; ``src/halos/opt.py``:
both servers step with Delayed Nesterov; ``examples/run_halos.sh``: the hyper-parameters). On the event
engine of :mod:`.async_outer` (rounds, links, clock), with R = ``halos_regions`` regions of G = M / R
workers (worker i in region floor(i / G)), one local parameter server (LPS) per region and the global one
(GPS) beside LPS 0:

1. worker i takes H_i inner steps from its LPS's model (H, or DyLU's H_i with ``async_dylu``; their
   ``--rescale_num_local_steps``) and pushes Delta_i to its LPS over the region's link;
2. LPS r applies Delta_i at once with Delayed Nesterov (:class:`lowbw.train.schemes.async_diloco.DelayedNesterov`)
   at rate ``halos_local_lr``, momentum ``halos_local_momentum``, buffer ``halos_local_buffer`` (0: G), and
   counts it (its model version v_r); worker i joins the LPS's batch and is sent the LPS's model at the
   batch's deadline (``async_grace_s``; 0: that instant; their LPS answers at once);
3. when v_r = v_r^merged + K (K = ``halos_accumulation``, 0: G), LPS r sends u_r = p_r^merged - p_r (its
   model at its last merge minus now) to the GPS;
4. the GPS applies u_r with Delayed Nesterov at ``outer_lr``, ``outer_momentum``, buffer
   ``halos_global_buffer`` (0: R) and sends its model theta_g back;
5. LPS r merges: p_r <- (1 - alpha) p_r + alpha theta_g with alpha = ``halos_merge_weight`` (their
   ``model_merge_weight``; their script 0.25); p_r^merged <- p_r, v_r^merged <- v_r. Updates LPS r applied
   while u_r was away are kept in p_r in the proportion 1 - alpha, and are not sent again.

Links: worker <-> LPS messages cross the LPS's port (``halos_region_mbit``, ``halos_region_latency_ms``;
their defaults: ``bandwidth_mbit``, ``latency_ms``) and, on per-worker links, the worker's own; LPS <-> GPS
messages cross the GPS's shared port at ``bandwidth_mbit`` / ``latency_ms`` (the wide-area link), except LPS
0's, which shares the GPS's machine and costs nothing. The run is evaluated on the GPS's model; the final
synchronisation delivers every Delta, then every LPS with updates since its last merge sends them (step 3)
and merges the answer.

Reduction (``tests/train/test_async_outer.py``): with one region, K = 1, alpha = 1 and a GPS that adds
what it is sent (``outer_lr`` 1, ``outer_momentum`` 0, buffer 1), theta_g = p^merged - (p^merged - p) = p up
to rounding, so HALoS is its global-server form: ``async_diloco`` with the LPS's rate, momentum and buffer.

Variants (named): their simulator times a message by the regions' bandwidth matrix; ours by the link keys
above; the GPS sits with LPS 0 as in their simulator (region 0). Their workers' losses are reported at the
GPS; ours per inner step, as every scheme here.
"""

from __future__ import annotations

import torch

from lowbw.net.costmodel import LinkParams
from lowbw.train.links import message_link
from lowbw.train.schemes.async_diloco import DelayedNesterov
from lowbw.train.schemes.async_outer import AsyncOuter, ServerPort, uses_worker_links
from lowbw.train.schemes.parameter_server import server_link

__all__ = ["HALoS", "region_link"]


def region_link(cfg, t_virtual: float = 0.0) -> LinkParams:
    """A region's LPS port: ``halos_region_mbit`` (0: ``bandwidth_mbit``, under a schedule its value at
    ``t_virtual``) x ``link_goodput``, latency ``halos_region_latency_ms`` (-1: ``latency_ms``) +
    ``clock_overhead_ms``; under ``link_loss`` as TCP's loss recovery charges one message alone.
    """
    if not cfg.halos_region_mbit and cfg.halos_region_latency_ms < 0:
        return server_link(cfg, t_virtual)
    mbit = cfg.halos_region_mbit or cfg.bandwidth_mbit
    lat = cfg.latency_ms if cfg.halos_region_latency_ms < 0 else cfg.halos_region_latency_ms
    return message_link(cfg, (lat + cfg.clock_overhead_ms) / 1e3, mbit * 1e6 * cfg.link_goodput, lat)


class HALoS(AsyncOuter):
    """Regional servers under a global one (module docstring)."""

    SERVER_STATE = ("lps", "merged", "v", "v_merged", "theta_g")
    SERVER_OPTIMIZERS = ("lps_opt", "gps_opt")

    def __init__(self, cfg, world, rep, opt=None, batches=None):
        super().__init__(cfg, world, rep, opt, batches)
        R = self.R = cfg.halos_regions
        G = self.G = self.M // R
        P, dev = rep.P, rep.device
        per_worker = uses_worker_links(cfg, region_link(cfg))
        self.region_ports = [ServerPort(cfg, lambda t: region_link(cfg, t), per_worker) for _ in range(R)]
        self.wan = ServerPort(cfg, lambda t: server_link(cfg, t), False)  # the GPS's port
        self.lps = [rep.params[0].clone() for _ in range(R)]  # p_r
        self.merged = [rep.params[0].clone() for _ in range(R)]  # p_r^merged
        self.v = [0] * R  # v_r, updates LPS r applied
        self.v_merged = [0] * R  # v_r^merged
        self.lps_opt = [DelayedNesterov(P, dev, cfg.halos_local_momentum, cfg.halos_local_buffer or G)
                        for _ in range(R)]
        self.K = cfg.halos_accumulation or G
        self.theta_g = rep.params[0].clone()  # the GPS's model
        self.gps_opt = DelayedNesterov(P, dev, cfg.outer_momentum, cfg.halos_global_buffer or R)

    def server_of(self, i: int) -> int:
        return i // self.G

    def port_of(self, i: int) -> ServerPort:
        return self.region_ports[self.server_of(i)]

    def ports(self) -> list[ServerPort]:
        return [*self.region_ports, self.wan]

    def model_for(self, server: int) -> torch.Tensor:
        return self.lps[server]

    @property
    def global_row(self) -> torch.Tensor:
        return self.theta_g

    def _hop(self, r: int, t: float, direction: str) -> float:
        """Arrival time of an LPS r <-> GPS message ready at ``t`` (LPS 0 shares the GPS's machine)."""
        if r == 0:
            return t
        self.tally.bytes_sent += self.nbytes
        return self.wan.transfer(t, self.nbytes, direction, None)

    def arrive(self, i: int, delta: torch.Tensor, t: float) -> None:
        """Steps 2-3 at LPS r."""
        r = self.server_of(i)
        self.lps_opt[r].step(self.lps[r], delta, self.cfg.halos_local_lr)
        self.v[r] += 1
        if self.v[r] == self.v_merged[r] + self.K:
            self._send_up(r, t)
        self.join_batch(r, i, t)

    def _send_up(self, r: int, t: float) -> None:
        """Step 3: u_r to the GPS."""
        u = self.merged[r] - self.lps[r]
        self.push_event(self._hop(r, t, "in"), "relay", -1, ("gps", r, u))

    def relay(self, payload, t: float) -> None:
        """Step 4 at the GPS, or step 5 at an LPS."""
        kind, r, x = payload
        if kind == "gps":
            self.gps_opt.step(self.theta_g, x, self.cfg.outer_lr)
            self.version += 1
            self.push_event(self._hop(r, t, "out"), "relay", -1, ("lps", r, self.theta_g.clone()))
            return
        a = self.cfg.halos_merge_weight
        self.lps[r].mul_(1.0 - a).add_(x * a)
        self.merged[r].copy_(self.lps[r])
        self.v_merged[r] = self.v[r]

    def flush(self, t: float) -> None:
        """Every LPS with updates since its last merge sends them (step 3); the answers merge (step 5)."""
        for r in range(self.R):
            if self.v[r] > self.v_merged[r]:
                self._send_up(r, t)
