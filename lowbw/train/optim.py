"""Optimisers on flat parameter rows ``[R, P]`` (one row per replica held by this process).

Plain elementwise tensor code: the same update on a ``[4, P]`` block (sim) and on a ``[1, P]`` block (one
process) gives bit-identical rows, which is what lets ``sim`` and ``procs`` agree. Semantics follow
``torch.optim.SGD`` (momentum buffer starts at the first gradient; dampening 0) and ``torch.optim.Adam`` /
``AdamW``. ``optimizer: muon`` is :class:`lowbw.train.muon.MuonFlat` (it needs the parameter layout: which
tensors are matrices).
"""

from __future__ import annotations

import torch

from lowbw.train.muon import MuonFlat

__all__ = ["FlatOptimizer", "make_optimizer", "decay_mask", "clip_rows"]


class FlatOptimizer:
    def __init__(self, kind: str, shape: tuple[int, int], device, *, momentum: float = 0.9, nesterov: bool = False,
                 weight_decay: float = 0.0, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 decay_mask: torch.Tensor | None = None):
        if kind not in ("sgd", "adam", "adamw"):
            raise ValueError(f"optimizer={kind!r} is unknown")
        self.kind = kind
        self.momentum = momentum
        self.nesterov = nesterov
        self.wd = weight_decay
        self.betas = betas
        self.eps = eps
        self.decay_mask = decay_mask
        self.state: dict[str, torch.Tensor] = {}
        self.t = 0
        self.shape = shape
        self.device = device

    def _wd(self) -> float | torch.Tensor:
        return self.wd if self.decay_mask is None else self.wd * self.decay_mask

    @torch.no_grad()
    def step(self, p: torch.Tensor, g: torch.Tensor, lr: float) -> None:
        """In-place update of every row of ``p`` with the gradient rows ``g``."""
        if self.kind == "sgd":
            p.sub_(self._sgd(p, g), alpha=lr)
            return
        if self.kind == "adamw" and self.wd:
            p.mul_(1 - lr * self._wd())
        num, denom = self._adam(p, g)
        p.addcdiv_(num, denom, value=-lr)

    @torch.no_grad()
    def direction(self, p: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
        """The rows' update direction d from the gradient rows ``g``, the state advanced one step as by
        :meth:`step` (``p`` is read for L2 weight decay, not changed): SGD's (momentum) buffer, Adam's
        m_hat / (sqrt(v_hat) + eps). :meth:`apply` then moves ``p`` by -lr d (after AdamW's decoupled decay):
        the same update as :meth:`step` up to rounding (``compress_target: update`` sends d)."""
        if self.kind == "sgd":
            return self._sgd(p, g)
        num, denom = self._adam(p, g)
        return num.div_(denom)

    @torch.no_grad()
    def apply(self, p: torch.Tensor, d: torch.Tensor, lr: float) -> None:
        """p <- p (1 - lr wd) for AdamW (decoupled decay), then p <- p - lr d."""
        if self.kind == "adamw" and self.wd:
            p.mul_(1 - lr * self._wd())
        p.sub_(d, alpha=lr)

    def _sgd(self, p: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
        """SGD's direction (L2 decay, momentum buffer, Nesterov), the state advanced one step."""
        self.t += 1
        d = g.clone()
        if self.wd:
            d.add_(p * self._wd())
        if self.momentum:
            buf = self.state.get("momentum")
            buf = d.clone() if buf is None else buf.mul_(self.momentum).add_(d)
            self.state["momentum"] = buf
            d = d.add(buf, alpha=self.momentum) if self.nesterov else buf
        return d

    def _adam(self, p: torch.Tensor, g: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Adam's moments advanced one step: (m / bc1, sqrt(v / bc2) + eps)."""
        self.t += 1
        b1, b2 = self.betas
        d = g.clone()
        if self.kind == "adam" and self.wd:
            d.add_(p * self._wd())
        m = self.state.setdefault("exp_avg", torch.zeros_like(p))
        v = self.state.setdefault("exp_avg_sq", torch.zeros_like(p))
        m.mul_(b1).add_(d, alpha=1 - b1)
        v.mul_(b2).addcmul_(d, d, value=1 - b2)
        t = int(self.t)
        bc1 = 1 - b1 ** t
        bc2 = 1 - b2 ** t
        return m / bc1, (v / bc2).sqrt_().add_(self.eps)


    def state_dict(self) -> dict:
        return {"state": {k: v.clone() for k, v in self.state.items()}, "t": self.t}

    def load_state_dict(self, s: dict) -> None:
        self.state = {k: v.clone() for k, v in s["state"].items()}
        self.t = int(s["t"])


def make_optimizer(cfg, rows: int, params: int, device, layout=None):
    """The run's optimiser (``optimizer``, ``momentum``, ``nesterov``, ``weight_decay``, ``weight_decay_on``,
    ``adam_*``, ``muon_*`` keys) on ``rows`` parameter rows of ``params`` elements; ``layout`` (name, offset,
    numel, shape per tensor, :attr:`lowbw.train.replicas.Replicas.p_layout`) tells matrices from the rest
    (``muon`` needs it)."""
    if cfg.optimizer == "muon":
        if layout is None:
            raise ValueError("optimizer='muon' needs the parameter layout (this caller passes none)")
        return MuonFlat(layout, (rows, params), device, momentum=cfg.muon_momentum, ns_steps=cfg.muon_ns_steps,
                        scale=cfg.muon_scale, weight_decay=cfg.weight_decay,
                        betas=(cfg.adam_beta1, cfg.adam_beta2), eps=cfg.adam_eps,
                        decay_mask=decay_mask(cfg, params, layout, device))
    return FlatOptimizer(cfg.optimizer, (rows, params), device, momentum=cfg.momentum, nesterov=cfg.nesterov,
                         weight_decay=cfg.weight_decay, betas=(cfg.adam_beta1, cfg.adam_beta2), eps=cfg.adam_eps,
                         decay_mask=decay_mask(cfg, params, layout, device))


def decay_mask(cfg, params: int, layout, device) -> torch.Tensor | None:
    """``weight_decay_on: matrices``: 1 on the elements of every parameter of >= 2 dimensions (weights,
    embeddings), 0 on norms and biases (GPT-2/nanoGPT); ``all``: None (every element decays)."""
    if getattr(cfg, "weight_decay_on", "all") == "all":
        return None
    if layout is None:
        raise ValueError("weight_decay_on='matrices' needs the parameter layout (this caller passes none)")
    mask = torch.zeros(params, device=device)
    for _, off, n, shape in layout:
        if len(shape) >= 2:
            mask[off: off + n] = 1.0
    return mask


def clip_rows(g: torch.Tensor, max_norm: float) -> torch.Tensor:
    """Each row of ``g`` scaled to L2 norm at most ``max_norm`` (``torch.nn.utils.clip_grad_norm_`` per
    replica, over all its parameters: g * min(1, max_norm / (||g|| + 1e-6))); 0: ``g`` unchanged."""
    if not max_norm:
        return g
    norm = g.norm(dim=1, keepdim=True)
    return g * (max_norm / (norm + 1e-6)).clamp(max=1.0)
