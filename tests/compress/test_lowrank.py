"""PowerSGD: numerically the same as torch's powerSGD_hook (run for real in a 1-process gloo group, one tensor
per bucket), and the multi-rank rounds (P summed, Q averaged) against torch's documented steps."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
import torch

from lowbw.compress import State, make
from lowbw.compress.lowrank import orthogonalize
from tests.compress.test_aggregate import run_ranks

# Runs torch's own hook: a 1-process gloo group, a duck-typed GradBucket per tensor (bucket i = tensor i).
TORCH_REFERENCE = textwrap.dedent(
    """
    import sys, torch, torch.distributed as dist
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as ph
    cfgs = torch.load(sys.argv[1])
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)

    class Bucket:
        def __init__(self, t, i, n):
            self.t, self.i, self.n = t, i, n
        def buffer(self):
            return self.t.view(-1)
        def gradients(self):
            return [self.t]
        def index(self):
            return self.i
        def is_last(self):
            return self.i == self.n - 1

    results = []
    for cfg in cfgs:
        state = ph.PowerSGDState(None, matrix_approximation_rank=cfg["rank"], start_powerSGD_iter=cfg["start"],
                                 warm_start=cfg["warm"], use_error_feedback=True, random_seed=cfg["seed"])
        outs = []
        for step in cfg["steps"]:
            outs.append([ph.powerSGD_hook(state, Bucket(g.clone(), i, len(step))).wait().view(g.shape).clone()
                         for i, g in enumerate(step)])
        results.append(outs)
    torch.save(results, sys.argv[2])
    dist.destroy_process_group()
    """
)

SHAPES = [(20, 30), (20,), (8, 4, 3, 3), (5, 5)]  # (5, 5): too small to be worth compressing at rank 1


def _steps(nsteps: int, seed: int = 0) -> list[list[torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    return [[torch.randn(s, generator=g) for s in SHAPES] for _ in range(nsteps)]


CONFIGS = [(1, True), (3, True), (2, False)]  # rank 3: torch's QR path; no warm start: a new Q every step


@pytest.fixture(scope="module")
def torch_hook_outputs(tmp_path_factory):
    """torch's powerSGD_hook outputs for every config, from one subprocess (its own gloo group)."""
    d = tmp_path_factory.mktemp("powersgd")
    steps = _steps(5)
    cfgs = [{"rank": r, "start": 2, "warm": w, "seed": 3, "steps": steps} for r, w in CONFIGS]
    torch.save(cfgs, d / "in.pt")
    subprocess.run([sys.executable, "-c", TORCH_REFERENCE, str(d / "in.pt"), str(d / "out.pt")],
                   check=True, timeout=300)
    return steps, torch.load(d / "out.pt")


@pytest.mark.parametrize("config", range(len(CONFIGS)))
def test_matches_torch_powersgd_hook(torch_hook_outputs, config):
    rank, warm = CONFIGS[config]
    steps, outs = torch_hook_outputs
    ref = outs[config]
    comp = make("powersgd", rank=rank, start_iter=2, warm_start=warm, seed=3)
    agg_state, cmp_state = State(), State()
    for s, step in enumerate(steps):
        for i, g in enumerate(step):
            (ours,), _ = run_ranks(1, lambda coll, g=g, i=i: comp.aggregate(g, coll, f"t{i}", agg_state))
            torch.testing.assert_close(ours, ref[s][i], rtol=1e-5, atol=1e-5, msg=f"step {s} tensor {i}")
            # the one-worker compress/decompress path is the same computation
            mine = comp.decompress(comp.compress(g, f"t{i}", cmp_state))
            torch.testing.assert_close(mine, ref[s][i], rtol=1e-5, atol=1e-5)


def _torch_rounds(mats: list[torch.Tensor], q: torch.Tensor) -> torch.Tensor:
    """torch's documented steps 3.2-3.7 for N workers sharing Q."""
    from torch.distributed.algorithms.ddp_comm_hooks.powerSGD_hook import _orthogonalize

    q = q.clone().unsqueeze(0)
    _orthogonalize(q)
    p = sum(m @ q[0] for m in mats).unsqueeze(0)
    _orthogonalize(p)
    qs = sum(m.t() @ p[0] for m in mats) / len(mats)
    return p[0] @ qs.t()


@pytest.mark.parametrize("rank", [1, 4])
def test_multi_rank_rounds_match_torch_steps(rank):
    world = 3
    mats = [torch.randn(40, 30, generator=torch.Generator().manual_seed(r)) for r in range(world)]
    comp = make("powersgd", rank=rank, seed=5)
    results, group = run_ranks(world, lambda coll: comp.aggregate(mats[coll.rank], coll, "w", State()))
    # every rank draws the same first Q (same seed, same draw order)
    import numpy as np

    g = torch.Generator().manual_seed(int(np.random.RandomState(5).randint(1_000_000_000)))
    q0 = torch.randn(30, rank, generator=g)
    ref = _torch_rounds(mats, q0)
    for r in results:
        torch.testing.assert_close(r, ref, rtol=1e-5, atol=1e-5)
    assert [c.op for c in group.colls[0].calls] == ["all_reduce", "all_reduce"]
    assert [c.nbytes for c in group.colls[0].calls] == [4 * 40 * rank, 4 * 30 * rank]


def test_error_feedback_and_uncompressed_tensors():
    comp = make("powersgd", rank=1)
    st_ = State()
    x = torch.randn(30, 40)
    y = comp.decompress(comp.compress(x, "w", st_))
    torch.testing.assert_close(y + st_["w"]["powersgd.err"].view(30, 40), x)
    b = torch.randn(7)
    p = comp.compress(b, "b", st_)
    assert p.meta["mode"] == "raw" and torch.equal(comp.decompress(p), b)
    p = comp.compress(x, "w", st_)
    assert p.meta["mode"] == "lowrank" and p.data_nbytes == 4 * (30 + 40)


def test_orthogonalize_gram_schmidt_and_qr():
    for r in (1, 2, 5):
        m = torch.randn(20, r)
        orthogonalize(m)
        torch.testing.assert_close(m.t() @ m, torch.eye(r), rtol=1e-5, atol=1e-5)
