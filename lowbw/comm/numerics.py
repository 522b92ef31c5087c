"""Reduction arithmetic shared by every algorithm (how a tensor is cut: :mod:`lowbw.collective.partition`).

Half precision (documented contract, identical for DistCollective and ThreadCollective):

* fp16/bf16 tensors travel in their own dtype (bytes on the wire = the tensor's bytes);
* every reduction step widens both operands to fp32, combines in fp32 and rounds to the input dtype once
  (round-to-nearest-even) when the partial result is stored or leaves the rank;
* a rank that combines several contributions at once (ps root, alltoall, roundrobin master, tree node,
  allgather) accumulates all of them in fp32 and rounds once;
* ``avg`` divides the complete fp32 sum by N before that final rounding.

Other dtypes are reduced in their own dtype. Reduction order is fixed per algorithm (never by arrival
time), so results are deterministic and equal across the two transports.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.distributed as dist
from torch import Tensor

__all__ = ["OPS", "Reducer", "normalize_op"]

OPS = ("sum", "avg", "prod", "max", "min")
_ALIASES = {"mean": "avg", "product": "prod"}
_HALF = (torch.float16, torch.bfloat16)


def normalize_op(op) -> str:
    """'sum' | 'avg' | 'prod' | 'max' | 'min' from a string or a ``torch.distributed.ReduceOp``."""
    if isinstance(op, str):
        name = _ALIASES.get(op.lower(), op.lower())
    else:
        ro = dist.ReduceOp
        table = {ro.SUM: "sum", ro.PRODUCT: "prod", ro.MAX: "max", ro.MIN: "min"}
        if hasattr(ro, "AVG"):
            table[ro.AVG] = "avg"
        name = table.get(op)
    if name not in OPS:
        raise ValueError(f"op={op!r} is not supported; allowed: {', '.join(OPS)}")
    return name


class Reducer:
    """Elementwise reduction ``op`` for tensors of ``dtype`` over ``world_size`` ranks."""

    def __init__(self, op: str, dtype: torch.dtype, world_size: int) -> None:
        self.op = normalize_op(op)
        self.dtype = dtype
        self.world_size = world_size
        self.widen = dtype in _HALF
        self.acc_dtype = torch.float32 if self.widen else dtype
        if dtype == torch.bool:
            raise ValueError("bool tensors cannot be all-reduced; use uint8")
        if self.op == "avg" and not (dtype.is_floating_point or dtype.is_complex):
            raise ValueError(f"op='avg' needs a floating-point tensor, got dtype={dtype}")

    def _apply(self, acc: Tensor, x: Tensor) -> None:
        self._apply_into(acc, acc, x)

    def _apply_into(self, out: Tensor, a: Tensor, x: Tensor) -> None:
        """``out <- a (op) x`` (``out`` may be ``a`` or ``x``)."""
        if self.op in ("sum", "avg"):
            torch.add(a, x, out=out)
        elif self.op == "prod":
            torch.mul(a, x, out=out)
        elif self.op == "max":
            torch.maximum(a, x, out=out)
        else:
            torch.minimum(a, x, out=out)

    def _final(self, acc: Tensor) -> None:
        if self.op == "avg":
            acc.div_(self.world_size)

    # -- pairwise (partial sums travel) ------------------------------------------------------------------
    def combine(self, dst: Tensor, src: Tensor, last: bool = False) -> None:
        """``dst <- dst (op) src`` with one rounding; ``last``: the result is complete (apply avg)."""
        if self.widen:
            acc = dst.to(torch.float32)
            self._apply(acc, src.to(torch.float32))
            if last:
                self._final(acc)
            dst.copy_(acc)
        else:
            self._apply(dst, src)
            if last:
                self._final(dst)

    def finish(self, dst: Tensor) -> None:
        """A complete result that had nothing to combine (world size 1)."""
        if self.op == "avg":
            self.combine_many(dst, [])

    # -- many at once (fp32 accumulator, one rounding) ---------------------------------------------------
    def combine_many(self, dst: Tensor, parts: list[Tensor], last: bool = True) -> None:
        """``dst <- ((dst op p0) op p1) ...`` in the accumulator dtype, rounded once into ``dst``."""
        if self.widen:
            acc = dst.to(torch.float32)
            for p in parts:
                self._apply(acc, p.to(torch.float32))
            if last:
                self._final(acc)
            dst.copy_(acc)
        else:
            for p in parts:
                self._apply(dst, p)
            if last:
                self._final(dst)

    def reduce_ordered(self, dst: Tensor, parts: Sequence[Tensor | None], last: bool = True) -> None:
        """``dst <- ((p_0 op p_1) op p_2) ...`` in exactly this order, in the accumulator dtype, rounded once.

        At most one entry may be ``None``: ``dst``'s own current value, in that position (a rank's own
        contribution among the received ones). Without widening no copy is made (at 1 Gbit/s a copy of M
        bytes on 2 cores is ~1% of the transfer, on the critical path): the entries before the own one are
        combined in place in ``p_0``, which is therefore overwritten (pass scratch buffers).
        """
        own = next((i for i, p in enumerate(parts) if p is None), None)
        if self.widen:
            acc = self.accumulator(dst if own == 0 else parts[0])
            for i in range(1, len(parts)):
                self.add_to(acc, dst if i == own else parts[i])
            self.store(dst, acc, last)
            return
        if own is None:
            dst.copy_(parts[0])
            own = 0
        elif own > 0:
            acc = parts[0]
            for i in range(1, own):
                self._apply(acc, parts[i])
            self._apply_into(dst, acc, dst)
        for i in range(own + 1, len(parts)):
            self._apply(dst, parts[i])
        if last:
            self._final(dst)

    def accumulator(self, x: Tensor) -> Tensor:
        """A fresh accumulator holding ``x`` (fp32 copy for half types, a copy otherwise)."""
        return x.to(self.acc_dtype, copy=True)

    def add_to(self, acc: Tensor, x: Tensor) -> None:
        """``acc <- acc (op) x`` in the accumulator dtype (no rounding)."""
        self._apply(acc, x.to(self.acc_dtype) if self.widen else x)

    def store(self, dst: Tensor, acc: Tensor, last: bool) -> None:
        """Round ``acc`` into ``dst`` (after applying avg if ``last``)."""
        if last:
            self._final(acc)
        dst.copy_(acc)
