"""Muon on flat parameter rows ``[R, P]``: orthogonalised momentum updates for the hidden weight matrices,
AdamW for every other tensor (``optimizer: muon``; Jordan et al. 2024, "Muon: An optimizer for hidden layers
in neural networks", https://kellerjordan.github.io/posts/muon/; Liu et al. 2025, "Muon is Scalable for LLM
Training", arXiv:2502.16982). As DiLoCo's inner optimiser (``sync: diloco``) it is MuLoCo (Thérien et al.
2025, "MuLoCo: Muon is a practical inner optimizer for DiLoCo", arXiv:2505.23725).

Per step t, with learning rate eta, weight decay lambda (``weight_decay``, decoupled) and for each Muon
tensor W (shape A x B; a convolution's filters flattened to [out, in x k x k]) with gradient G_t:

1. every parameter decays: theta <- (1 - eta lambda) theta (``weight_decay_on: matrices``: only matrices');
2. momentum (an exponential average, as the reference code): M_t = mu M_{t-1} + (1 - mu) G_t, mu =
   ``muon_momentum`` (0.95, Jordan's default); Nesterov's look-ahead U_t = (1 - mu) G_t + mu M_t;
3. orthogonalisation by N = ``muon_ns_steps`` (5) Newton-Schulz iterations on X_0 = U_t / (||U_t||_F +
   1e-7) (transposed first when A > B): X_{k+1} = a X_k + (b A_k + c A_k^2) X_k, A_k = X_k X_k^T, with
   (a, b, c) = (3.4445, -4.7750, 2.0315) (Jordan's quintic; it drives every singular value of X into about
   [0.7, 1.2], an approximation of U V^T of U_t = U S V^T);
4. W <- W - eta s O_t, O_t = X_N, with s = 0.2 sqrt(max(A, B)) (``muon_scale: rms``, Liu et al.: the update's
   RMS matches AdamW's about 0.2, so one ``lr`` serves both parts) or s = sqrt(max(1, A / B))
   (``muon_scale: shape``, Jordan's; his Muon learning rate 0.02 is then about 60x AdamW's).

Every other tensor (biases, norms' gains, embeddings, the output layer) takes AdamW's step with ``adam_beta1``,
``adam_beta2``, ``adam_eps`` at the same ``lr`` (its decay is step 1). Which tensors are Muon's
(:func:`muon_tensors`): those of two or more dimensions except embeddings and the output layer, as Jordan's
recipe keeps them on AdamW.

The iteration runs in fp32 (the reference code uses bf16 on GPUs) and one replica row at a time, so a
``[4, P]`` block (sim) and a ``[1, P]`` block (one process) give bit-identical rows.
"""

from __future__ import annotations

import math

import torch

__all__ = ["MuonFlat", "newton_schulz", "muon_tensors", "NS_COEFFS"]

NS_COEFFS = (3.4445, -4.7750, 2.0315)  # Jordan's quintic Newton-Schulz coefficients (a, b, c)


def newton_schulz(G: torch.Tensor, steps: int = 5) -> torch.Tensor:
    """Step 3 of the module docstring on one matrix ``G`` ``[A, B]`` (fp32): about U V^T of its SVD."""
    a, b, c = NS_COEFFS
    X = G.float()
    tall = X.shape[0] > X.shape[1]
    if tall:
        X = X.T
    X = X / (X.norm() + 1e-7)
    for _ in range(steps):
        A = X @ X.T
        X = a * X + (b * A + c * (A @ A)) @ X
    return X.T if tall else X


def _is_embedding(name: str) -> bool:
    module = name.rsplit(".", 1)[0]
    return "emb" in module or module.split(".")[-1] in ("wte", "wpe")  # nanoGPT's token / position tables


