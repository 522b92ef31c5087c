"""The model replicas one process holds, as flat parameter rows.

Parameters live in one ``[R, P]`` float tensor (one row per replica), floating buffers (BatchNorm running
statistics) in ``[R, Q]``, integer buffers (``num_batches_tracked``) in a dict of ``[R, ...]`` tensors. The
module itself is only a template: :func:`torch.func.functional_call` runs it on a row's views. This makes
every synchronisation scheme plain tensor code on rows (average rows, update rows) and lets one process hold
any number of replicas (``sim``: all M; ``procs``: one).

Two ways to run R replicas (``engine``):

* ``loop``: one forward/backward per replica at its local batch. On CPU this is as fast as one model at
  batch R*b (measured in lowbw/bench/train.py) and is bit-identical to a process holding one replica, dropout
  included: each replica's forward pass draws its masks from its worker's own stream (``masks``,
  :mod:`lowbw.train.masks`).
* ``vmap``: :func:`torch.func.vmap` over stacked replicas (a grouped convolution per layer); pays off on
  GPUs where small per-replica batches leave the device idle.
"""

from __future__ import annotations

import math
import time
from contextlib import nullcontext

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, vmap

from lowbw.train.masks import MaskStreams

__all__ = ["Replicas", "correct_samples"]


def correct_samples(logits: torch.Tensor, y: torch.Tensor) -> float:
    """Correct predictions in units of samples: the correct elements x samples / elements (an image has one
    element, its label; a text window one per position), so that correct / samples is the accuracy."""
    return float((logits.argmax(-1) == y).sum()) * len(y) / max(1, y.numel())




