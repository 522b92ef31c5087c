"""Compressed aggregation: the average over ranks of what each rank's compressed tensor decompresses to.

The communication pattern lives in the compressor (``Compressor.aggregate``, written against the
``Collective`` protocol): summable payloads (none, fp16, bf16, random-k with a shared seed, PowerSGD's
factors...) go through the collective's all-reduce and are decompressed once; the others are
all-gathered (variable sizes, empty parts allowed) and decompressed-and-summed in rank order; AR-Top-k
broadcasts the leader's indices and all-reduces the values there. This module only picks the
compressor and the collective:

* a real group: ``aggregate(t, "topk", DistCollective("ring"), name="layer1.weight", state=st)``;
* the sim backend: the same call with each thread's ``ThreadCollective`` — bit-identical results.
"""

from __future__ import annotations

from collections.abc import Mapping

from torch import Tensor

from lowbw.compress.registry import make

__all__ = ["aggregate", "aggregate_many", "resolve"]


def resolve(compressor, **params):
    """A compressor object from a name (``lowbw.compress.make``), ``None`` (= "none") or an object."""
    if compressor is None:
        compressor = "none"
    if isinstance(compressor, str):
        return make(compressor, **params)
    if params:
        raise ValueError(f"parameters {sorted(params)} given with a compressor object; pass them to make()")
    return compressor


def aggregate(tensor: Tensor, compressor, coll, name: str = "", state=None) -> Tensor:
    """Average over ``coll``'s ranks of ``tensor`` sent through ``compressor`` (same shape and dtype).

    ``compressor``: a ``lowbw.compress`` compressor, a registered name, or None (uncompressed fp32 mean).
    ``state``: this rank's ``lowbw.compress.State`` (error-feedback residuals etc., keyed by ``name``).
    """
    return resolve(compressor).aggregate(tensor, coll, name, state)


def aggregate_many(tensors: Mapping[str, Tensor], compressor, coll, state=None) -> dict[str, Tensor]:
    """:func:`aggregate` for each named tensor, in the mapping's order (which must agree across ranks)."""
    comp = resolve(compressor)
    return {name: comp.aggregate(t, coll, name, state) for name, t in tensors.items()}