def muon_tensors(layout) -> list[bool]:
    """Per tensor of ``layout`` (name, offset, numel, shape): does Muon update it (else AdamW)? Tensors of two
    or more dimensions, except embeddings and the output layer: a name with ``head``, or, in a model without
    embeddings (a classifier), its last matrix; a model with embeddings (our GPT) ties its output layer to the
    token embedding, so its last matrix is a hidden one."""
    mats = [i for i, (_, _, _, s) in enumerate(layout) if len(s) >= 2]
    tied = any(_is_embedding(n) for n, _, _, _ in layout)
    last = mats[-1] if mats and not tied else -1
    return [len(s) >= 2 and i != last and not _is_embedding(n) and "head" not in n
            for i, (n, _, _, s) in enumerate(layout)]


class MuonFlat:
    """Muon + AdamW on rows ``[R, P]`` laid out as ``layout``; the interface of
    :class:`lowbw.train.optim.FlatOptimizer` (``step``, ``state``, ``state_dict``, ``load_state_dict``)."""

    kind = "muon"

    def __init__(self, layout, shape: tuple[int, int], device, *, momentum: float = 0.95, ns_steps: int = 5,
                 scale: str = "rms", weight_decay: float = 0.0, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, decay_mask: torch.Tensor | None = None):
        """``decay_mask``: 1 where step 1 decays, 0 where not (``weight_decay_on``); None: everywhere."""
        if scale not in ("rms", "shape"):
            raise ValueError(f"muon_scale={scale!r} is unknown (rms, shape)")
        is_muon = muon_tensors(layout)
        self.mats = []  # (offset, numel, A, B, s): Muon's tensors as matrices and their update scale
        adam = []
        for (_, off, k, s), m in zip(layout, is_muon):
            if m:
                A, B = int(s[0]), k // int(s[0])
                sc = 0.2 * math.sqrt(max(A, B)) if scale == "rms" else math.sqrt(max(1.0, A / B))
                self.mats.append((off, k, A, B, sc))
            else:
                adam.append(torch.arange(off, off + k))
        self.adam_idx = (torch.cat(adam) if adam else torch.zeros(0, dtype=torch.long)).to(device)
        self.momentum, self.ns_steps, self.wd, self.betas, self.eps = momentum, ns_steps, weight_decay, betas, eps
        self.decay_mask = decay_mask
        self.shape, self.device = shape, device
        self.state: dict[str, torch.Tensor] = {}
        self.t = 0

    @torch.no_grad()
    def step(self, p: torch.Tensor, g: torch.Tensor, lr: float) -> None:
        """Steps 1-4 of the module docstring (and AdamW's step on the rest) on every row of ``p``."""
        self.t += 1
        if self.wd:
            p.mul_(1 - lr * (self.wd if self.decay_mask is None else self.wd * self.decay_mask))
        mu = self.momentum
        buf = self.state.setdefault("muon_momentum", torch.zeros_like(p))
        for off, k, A, B, sc in self.mats:
            gs, ms = g[:, off:off + k], buf[:, off:off + k]
            ms.mul_(mu).add_(gs, alpha=1 - mu)
            u = gs * (1 - mu) + ms * mu
            for r in range(p.shape[0]):  # row by row: identical on any number of rows
                o = newton_schulz(u[r].view(A, B), self.ns_steps)
                p[r, off:off + k].add_(o.reshape(-1), alpha=-lr * sc)
        if self.adam_idx.numel():
            b1, b2 = self.betas
            pa, ga = p[:, self.adam_idx], g[:, self.adam_idx]
            m = self.state.setdefault("exp_avg", torch.zeros_like(pa))
            v = self.state.setdefault("exp_avg_sq", torch.zeros_like(pa))
            m.mul_(b1).add_(ga, alpha=1 - b1)
            v.mul_(b2).addcmul_(ga, ga, value=1 - b2)
            denom = (v / (1 - b2 ** self.t)).sqrt_().add_(self.eps)
            pa.addcdiv_(m / (1 - b1 ** self.t), denom, value=-lr)
            p[:, self.adam_idx] = pa

    def state_dict(self) -> dict:
        return {"state": {k: v.clone() for k, v in self.state.items()}, "t": self.t}

    def load_state_dict(self, s: dict) -> None:
        self.state = {k: v.clone() for k, v in s["state"].items()}
        self.t = int(s["t"])