class Replicas:
    def __init__(self, model: nn.Module, rows: int, device: str | torch.device = "cpu", engine: str = "loop",
                 masks: MaskStreams | None = None):
        if engine not in ("loop", "vmap"):
            raise ValueError(f"engine={engine!r}")
        if masks is not None and engine == "vmap":
            raise ValueError("engine='vmap' draws every replica's dropout masks from one stream: use 'loop'")
        self.model = model
        # each row's dropout stream (lowbw.train.masks), None for a model without dropout
        self.masks = masks
        self.R = rows
        self.device = torch.device(device)
        self.engine = engine
        self.p_layout: list[tuple[str, int, int, torch.Size]] = []
        off = 0
        for n, p in model.named_parameters():
            self.p_layout.append((n, off, p.numel(), p.shape))
            off += p.numel()
        self.P = off
        self.b_layout: list[tuple[str, int, int, torch.Size]] = []
        self.int_buffers: dict[str, torch.Tensor] = {}
        off = 0
        for n, b in model.named_buffers():
            if b.is_floating_point():
                self.b_layout.append((n, off, b.numel(), b.shape))
                off += b.numel()
            else:
                self.int_buffers[n] = b.detach().to(self.device).unsqueeze(0).repeat(rows, *[1] * b.dim()).clone()
        self.Q = off
        with torch.no_grad():
            flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()]) if self.P else torch.zeros(0)
            fb = (torch.cat([b.detach().reshape(-1) for _, b in self._float_buffers(model)])
                  if self.Q else torch.zeros(0))
        self.params = flat.to(self.device).unsqueeze(0).repeat(rows, 1).contiguous()
        self.buffers = fb.to(self.device).unsqueeze(0).repeat(rows, 1).contiguous()
        self.grads = torch.zeros_like(self.params)

    @staticmethod
    def _float_buffers(model: nn.Module):
        return [(n, b) for n, b in model.named_buffers() if b.is_floating_point()]

    # ------------------------------------------------------------------------------------------- views
    def param_views(self, flat: torch.Tensor) -> dict[str, torch.Tensor]:
        """Name -> view of a flat ``[P]`` row (or ``[R, P]`` block: views get a leading R)."""
        lead = flat.shape[:-1]
        return {n: flat[..., o: o + k].view(*lead, *s) for n, o, k, s in self.p_layout}

    def buffer_views(self, r: int | None) -> dict[str, torch.Tensor]:
        fb = self.buffers if r is None else self.buffers[r]
        lead = fb.shape[:-1]
        out = {n: fb[..., o: o + k].view(*lead, *s) for n, o, k, s in self.b_layout}
        for n, t in self.int_buffers.items():
            out[n] = t if r is None else t[r]
        return out

    def chunks(self, granularity: str) -> list[tuple[str, int, int, torch.Size]]:
        """(name, offset, numel, shape) of what is aggregated as one tensor: each parameter (``layer``, and
        ``bucket``, whose buckets group them: :func:`lowbw.train.aggregate.buckets_of`), or all at once."""
        if granularity == "flat":
            return [("flat", 0, self.P, torch.Size([self.P]))]
        return list(self.p_layout)

    # ------------------------------------------------------------------------------------------- compute
    def forward_backward(self, xs: list[torch.Tensor], ys: list[torch.Tensor],
                         rows: list[int] | None = None) -> tuple[list[float], list[int], list[float]]:
        """Gradients of each replica's mean cross-entropy on its batch into ``self.grads``.

        ``xs[k], ys[k]`` is the batch of replica ``rows[k]`` (default: all replicas in order); the model maps
        inputs to logits ``[..., classes]`` with one target class per element of ``ys[k]`` (an image: one
        label; a text window: one next character per position), and the loss is the mean over those elements.
        Returns per replica: loss, correct predictions (elements), compute seconds (vmap: the batched time / R).
        """
        self.model.train()
        rows = list(range(self.R)) if rows is None else list(rows)
        if (self.engine == "vmap" and self.R > 1 and rows == list(range(self.R))
                and len({x.shape for x in xs}) == 1):
            return self._fb_vmap(xs, ys)
        losses, correct, secs = [], [], []
        for r, x, y in zip(rows, xs, ys):
            t0 = time.perf_counter()
            # one leaf per parameter (views of the row): no slice-backward scatter into a [P] gradient
            leaves = {n: v.detach().requires_grad_(True) for n, v in self.param_views(self.params[r]).items()}
            with self.masks.drawing(r) if self.masks is not None else nullcontext():
                out = functional_call(self.model, (leaves, self.buffer_views(r)), (x,))
            loss = F.cross_entropy(out.flatten(0, -2), y.flatten())
            gs = torch.autograd.grad(loss, list(leaves.values()))
            grow = self.grads[r]
            for (_, o, k, _), g in zip(self.p_layout, gs):
                grow[o: o + k].copy_(g.reshape(-1))
            losses.append(float(loss.detach()))
            correct.append(correct_samples(out.detach(), y))
            if self.device.type == "cuda":
                torch.cuda.synchronize(self.device)
            secs.append(time.perf_counter() - t0)
        return losses, correct, secs

    def _fb_vmap(self, xs, ys):
        t0 = time.perf_counter()
        x = torch.stack(xs)
        y = torch.stack(ys)
        leaf = self.params.detach().requires_grad_(True)
        params = self.param_views(leaf)
        bufs = self.buffer_views(None)
        # BatchNorm's batching rule updates running statistics in place only in contiguous [R, ...] tensors, and
        # the column slices of ``self.buffers`` are not: update contiguous copies and write them back.
        for n, _, _, _ in self.b_layout:
            bufs[n] = bufs[n].clone()

        def f(p, b, xx, yy):
            out = functional_call(self.model, (p, b), (xx,))
            return F.cross_entropy(out.flatten(0, -2), yy.flatten()), out

        loss, out = vmap(f, randomness="different")(params, bufs, x, y)
        (g,) = torch.autograd.grad(loss.sum(), leaf)
        self.grads.copy_(g)
        with torch.no_grad():
            for n, o, k, _ in self.b_layout:
                self.buffers[:, o: o + k].copy_(bufs[n].reshape(self.R, k))
        correct = [correct_samples(o, t) for o, t in zip(out.detach(), y)]
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        dt = (time.perf_counter() - t0) / self.R
        return [float(v) for v in loss.detach()], correct, [dt] * self.R

    @torch.no_grad()
    def evaluate(self, r: int, x: torch.Tensor, y: torch.Tensor, batch: int, transform) -> tuple[float, float]:
        """(mean loss, accuracy) of replica ``r`` in eval mode (BN running statistics) on ``(x, y)``, both
        over every target element (per image, or per predicted character)."""
        if len(y) == 0:
            return math.nan, math.nan
        self.model.eval()
        params = self.param_views(self.params[r])
        bufs = self.buffer_views(r)
        loss_sum = 0.0
        correct = 0
        for i in range(0, len(y), batch):
            xb = transform(x[i: i + batch])
            yb = y[i: i + batch]
            out = functional_call(self.model, (params, bufs), (xb,))
            loss_sum += float(F.cross_entropy(out.flatten(0, -2), yb.flatten(), reduction="sum"))
            correct += int((out.argmax(-1) == yb).sum())
        self.model.train()
        return loss_sum / y.numel(), correct / y.numel()

    # ------------------------------------------------------------------------------------------- state
    def state_dict(self) -> dict:
        s = {"params": self.params.clone(), "buffers": self.buffers.clone(), "grads": self.grads.clone(),
             "int_buffers": {k: v.clone() for k, v in self.int_buffers.items()}}
        if self.masks is not None:
            s["masks"] = self.masks.state_dict()
        return s

    def load_state_dict(self, s: dict) -> None:
        self.params.copy_(s["params"])
        self.buffers.copy_(s["buffers"])
        if "grads" in s:
            self.grads.copy_(s["grads"])
        for k, v in s["int_buffers"].items():
            self.int_buffers[k].copy_(v)
        if self.masks is not None:
            self.masks.load_state_dict(s["masks"])
