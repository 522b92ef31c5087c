"""Writes ``sparseloco_authors.pt``: reference outputs of the SparseLoCo team's own code (tplr-y/CCLoco at 5bfce52,
``src/tplr/ccloco.py``'s ``CCLoco`` optimizer) on fixed inputs, for ``tests/compress/test_loco.py``.

Nothing of their code is kept here: this script imports it from a checkout given on the command line and calls
``CCLoco.step`` unchanged, two workers as two threads whose all-gather is a shared list (the one change: the
optimizer's ``_all_gather_tensor``, which calls torch.distributed, is replaced by that list exchange).

    git clone https://github.com/tplr-y/CCLoco && git -C CCLoco checkout 5bfce52
    pip install --target /tmp/einops einops          # their code imports einops; lowbw does not
    D=tests/compress/data
    PYTHONPATH=/tmp/einops:CCLoco/src python $D/make_sparseloco_authors.py $D/sparseloco_authors.pt

Settings: 2-bit values (``use_quantization``, ``quantization_bins=4``, ``quantization_range=6``), ``top_k=32`` of
64 x 64 tiles (``chunk_size=64``, ``chunk_strat=square``, ``oned_chunk_strat=rate_2d`` as their ``train.py``
defaults), ``error_decay=0.95``, outer SGD with lr 1 and no momentum, so that each step's gradient is the
pseudo-gradient added to the error buffer and the aggregate lands in ``p.grad``. Shapes: 2-D tensors whose sides
are and are not multiples of 64, 1-D tensors of 100 and 4100 values (sizes distinct across 1-D and 2-D:
the authors key their chunk sizes by dimension size).
"""

from __future__ import annotations

import sys
import threading

import torch
from tplr.ccloco import CCLoco  # the authors' module (see the docstring)

SHAPES = [(64, 128), (96, 120), (100,), (4100,)]
WORKERS, STEPS = 2, 3


def inputs(worker: int, step: int) -> list[torch.Tensor]:
    """Worker ``worker``'s pseudo-gradients at ``step`` (the test draws the same)."""
    g = torch.Generator().manual_seed(1000 * worker + step)
    return [torch.randn(s, generator=g) * torch.logspace(-2, 0, int(torch.tensor(s).prod())).view(s)
            for s in SHAPES]


def main(out: str) -> None:
    slots: list = [None] * WORKERS
    barrier = threading.Barrier(WORKERS)
    result: dict = {}

    def gather(rank: int, t: torch.Tensor) -> list[torch.Tensor]:
        slots[rank] = t.clone()
        barrier.wait()
        got = [s.clone() for s in slots]
        barrier.wait()
        return got

    def worker(rank: int) -> None:
        params = [torch.nn.Parameter(torch.zeros(s)) for s in SHAPES]
        opt = CCLoco(params, lr=1.0, error_decay=0.95, top_k=32, chunk_size=64, momentum=0.0,
                     chunk_strat="square", oned_chunk_strat="rate_2d", use_quantization=True,
                     quantization_bins=4, quantization_range=6)
        opt._all_gather_tensor = lambda t: gather(rank, t)
        for step in range(STEPS):
            for p, x in zip(params, inputs(rank, step)):
                p.grad = x.clone()
            opt.step()
            if rank == 0:  # the same on every worker
                result[("aggregate", step)] = [p.grad.to_sparse() for p in params]
        result[("error", rank)] = [opt.state[p]["error_buffer"].clone() for p in params]  # after the last step

    threads = [threading.Thread(target=worker, args=(r,)) for r in range(WORKERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    torch.save({"shapes": SHAPES, "steps": STEPS, "workers": WORKERS,
                "outputs": result, "source": "tplr-y/CCLoco@5bfce52 src/tplr/ccloco.py CCLoco.step"}, out)


if __name__ == "__main__":
    main(sys.argv[1])
