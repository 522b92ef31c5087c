"""``ddp_hook: true`` on procs/torchrun: torch's DistributedDataParallel with a lowbw compressor as its
communication hook (:func:`lowbw.comm.hooks.make_hook`); torch's bucketing replaces lowbw's per-tensor aggregation.

The module's parameters are views into the replica's flat row, so the optimiser, checkpoints, evaluation
and metrics are those of :class:`~lowbw.train.loop.Trainer`; only the local step differs (:class:`DDPStep`)
(DDP's buckets, reverse parameter order, its own overlap of communication with the backward pass).
BatchNorm buffers are not broadcast (``broadcast_buffers=False``): as in the other schemes each worker
keeps its own. The hook returns at once and its exchange thread works while backward goes on, so the
step's forward+backward wall time is split as: communication = the meter's seconds, compression = the rest
of the exchange thread's busy time and of the hook calls, compute = what remains (overlap counts as
exchange, never twice). The virtual clock uses the hook's call records like any other step.
"""

from __future__ import annotations

import time
import warnings
from contextlib import nullcontext

import torch
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel

from lowbw.comm.hooks import make_hook, timed_hook
from lowbw.train.assign import seed_for
from lowbw.train.loop import Trainer
from lowbw.train.replicas import correct_samples
from lowbw.train.schemes.base import LocalStep
from lowbw.train.state import WorkerStats

__all__ = ["DDPTrainer", "DDPStep"]


class DDPTrainer(Trainer):
    def __init__(self, cfg, world, out=None, data=None, device=None):
        super().__init__(cfg, world, out, data, device)
        rep, m = self.rep, self.model_template
        with torch.no_grad():
            for (_name, off, k, shape), p in zip(rep.p_layout, m.parameters(), strict=True):
                p.data = rep.params[0, off: off + k].view(shape)
            fbufs = [b for b in m.buffers() if b.is_floating_point()]
            for (_name, off, k, shape), b in zip(rep.b_layout, fbufs, strict=True):
                b.data = rep.buffers[0, off: off + k].view(shape)
        dev_ids = [self.device.index] if self.device.type == "cuda" else None
        with warnings.catch_warnings():  # broadcast_buffers=False is what we mean (rank-local BN statistics)
            warnings.simplefilter("ignore", FutureWarning)
            self.ddp = DistributedDataParallel(m, device_ids=dev_ids, broadcast_buffers=False)
        comp = self.sync.comp if self.sync.comp is not None else "none"
        self.hook_state, hook = make_hook(comp, algorithm=cfg.collective, module=m,
                                          seed=seed_for(cfg.seed, "compress", world.rank) % (2**31))
        timed, self.hook_timer = timed_hook(hook)  # seconds inside hook calls this step
        self.ddp.register_comm_hook(self.hook_state, timed)
        self.local_step = DDPStep(self.ddp, m, self.batches, self.hook_state, self.hook_timer, world, rep.masks)


class DDPStep:
    """This worker's local step through DDP (``StepContext.local_step``): its gradient on its next ``b``
    samples, averaged over the world by DDP and the hook (``ddp_hook`` implies a scheme whose every step is a
    world gradient average)."""

    def __init__(self, ddp, module, batches, hook_state, hook_timer, world, masks=None):
        self.ddp, self.model_template = ddp, module  # DDP and the module whose parameters view the replica
        self.masks = masks  # this worker's dropout stream (lowbw.train.masks.MaskStreams; None: no dropout)
        self.batches, self.world = batches, world  # batches(i, b); the world that accounts the exchange
        self.hook_state, self.hook_timer = hook_state, hook_timer  # the hook's collective, meter and timer

    def __call__(self, b: int) -> LocalStep:
        t0 = time.perf_counter()
        x, y = self.batches(0, b)
        coll, meter = self.hook_state.collective(), self.hook_state.meter
        n0, m0 = len(coll.calls), len(meter.calls)
        self.hook_timer.seconds = 0.0
        busy0 = self.hook_state.stats.busy_s
        self.ddp.train()
        self.ddp.zero_grad(set_to_none=True)
        with self.masks.drawing(0) if self.masks is not None else nullcontext():
            out = self.ddp(x)
        loss = F.cross_entropy(out.flatten(0, -2), y.flatten())
        loss.backward()
        with torch.no_grad():
            grads = torch.cat([p.grad.reshape(-1) for p in self.model_template.parameters()]).unsqueeze(0)
        busy = self.hook_state.stats.busy_s - busy0  # the exchange thread's seconds in this step
        hook_s = self.hook_timer.seconds
        compute = max(0.0, time.perf_counter() - t0 - busy - hook_s)
        comm_s = sum(c.seconds for c in meter.calls[m0:])
        ex = self.world.account("world", coll, meter, n0, m0, None, max(0.0, busy + hook_s - comm_s), comm_s)
        correct = correct_samples(out.detach(), y)
        return LocalStep(grads, [WorkerStats(loss=float(loss.detach()), correct=correct, count=b, t_compute=compute)],
                         ex)
