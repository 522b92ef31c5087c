"""The random streams of the dropout masks: one per worker, seeded by (seed, worker), on every backend.

torch's dropout (:class:`torch.nn.Dropout`, the attention dropout of
:func:`torch.nn.functional.scaled_dot_product_attention`) draws its masks from the device's *default*
generator and takes no generator argument. One process that holds all M replicas (``backend: sim``) would
then draw worker 1's masks after worker 0's from one stream, and M processes (``procs``), each seeded alike,
would draw the same masks on every worker: neither is the other, and the second is not data-parallel
training. So each worker's masks come from a stream of its own:

1. worker ``w``'s stream starts as a generator on the run's device seeded with ``seed_for(seed, "dropout", w)``;
2. around a replica's forward pass (:meth:`MaskStreams.drawing`) the device's default generator takes that
   stream's state, and afterwards hands the advanced state back and gets its own state back, so the
   default generator, and whatever else draws from it, never sees a dropout draw;
3. the backward pass draws nothing (dropout's backward reuses the forward's mask; the fused CUDA attention
   kernels keep the Philox seed and offset of their forward), so only the forward pass is wrapped.

A worker's replica draws the same masks in the same order whichever process holds it, so sim (engine
``loop``) and procs stay bit-identical with dropout. A run without dropout has no streams (``None``): its
default generator is drawn from exactly as before.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch

from lowbw.train.assign import seed_for

__all__ = ["MaskStreams"]


def _default_generator(device: torch.device) -> torch.Generator:
    """The generator torch's dropout draws from on ``device``."""
    if device.type == "cuda":
        return torch.cuda.default_generators[device.index if device.index is not None else torch.cuda.current_device()]
    return torch.default_generator


class MaskStreams:
    """The dropout streams of the replicas one process holds (replica ``i`` is worker ``ranks[i]``)."""

    def __init__(self, seed: int, ranks: list[int], device: torch.device | str):
        self.device = torch.device(device)
        # one generator per replica on the run's device (CPU masks: Mersenne Twister; CUDA: Philox)
        self.gens = [torch.Generator(device=self.device).manual_seed(seed_for(seed, "dropout", w)) for w in ranks]

    @contextmanager
    def drawing(self, i: int) -> Iterator[None]:
        """Replica ``i``'s forward pass draws its masks from its own stream (steps 2-3 of the module docstring)."""
        default, own = _default_generator(self.device), self.gens[i]
        saved = default.get_state()
        default.set_state(own.get_state())
        try:
            yield
        finally:
            own.set_state(default.get_state())
            default.set_state(saved)

    def state_dict(self) -> list[torch.Tensor]:
        return [g.get_state() for g in self.gens]

    def load_state_dict(self, states: list[torch.Tensor]) -> None:
        for g, s in zip(self.gens, states, strict=True):
            g.set_state(s)
