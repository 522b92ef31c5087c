"""Any lowbw compressor as a PyTorch DDP communication hook.

>>> state, hook = make_hook("topk", ratio=0.01)         # error feedback as the compressor defines it
>>> ddp_model.register_comm_hook(state, hook)           # doctest: +SKIP

The hook aggregates each gradient bucket with ``compressor.aggregate`` over a
:class:`~lowbw.comm.DistCollective` (all-reduce for summable payloads, all-gather otherwise; our
collectives or ``native``), and returns the *averaged* bucket as DDP expects. Compressor state (error
feedback residuals, momentum, PowerSGD factors) is kept per bucket under the name ``"bucket<index>"``;
when DDP rebuilds its buckets after the first iteration a bucket whose size changed starts afresh.
The state object also counts bytes (``state.meter``) and keeps the collective's ``CallRecord`` list.
"""

# No ``from __future__ import annotations`` here: DDP's register_comm_hook inspects the hook's return
# annotation and accepts only the evaluated ``torch.futures.Future[torch.Tensor]`` (a string is rejected).
from dataclasses import dataclass, field

import torch

from lowbw.comm.aggregate import resolve
from lowbw.comm.meter import Meter

__all__ = ["HookState", "make_hook", "compressor_hook", "lowbw_hook"]


@dataclass
class HookState:
    """What the hook needs; pass it to ``register_comm_hook`` together with the hook."""

    compressor: object
    algorithm: str = "native"
    group: object = None
    timeout: float | None = None
    chunk_bytes: int | None = None
    meter: Meter = field(default_factory=Meter)
    cstate: object = None  # lowbw.compress.State of this worker
    coll: object = None  # DistCollective, made on first use (the process group exists by then)
    iteration: int = 0
    sizes: dict = field(default_factory=dict)  # bucket index -> numel last seen

    def collective(self):
        if self.coll is None:
            from lowbw.comm.distributed import DistCollective

            self.coll = DistCollective(self.algorithm, self.group, self.meter, self.timeout, self.chunk_bytes)
        return self.coll

    def bucket_name(self, bucket) -> str:
        idx, n = bucket.index(), bucket.buffer().numel()
        if self.sizes.get(idx, n) != n and self.cstate is not None:
            self.cstate.reset(f"bucket{idx}")  # DDP rebuilt its buckets: this one holds other parameters now
        self.sizes[idx] = n
        return f"bucket{idx}"


def lowbw_hook(state: HookState, bucket) -> torch.futures.Future[torch.Tensor]:
    """DDP communication hook: the bucket averaged over ranks through ``state.compressor``."""
    buf = bucket.buffer()
    name = state.bucket_name(bucket)
    out = state.compressor.aggregate(buf, state.collective(), name, state.cstate)
    if bucket.is_last():
        state.iteration += 1
    fut: torch.futures.Future = torch.futures.Future()
    fut.set_result(out.to(buf.dtype).view_as(buf))
    return fut


def make_hook(compressor="none", algorithm: str = "native", group=None, timeout=None, chunk_bytes=None,
              seed: int | None = None, **params):
    """``(state, hook)`` for ``ddp_model.register_comm_hook(state, hook)``.

    ``compressor``: a ``lowbw.compress`` compressor or a registered name (with ``**params`` for ``make``).
    ``algorithm``: the all-reduce under summable payloads (``lowbw.comm.ALGORITHMS``; all-gathers are
    ring all-gathers except under ``native``). ``seed``: seeds this worker's compressor State (give each
    rank its own for stochastic compressors, e.g. ``base + rank``).
    """
    from lowbw.comm.collectives import ALGORITHMS, _check_algorithm

    _check_algorithm(algorithm, ALGORITHMS)
    comp = resolve(compressor, **params)
    from lowbw.compress.base import State

    st = HookState(comp, algorithm, group, timeout, chunk_bytes, cstate=State(seed))
    return st, lowbw_hook


compressor_hook = make_hook
