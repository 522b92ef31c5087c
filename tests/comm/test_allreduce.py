"""Every all-reduce algorithm equals dist.all_reduce, for world sizes 1..8, odd sizes, fp32/fp16/bf16.

One spawn of 8 gloo processes covers every world size 1..8: the processes split into disjoint groups
that run at the same time (8; 7+1; 6+2; 5+3; 4 + a scattered group {4, 6, 7} whose group ranks differ
from the global ones). Within each group every algorithm, dtype and size runs; the parent then checks
the results against dist.all_reduce (float tolerance), across ranks (bit-identical) and against
ThreadCollective (bit-identical: same code).
"""

from __future__ import annotations

import pytest
import torch

import lowbw.comm as comm
from lowbw.comm import ThreadCollective, run_threads
from lowbw.comm.testing import run_procs

DTYPES = (torch.float32, torch.float16, torch.bfloat16)
SIZES = (0, 1, 7, 301)  # not divisible by most world sizes; 301 spans many 64-byte chunks
CHUNK = 64  # bytes: many chunks per segment, so the pipelines really run
# rounds of disjoint groups (global ranks); every world size 1..8 appears
ROUNDS = [[list(range(8))], [list(range(7)), [7]], [list(range(6)), [6, 7]], [list(range(5)), [5, 6, 7]],
          [list(range(4)), [4, 6, 7]]]
GROUPS = [g for rnd in ROUNDS for g in rnd]


