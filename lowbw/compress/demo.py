"""DeMo, Decoupled Momentum Optimization (Peng, Quesnelle & Kingma 2024, arXiv:2411.19870), as a compressor.

The paper's Algorithm 1, per worker and parameter tensor, with local gradient Delta_t (no all-reduce), decay
beta and step size eta:

1. m_t <- beta m_t + Delta_t                  (local momentum; never synchronised, it is allowed to drift)
2. q_t <- ExtractFastComponents(m_t, s, k)   (DCT-II of chunks of size s, the k largest coefficients a chunk)
3. m_{t+1} <- m_t - q_t                      (what was sent leaves the momentum: a decayed error feedback)
4. Q_t <- Synchronize(q_t)                   (all-gather of the sparse coefficients, averaged, inverse DCT)
5. x_{t+1} <- x_t - eta sign(Q_t)            (Algorithm 1 has eta Q_t; the reference implementation, which
                                              the paper's experiments ran, takes the sign: ``p.grad.sign_()``)

Steps 1-4 and the sign of step 5 happen here: :meth:`DeMo.aggregate` returns sign(Q_t) (``sign=True``, the
default) or Q_t (``sign=False``, Algorithm 1's unsigned update); the run's optimiser then applies x -= lr * that,
so run it with plain SGD (``optimizer: sgd``, ``momentum: 0``, ``weight_decay: 0``): DeMo's momentum is the
only one. ``compress``/``decompress`` are one worker's q_t (in the parameter domain, no sign).

ExtractFastComponents as the reference implementation (github.com/bloc97/DeMo, ``demo.py``: ``TransformDCT``
and ``CompressDCT``) does it: each dimension is cut into chunks of the largest divisor of its length that is
at most s; a matrix [R, C] into [c1 x c2] blocks that get a separable 2-D orthonormal DCT-II (D1 B D2^T), a
vector into c-long chunks that get a 1-D one; the top k coefficients by magnitude of each block are kept
(k clamped to the block's size). Tensors of more than two dimensions (conv kernels), which the reference does
not handle, are viewed as [shape[0], rest]. Q_t averages each coefficient over the workers that sent it (the
reference's ``scatter_reduce(reduce="mean", include_self=False)``; with every coefficient sent this is the
plain mean) before the inverse DCT. The blocks follow the tensor's own shape, so aggregate per parameter
tensor (``granularity: layer``, the engine's default for compressors): one flat gradient whose length has no
divisor near s gets short chunks (a prime length: chunks of 1, everything sent).

Defaults are the reference's (``DeMo.__init__`` and the OLMo patch's ``OptimizerConfig``, which says 2-D
gradients are chunked in 2-D): s = 64 (``chunk``), k = 32 (``topk``), beta = 0.999 (``decay``), sign on; a
copy of the OLMo-300M DeMo run config (github.com/bentherien/DeMo) runs it at lr 4e-4, OLMo's AdamW lr, with
weight decay 0.
The reference accumulates lr * Delta_t in step 1; under a constant lr that scales m, the selection and Q_t
by lr and leaves sign(Q_t) unchanged; under a schedule the past gradients here are not weighted by their
step's lr.

Wire per block: k indices within the block (int16; int32 for blocks over 32768 coefficients; the reference
sends int64) and k fp32 values (the reference's values are in the parameter dtype: fp32 here). Payloads are
all-gathered and combined in rank order (not summable).
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

from lowbw.compress.base import Compressor, Payload, State
from lowbw.compress.checks import check_bool, check_float, check_int
from lowbw.compress.protocol import Collective
from lowbw.compress.registry import register

__all__ = ["DeMo", "dct_matrix", "largest_divisor_at_most", "Blocks"]

MAX_CHUNK = 4096  # s * s coefficients a block at most (16.7 M): int32 indices, a 64 MiB basis


def largest_divisor_at_most(n: int, s: int) -> int:
    """The largest divisor of ``n`` (>= 1) that is at most ``s`` (the reference's ``_get_smaller_split``)."""
    for d in range(min(n, s), 0, -1):
        if n % d == 0:
            return d
    return 1


def dct_matrix(n: int, device: torch.device | str = "cpu") -> Tensor:
    """The orthonormal DCT-II matrix [n, n] in fp32: D[p, i] = sqrt((2 - [p = 0]) / n) cos(pi (2i + 1) p / 2n).

    y = D x is the DCT-II of x (scipy's ``dct(x, norm="ortho")``); D is orthogonal, so x = D^T y."""
    i = torch.arange(n, dtype=torch.float64)
    d = torch.cos(math.pi * (2 * i[None, :] + 1) * i[:, None] / (2 * n)) * math.sqrt(2.0 / n)
    d[0] /= math.sqrt(2.0)
    return d.to(device=device, dtype=torch.float32)


class Blocks:
    """How a tensor of ``shape`` is cut into DCT blocks: viewed as [R, C] (a vector as [1, n], more than two
    dimensions as [shape[0], rest]), blocks of [c1, c2] with c = the largest divisor of R (C) at most s."""

    def __init__(self, shape: torch.Size, s: int, topk: int):
        n = math.prod(shape)
        rows = shape[0] if len(shape) >= 2 and n else 1
        self.rows, self.cols = rows, (n // rows if n else 0)
        self.c1 = largest_divisor_at_most(rows, s)
        self.c2 = largest_divisor_at_most(self.cols, s) if n else 1
        self.size = self.c1 * self.c2  # coefficients a block
        self.count = n // self.size  # blocks
        self.k = min(topk, self.size)  # kept a block

    def to_coeffs(self, x: Tensor, d1: Tensor, d2: Tensor) -> Tensor:
        """Flat [R*C] -> DCT coefficients [blocks, c1*c2] (block-major: block rows, then block columns)."""
        b = x.view(self.rows // self.c1, self.c1, self.cols // self.c2, self.c2)
        t = torch.matmul(b, d2.T).transpose(1, 2)  # [R/c1, C/c2, c1, c2], columns transformed
        return torch.matmul(d1, t).reshape(self.count, self.size)

    def from_coeffs(self, y: Tensor, d1: Tensor, d2: Tensor) -> Tensor:
        """The inverse of :meth:`to_coeffs` (D orthogonal: B = D1^T Y D2), flat [R*C]."""
        b = y.view(self.rows // self.c1, self.cols // self.c2, self.c1, self.c2)
        t = torch.matmul(d1.T, torch.matmul(b, d2))  # [R/c1, C/c2, c1, c2] in the parameter domain
        return t.transpose(1, 2).reshape(-1)


class DeMo(Compressor):
    """See the module docstring. ``chunk``: s, the largest chunk length per dimension; ``topk``: k, the
    coefficients kept a block (at most s * s, a matrix's block); ``decay``: beta in [0, 1); ``sign``: whether
    :meth:`aggregate` returns sign(Q) (the paper's signum update) or Q."""

    name = "demo"
    # momentum update (read 2, write 1), chunked DCT (read 1, write 1), top-k per chunk (read 1), inverse
    # DCT of the sent entries (write 1), momentum less what was sent (read 2, write 1), decode (write 1)
    passes = 11.0
    clip_at = "worker"  # bloc97/DeMo clips each worker's raw gradient before the step, never the signed update
    has_own_memory = True

    def __init__(self, chunk: int = 64, topk: int = 32, decay: float = 0.999, sign: bool = True):
        super().__init__()
        self.chunk = check_int("demo", "chunk", chunk, 1, MAX_CHUNK)
        self.topk = check_int("demo", "topk", topk, 1, self.chunk * self.chunk)
        self.decay = check_float("demo", "decay", decay, 0.0, 1.0, lo_open=False, hi_open=True)
        self.sign = check_bool("demo", "sign", sign)
        self.params = {"chunk": chunk, "topk": topk, "decay": decay, "sign": sign}
        self._bases: dict[tuple[int, str], Tensor] = {}

    # ----- the transform ----------------------------------------------------------------------------------
    def blocks(self, shape: torch.Size) -> Blocks:
        return Blocks(torch.Size(shape), self.chunk, self.topk)

    def _basis(self, n: int, device: torch.device) -> Tensor:
        key = (n, str(device))
        d = self._bases.get(key)
        if d is None:
            d = self._bases[key] = dct_matrix(n, device)
        return d

    def _bases_of(self, bl: Blocks, device: torch.device) -> tuple[Tensor, Tensor]:
        return self._basis(bl.c1, device), self._basis(bl.c2, device)

    def index_dtype(self, bl: Blocks) -> torch.dtype:
        return torch.int16 if bl.size <= 32768 else torch.int32

    # ----- compressor API ---------------------------------------------------------------------------------
    def _encode(self, x: Tensor, name: str, state: State, shape: torch.Size) -> tuple[list[Tensor], dict[str, Any]]:
        bl = self.blocks(shape)
        if x.numel() == 0:
            return [torch.empty(0, dtype=self.index_dtype(bl), device=x.device),
                    torch.empty(0, dtype=torch.float32, device=x.device)], {}
        slot = state[name]
        m = slot.get("demo.m")
        if m is None or m.shape != x.shape or m.device != x.device:
            m = torch.zeros_like(x)
        m.mul_(self.decay).add_(x)  # 1.
        d1, d2 = self._bases_of(bl, x.device)
        y = bl.to_coeffs(m, d1, d2)
        idx = y.abs().topk(bl.k, dim=1).indices.sort(dim=1).values  # 2. ascending within each block
        vals = y.gather(1, idx)
        q = torch.zeros_like(y).scatter_(1, idx, vals)
        m.sub_(bl.from_coeffs(q, d1, d2))  # 3.
        slot["demo.m"] = m
        return [idx.reshape(-1).to(self.index_dtype(bl)), vals.reshape(-1)], {}

    def _coeffs(self, bl: Blocks, idx: Tensor, vals: Tensor) -> Tensor:
        y = torch.zeros((bl.count, bl.size), dtype=torch.float32, device=vals.device)
        return y.scatter_(1, idx.long().view(bl.count, bl.k), vals.view(bl.count, bl.k))

    def decode(self, payload: Payload) -> Tensor:
        """One worker's q_t in the parameter domain (inverse DCT of its kept coefficients; no sign)."""
        idx, vals = payload.parts
        bl = self.blocks(payload.shape)
        if bl.count == 0:
            return torch.zeros(0, dtype=torch.float32, device=vals.device)
        return bl.from_coeffs(self._coeffs(bl, idx, vals), *self._bases_of(bl, vals.device))

    def _subtract_decoded(self, payload: Payload, acc: Tensor) -> None:
        acc -= self.decode(payload)

    def aggregate(self, tensor: Tensor, coll: Collective, name: str = "", state: State | None = None) -> Tensor:
        """Steps 1-4 and the sign of step 5: sign(Q_t) (or Q_t with ``sign=False``), Q_t the inverse DCT of
        each coefficient averaged over the ranks that sent it, summed in rank order."""
        payload = self.compress(tensor, name, state)
        bl = self.blocks(payload.shape)
        idx, vals = payload.parts
        if bl.count == 0:
            return torch.zeros(payload.shape, dtype=payload.dtype, device=vals.device)
        idx_all, vals_all = coll.all_gather(idx), coll.all_gather(vals)
        total = torch.zeros((bl.count, bl.size), dtype=torch.float32, device=vals.device)
        senders = torch.zeros_like(total)
        ones = torch.ones((bl.count, bl.k), dtype=torch.float32, device=vals.device)
        for r in range(coll.world_size):
            i = idx_all[r].to(vals.device).long().view(bl.count, bl.k)
            total.scatter_add_(1, i, vals_all[r].to(vals.device).view(bl.count, bl.k))
            senders.scatter_add_(1, i, ones)
        q = bl.from_coeffs(total / senders.clamp_min_(1.0), *self._bases_of(bl, vals.device))  # 4.
        if self.sign:
            q = q.sign()  # 5. (the step itself: the run's optimiser)
        return q.to(payload.dtype).view(payload.shape)

    def momentum(self, state: State | None, name: str = "") -> Tensor | None:
        """This worker's momentum m for ``name`` (flat fp32), or None before the first step."""
        return self._state(state)[name].get("demo.m")


register("demo", family="demo", whole_method=True, configurable_ef=False,
         doc="DeMo: DCT + top-k of decoupled local momentum, signum of the all-gathered average")(DeMo)
