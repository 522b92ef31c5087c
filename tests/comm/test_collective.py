"""DistCollective / ThreadCollective implement the Collective protocol (all_reduce, variable all_gather,
broadcast), record their calls, and give the same bits in threads as in gloo processes."""

from __future__ import annotations

import pytest
import torch

import lowbw.comm as comm
from lowbw.comm import ThreadCollective, run_threads
from lowbw.comm.testing import run_procs
from lowbw.compress.protocol import CallRecord, Collective

GROUPS = [[0, 1, 2], [0], [1, 2]]


def _payload(grank: int, case: str) -> torch.Tensor:
    g = torch.Generator().manual_seed(7 * grank + len(case))
    if case == "var":  # 1-D, different sizes, one empty
        return torch.randn([5, 0, 13, 2][grank % 4], generator=g)
    if case == "empty":  # every rank empty: must not hang
        return torch.empty(0)
    if case == "shaped":  # different 2-D shapes, fp16
        return torch.randn(grank + 1, 3, generator=g).half()
    if case == "idx":  # int64 indices
        return torch.arange(grank * 4, dtype=torch.int64)
    raise KeyError(case)


CASES = ("var", "empty", "shaped", "idx")


def _exercise(coll, grank: int) -> dict:
    out = {}
    x = torch.randn(37, generator=torch.Generator().manual_seed(grank)) * (grank + 1)
    x0 = x.clone()
    out["ar"] = coll.all_reduce(x)
    assert torch.equal(x, x0)  # input untouched
    out["ar_half"] = coll.all_reduce(x.to(torch.bfloat16))
    for case in CASES:
        out["ag_" + case] = coll.all_gather(_payload(grank, case))
    for src in range(coll.world_size):
        t = torch.full((11,), float(grank)) if grank == src else torch.zeros(11)
        out[f"bc{src}"] = coll.broadcast(t, src)
        out[f"bc_empty{src}"] = coll.broadcast(torch.empty(0), src)
    coll.barrier()
    out["calls"] = [(c.op, c.nbytes, c.algorithm, c.world_size) for c in coll.calls]
    return out


def _worker(rank, world_size):
    import torch.distributed as dist

    from lowbw.comm import DistCollective

    groups = [dist.new_group(g) for g in GROUPS]
    res = {}
    for gi, ranks in enumerate(GROUPS):
        if rank not in ranks:
            continue
        for alg in comm.ALGORITHMS:
            coll = DistCollective(alg, group=groups[gi], timeout=30, chunk_bytes=24)
            assert isinstance(coll, Collective)
            res[(gi, alg)] = _exercise(coll, ranks.index(rank))
    return res


@pytest.fixture(scope="module")
def procs():
    return run_procs(_worker, 3, timeout=180)


def _threads(alg: str, k: int) -> list[dict]:
    colls = ThreadCollective.group(k, alg, chunk_bytes=24, timeout=30)
    assert all(isinstance(c, Collective) for c in colls)
    return run_threads(lambda r, c: _exercise(c, r), colls)


def _check(outs: list[dict], alg: str) -> None:
    k = len(outs)
    xs = [torch.randn(37, generator=torch.Generator().manual_seed(g)) * (g + 1) for g in range(k)]
    for o in outs:
        torch.testing.assert_close(o["ar"], sum(xs), rtol=1e-5, atol=1e-5)
        assert o["ar_half"].dtype == torch.bfloat16
        for case in CASES:
            got = o["ag_" + case]
            assert len(got) == k
            for j in range(k):
                want = _payload(j, case)
                assert got[j].dtype == want.dtype and got[j].shape == want.shape, (alg, case, j)
                assert torch.equal(got[j], want)
        for src in range(k):
            assert torch.equal(o[f"bc{src}"], torch.full((11,), float(src)))
            assert o[f"bc_empty{src}"].numel() == 0
        ops = [c[0] for c in o["calls"]]
        assert ops == ["all_reduce"] * 2 + ["all_gather"] * len(CASES) + ["broadcast"] * (2 * k)
        assert o["calls"][0] == ("all_reduce", 37 * 4, alg, k)
        bc = comm.BROADCAST_FOR[alg]
        assert {c[2] for c in o["calls"] if c[0] == "broadcast"} == {bc}
        assert {c[2] for c in o["calls"] if c[0] == "all_gather"} == {"native" if alg == "native" else "ring"}


def test_dist_collective(procs):
    for gi, ranks in enumerate(GROUPS):
        for alg in comm.ALGORITHMS:
            _check([procs[r][(gi, alg)] for r in ranks], alg)


def test_thread_collective():
    for alg in comm.ALGORITHMS:
        for k in (1, 2, 3, 4):
            _check(_threads(alg, k), alg)


def test_threads_equal_processes_bitwise(procs):
    for gi, ranks in enumerate(GROUPS):
        for alg in comm.ALGORITHMS:
            if alg == "native":
                continue
            th = _threads(alg, len(ranks))
            for g, r in enumerate(ranks):
                for key in ("ar", "ar_half"):
                    assert torch.equal(th[g][key], procs[r][(gi, alg)][key]), (gi, alg, key)


def test_callrecord_is_the_protocols():
    c = ThreadCollective.group(1)[0]
    c.all_reduce(torch.ones(2))
    c.all_gather(torch.ones(3, dtype=torch.float16))
    assert all(isinstance(x, CallRecord) for x in c.calls)
    # what the cost model needs: op, this rank's input bytes (2 x fp32; 3 x fp16), the world
    assert [(x.op, x.nbytes, x.world_size) for x in c.calls] == [("all_reduce", 8, 1), ("all_gather", 6, 1)]


def test_thread_collective_rejects_bad_arguments():
    with pytest.raises(ValueError, match="algorithm"):
        ThreadCollective.group(2, "nope")
    with pytest.raises(ValueError, match="world_size"):
        ThreadCollective.group(0)
    c = ThreadCollective.group(2)
    with pytest.raises(ValueError, match="src=5"):
        c[0].broadcast(torch.ones(1), 5)