def _input(grank: int, n: int, dtype: torch.dtype, salt: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(100_003 * salt + 1009 * grank + n)
    return (torch.randn(n, generator=g) * 3).to(dtype)


def _worker(rank, world_size):
    import torch.distributed as dist

    out = {}
    groups = [dist.new_group(ranks) for ranks in GROUPS]  # collective over the world: every rank calls it
    for gi, ranks in enumerate(GROUPS):
        if rank not in ranks:
            continue
        grp = groups[gi]
        grank = ranks.index(rank)
        for alg in comm.ALGORITHMS:
            for dt in DTYPES:
                for n in SIZES:
                    x = _input(grank, n, dt)
                    y = x.clone()
                    ret = comm.allreduce(y, alg, group=grp, chunk_bytes=CHUNK, timeout=30)
                    assert ret is y
                    z = x.clone()
                    if n:
                        dist.all_reduce(z, group=grp)
                    out[(gi, alg, str(dt), n)] = (y, z)
        # other ops, a 2-D non-contiguous tensor, in-place semantics
        for alg in comm.ALGORITHMS:
            for op in ("avg", "max", "min", "prod"):
                x = _input(grank, 37, torch.float32, salt=1).abs() + 0.5
                y = x.clone()
                comm.allreduce(y, alg, op=op, group=grp, chunk_bytes=CHUNK, timeout=30)
                out[(gi, alg, op)] = y
            base = _input(grank, 60, torch.float32, salt=2).view(6, 10)
            nc = base.t()  # non-contiguous view: results must land in the caller's tensor
            comm.allreduce(nc, alg, group=grp, chunk_bytes=CHUNK, timeout=30)
            out[(gi, alg, "noncontig")] = base.clone()
        # complex payloads travel as their real view (as dist.isend sends them)
        zc = torch.full((5,), complex(grank + 1, -grank), dtype=torch.complex64)
        out[(gi, "complex", "allgather")] = comm.allgather(zc, group=grp, chunk_bytes=CHUNK, timeout=30)
        out[(gi, "complex", "ring")] = comm.allreduce(zc.clone(), "ring", group=grp, chunk_bytes=16, timeout=30)
    return out


@pytest.fixture(scope="module")
def results():
    return run_procs(_worker, 8, timeout=240, init="tcp")


def _tol(dt, n):
    return (1e-5, 1e-5 * n) if dt == "torch.float32" else (2e-2, 2e-2 * n)


def test_equals_dist_all_reduce(results):
    for gi, ranks in enumerate(GROUPS):
        k = len(ranks)
        for alg in comm.ALGORITHMS:
            for dt in map(str, DTYPES):
                for n in SIZES:
                    key = (gi, alg, dt, n)
                    rtol, atol = _tol(dt, k)
                    first = results[ranks[0]][key][0]
                    for r in ranks:
                        y, z = results[r][key]
                        assert y.dtype == z.dtype and y.shape == z.shape, key
                        torch.testing.assert_close(y.double(), z.double(), rtol=rtol, atol=atol, msg=str(key))
                        assert torch.equal(y, first), f"ranks disagree: {key}"


def test_sum_is_exact_sum(results):
    """Against a float64 sum of the inputs (independent of gloo's own arithmetic)."""
    for gi, ranks in enumerate(GROUPS):
        k = len(ranks)
        for alg in comm.ALGORITHMS:
            for dt in DTYPES:
                n = SIZES[-1]
                ref = sum(_input(g, n, dt).double() for g in range(k))
                y = results[ranks[0]][(gi, alg, str(dt), n)][0]
                rtol, atol = _tol(str(dt), k)
                torch.testing.assert_close(y.double(), ref, rtol=rtol, atol=atol * 3)


def test_other_ops_and_layouts(results):
    fns = {"avg": lambda s: s.mean(0), "max": lambda s: s.max(0).values, "min": lambda s: s.min(0).values,
           "prod": lambda s: s.prod(0)}
    for gi, ranks in enumerate(GROUPS):
        k = len(ranks)
        xs = torch.stack([(_input(g, 37, torch.float32, salt=1).abs() + 0.5).double() for g in range(k)])
        nc_ref = sum(_input(g, 60, torch.float32, salt=2).double() for g in range(k))
        for alg in comm.ALGORITHMS:
            for op, f in fns.items():
                torch.testing.assert_close(results[ranks[0]][(gi, alg, op)].double(), f(xs), rtol=1e-5, atol=1e-6)
            torch.testing.assert_close(results[ranks[-1]][(gi, alg, "noncontig")].double().view(-1), nc_ref,
                                       rtol=1e-5, atol=1e-5)


def test_threads_bit_identical_to_processes(results):
    """ThreadCollective runs the same per-rank code: same bits as the gloo processes, every algorithm."""
    for gi in (0, 4, 6, 8):  # world sizes 8, 2, 3 and the scattered group
        ranks = GROUPS[gi]
        k = len(ranks)
        for alg in comm.ALGORITHMS:
            if alg == "native":
                continue
            for dt in DTYPES:
                for n in SIZES:
                    xs = [_input(g, n, dt) for g in range(k)]
                    colls = ThreadCollective.group(k, alg, chunk_bytes=CHUNK, timeout=30)
                    outs = run_threads(lambda r, c, xs=xs: c.all_reduce(xs[r]), colls)
                    for g, r in enumerate(ranks):
                        assert torch.equal(outs[g], results[r][(gi, alg, str(dt), n)][0]), (gi, alg, dt, n)


def test_bad_arguments():
    x = torch.zeros(3)
    with pytest.raises(ValueError, match="algorithm='bogus'"):
        comm.allreduce(x, "bogus")
    with pytest.raises(ValueError, match="op='median'"):
        comm.allreduce(x, "ring", op="median")
    with pytest.raises(ValueError, match="avg"):
        comm.allreduce(torch.zeros(3, dtype=torch.int64), "ring", op="avg")
    with pytest.raises(ValueError, match="chunk_bytes"):
        colls = ThreadCollective.group(2, "ring", chunk_bytes=0)
        run_threads(lambda r, c: c.all_reduce(x), colls)


@pytest.mark.parametrize("alg", [a for a in comm.ALGORITHMS if a != "native"])
def test_threads_integer_and_fp64(alg):
    for dt in (torch.int64, torch.int32, torch.float64):
        xs = [torch.arange(11, dtype=dt) * (r + 1) for r in range(3)]
        colls = ThreadCollective.group(3, alg, chunk_bytes=16)
        outs = run_threads(lambda r, c, xs=xs: c.all_reduce(xs[r]), colls)
        for o in outs:
            assert o.dtype == dt and torch.equal(o, torch.arange(11, dtype=dt) * 6)


def test_lockstep_schedule_same_bits(monkeypatch):
    """The NCCL-safe lockstep schedules (send/recv pairs posted together) give the pipelined results."""
    from lowbw.comm import transport

    k, n = 5, 1001
    for alg in ("ring", "allgather", "butterfly", "alltoall", "roundrobin"):
        xs = [_input(g, n, torch.float16) for g in range(k)]
        def fn(r, c, xs=xs):
            return c.all_reduce(xs[r])

        piped = run_threads(fn, ThreadCollective.group(k, alg, chunk_bytes=CHUNK))
        monkeypatch.setattr(transport.ThreadTransport, "lockstep", True)
        lock = run_threads(fn, ThreadCollective.group(k, alg, chunk_bytes=CHUNK))
        monkeypatch.setattr(transport.ThreadTransport, "lockstep", False)
        for a, b in zip(piped, lock):
            assert torch.equal(a, b), alg


def test_complex_payloads(results):
    for gi, ranks in enumerate(GROUPS):
        k = len(ranks)
        for r in ranks:
            parts = results[r][(gi, "complex", "allgather")]
            assert [p[0].item() for p in parts] == [complex(j + 1, -j) for j in range(k)], (gi, r)
            want = complex(k * (k + 1) / 2, -k * (k - 1) / 2)
            assert torch.equal(results[r][(gi, "complex", "ring")], torch.full((5,), want, dtype=torch.complex64))
