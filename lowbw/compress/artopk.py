"""All-reduce-friendly top-k (ARTopk; Tyagi & Swany 2023): one leader's top-k indices for everyone.

Per step and tensor: the leader is chosen round-robin (``mode="star"``: leader = step mod N) or as the rank
whose (error-corrected) gradient has the largest variance (``mode="var"``: one all-gather of N floats; ties go
to the lowest rank). The leader's top-k indices are broadcast (the count first, then the indices), every rank
all-reduces its values at those indices, and the sum is divided by N. Error feedback keeps what each rank
did not send. One step moves ``8 + 4k`` bytes by broadcast and ``4k`` bytes by all-reduce per rank.

``compress``/``decompress`` are the one-worker view: the local top-k with error feedback.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from lowbw.compress.base import State
from lowbw.compress.checks import check_bool, check_choice, check_float
from lowbw.compress.protocol import Collective
from lowbw.compress.registry import register
from lowbw.compress.sparsify import Sparse, index_dtype, topk_count, topk_indices

__all__ = ["ARTopK", "choose_leader"]


def choose_leader(mode: str, step: int, world_size: int, variances: list[float] | None = None) -> int:
    """The leader rank: ``step mod N`` for ``star``; the largest variance (lowest rank on ties) for ``var``."""
    if mode == "star":
        return step % world_size
    if variances is None or len(variances) != world_size:
        raise ValueError("mode='var' needs one variance per rank")
    best = 0
    for r, v in enumerate(variances):
        if v > variances[best]:
            best = r
    return best


class ARTopK(Sparse):
    """ARTopk with ``ratio`` (k = ceil(ratio n)), ``mode`` star | var, error feedback (on by default)."""

    name = "artopk"
    # its residual (read 2, write 1), the selection (read 1, mask 0.25), the new residual (read 1, write 1),
    # decode into zeros (write 1)
    passes = 7.25
    summable = True  # aggregates with broadcast + all-reduce, never all-gather of payloads
    has_own_memory = True

    def __init__(self, ratio: float = 0.01, mode: str = "star", error_feedback: bool = True):
        super().__init__()
        self.ratio = check_float("artopk", "ratio", ratio, 0.0, 1.0)
        self.mode = check_choice("artopk", "mode", mode, ("star", "var"))
        self.error_feedback = check_bool("artopk", "error_feedback", error_feedback)
        self.params = {"ratio": ratio, "mode": mode, "error_feedback": error_feedback}

    def _corrected(self, x: Tensor, slot: dict[str, Any]) -> Tensor:
        r = slot.get("artopk.residual") if self.error_feedback else None
        if r is not None and r.shape == x.shape and r.device == x.device:
            return r.add_(x)
        return x.clone()

    def _keep_residual(self, corrected: Tensor, idx: Tensor, slot: dict[str, Any]) -> None:
        if self.error_feedback:
            slot["artopk.residual"] = corrected.index_fill_(0, idx.long(), 0.0)

    def _encode(self, x: Tensor, name: str, state: State, shape: torch.Size) -> tuple[list[Tensor], dict[str, Any]]:
        slot = state[name]
        corrected = self._corrected(x, slot)
        idx = topk_indices(corrected, topk_count(self.ratio, x.numel())).sort().values
        parts = self._pack(corrected, idx)
        self._keep_residual(corrected, idx, slot)
        return parts, {}

    def aggregate(self, tensor: Tensor, coll: Collective, name: str = "", state: State | None = None) -> Tensor:
        x = self._prepare(tensor)
        slot = self._state(state)[name]
        step = slot.get("artopk.step", 0)
        slot["artopk.step"] = step + 1
        n, world = x.numel(), coll.world_size
        corrected = self._corrected(x, slot)
        variances = None
        if self.mode == "var":
            var = corrected.var() if n > 1 else torch.zeros((), device=x.device)
            variances = [float(v) for v in coll.all_gather(var.reshape(1).float())]
        leader = choose_leader(self.mode, step, world, variances)
        idx_dtype = index_dtype(n)
        if coll.rank == leader:
            idx = topk_indices(corrected, topk_count(self.ratio, n)).sort().values.to(idx_dtype)
            count = torch.tensor([idx.numel()], dtype=torch.int64, device=x.device)
        else:
            idx, count = None, torch.zeros(1, dtype=torch.int64, device=x.device)
        count = coll.broadcast(count, src=leader)
        if idx is None:
            idx = torch.zeros(int(count.item()), dtype=idx_dtype, device=x.device)
        idx = coll.broadcast(idx, src=leader)
        vals = corrected[idx.long()]
        summed = coll.all_reduce(vals)
        self._keep_residual(corrected, idx, slot)
        out = torch.zeros(n, dtype=torch.float32, device=x.device)
        if summed.numel():
            out.index_add_(0, idx, summed, alpha=1.0 / world)
        return out.to(tensor.dtype).view(tensor.shape)


register("artopk", family="sparsify", configurable_ef=False, bench=({"ratio": 0.01},), adaptive_density=True,
         doc="all-reduce top-k: leader's indices (star | var), values all-reduced, error feedback")(ARTopK)
