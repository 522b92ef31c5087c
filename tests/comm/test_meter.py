"""The byte/message meter equals the textbook volumes, and threads count exactly what processes send."""

from __future__ import annotations

import math

import pytest
import torch

import lowbw.comm as comm
from lowbw.comm import Meter, ThreadCollective, metering, run_threads
from lowbw.comm.registry import expected
from lowbw.comm.testing import run_procs

BIG = 1 << 30  # one message per segment


def _thread_counts(alg, N, numel, chunk_bytes=BIG, dtype=torch.float32):
    meters = [Meter() for _ in range(N)]
    colls = ThreadCollective.group(N, alg, chunk_bytes=chunk_bytes, meters=meters)
    run_threads(lambda r, c: c.all_reduce(torch.ones(numel, dtype=dtype)), colls)
    return [m.calls[0] for m in meters]


# butterfly's textbook volume is for powers of two (folded ranks: see the next test)
CASES = [(a, n) for a in ("ring", "ps", "tree", "alltoall", "roundrobin", "allgather", "butterfly")
         for n in range(2, 9) if a != "butterfly" or n & (n - 1) == 0]


@pytest.mark.parametrize(("alg", "N"), CASES)
def test_textbook_volumes(alg, N):
    numel = N * 24
    M = numel * 4
    st = _thread_counts(alg, N, numel)
    for r, s in enumerate(st):
        assert (s.bytes_sent, s.bytes_recv) == expected(alg, M, N, r), (alg, N, r)
    # messages
    msgs = [s.msgs_sent for s in st]
    if alg == "ring":
        assert msgs == [2 * (N - 1)] * N
    elif alg == "ps":
        assert msgs == [N - 1] + [1] * (N - 1)
        assert st[0].bytes_sent + st[0].bytes_recv == 2 * (N - 1) * M  # the root carries 2(N-1)M
    elif alg == "butterfly":
        assert msgs == [2 * int(math.log2(N))] * N
    elif alg in ("alltoall", "allgather"):
        assert msgs == [N - 1] * N
    elif alg == "roundrobin":
        assert msgs == [2 * (N - 1)] * N
    # conservation: what is sent is received
    assert sum(s.bytes_sent for s in st) == sum(s.bytes_recv for s in st)
    assert sum(s.msgs_sent for s in st) == sum(s.msgs_recv for s in st)


@pytest.mark.parametrize("N", [3, 5, 6, 7])
def test_butterfly_fold_volume(N):
    """Non-power-of-two: the 2R folded ranks add one full tensor each way on top of the P-rank butterfly."""
    P = 1 << (N.bit_length() - 1)
    R = N - P
    numel = N * P * 8
    M = numel * 4
    st = _thread_counts("butterfly", N, numel)
    core = 2 * (P - 1) * M // P
    for r, s in enumerate(st):
        if r < 2 * R and r % 2 == 0:
            assert (s.bytes_sent, s.bytes_recv) == (M, M)
        elif r < 2 * R:
            assert (s.bytes_sent, s.bytes_recv) == (core + M, core + M)
        else:
            assert (s.bytes_sent, s.bytes_recv) == (core, core)


def test_ring_chunks_and_uneven_sizes():
    N, numel, chunk = 4, 1001, 40  # segments of 251/250 floats; 10-float chunks
    st = _thread_counts("ring", N, numel, chunk_bytes=chunk)
    for s in st:
        # every rank forwards N-1 of the 251/250-float segments in each phase
        for v in (s.bytes_sent, s.bytes_recv):
            assert 2 * (N - 1) * 250 * 4 <= v <= 2 * (N - 1) * 251 * 4
        assert 2 * (N - 1) * 25 <= s.msgs_sent <= 2 * (N - 1) * 26  # 25 or 26 ten-float chunks per segment
    assert sum(s.bytes_sent for s in st) == 2 * (N - 1) * numel * 4
    assert sum(s.msgs_sent for s in st) == 2 * (N - 1) * (26 + 3 * 25)


def test_half_travels_as_half():
    st = _thread_counts("ring", 4, 4096, dtype=torch.float16)
    assert st[0].bytes_sent == 2 * 3 * 4096 * 2 // 4


def test_empty_and_single_rank_send_nothing():
    for alg in comm.ALGORITHMS:
        if alg == "native":
            continue
        assert all(s.msgs_sent == 0 for s in _thread_counts(alg, 3, 0))
        assert all(s.msgs_sent == 0 for s in _thread_counts(alg, 1, 10))


def test_metering_context_counts_every_call():
    colls = ThreadCollective.group(2, "ring")

    def fn(r, c):
        with metering() as m:
            c.all_reduce(torch.ones(8))
            c.all_gather(torch.ones(r + 1))
            c.broadcast(torch.ones(4), src=1)
        return m

    m0, m1 = run_threads(fn, colls)
    assert [c.op for c in m0.calls] == ["all_reduce", "all_gather", "broadcast"]
    assert m0.calls[0].bytes_sent == 32  # 2(N-1)/N * 32 bytes, N = 2
    assert m1.calls[2].bytes_sent == 16 and m0.calls[2].bytes_recv == 16  # src=1 sends its 16 bytes
    assert m0.totals()["calls"] == 3
    assert [r.op for r in colls[0].calls] == ["all_reduce", "all_gather", "broadcast"]


# ----- real processes ---------------------------------------------------------------------------------------
ALGS = [a for a in comm.ALGORITHMS if a != "native"]


def _proc_worker(rank, world_size, numel):
    from lowbw.comm import DistCollective

    out = {}
    for alg in comm.ALGORITHMS:
        m = Meter()
        comm.allreduce(torch.ones(numel), alg, meter=m, chunk_bytes=256)
        c = DistCollective(alg, meter=m, chunk_bytes=256)
        c.all_gather(torch.ones(rank * 3))
        c.broadcast(torch.ones(numel), src=world_size - 1)
        out[alg] = [s.as_dict() for s in m.calls]
    return out


@pytest.mark.parametrize("N", [4, 3])
def test_processes_match_textbook_and_threads(N):
    numel = N * 60
    res = run_procs(_proc_worker, N, numel, timeout=120)
    M = numel * 4
    for alg in ALGS:
        meters = [Meter() for _ in range(N)]
        colls = ThreadCollective.group(N, alg, chunk_bytes=256, meters=meters)

        def fn(r, c, alg=alg):
            c.all_reduce(torch.ones(numel))
            c.all_gather(torch.ones(r * 3))
            c.broadcast(torch.ones(numel), src=N - 1)

        run_threads(fn, colls)
        for r in range(N):
            got = res[r][alg]
            want = [s.as_dict() for s in meters[r].calls]
            keys = ("op", "bytes_sent", "bytes_recv", "msgs_sent", "msgs_recv", "sent_to", "recv_from")
            assert [{k: g[k] for k in keys} for g in got] == [{k: w[k] for k in keys} for w in want], (alg, r)
            if alg != "butterfly" or N == 4:
                assert (got[0]["bytes_sent"], got[0]["bytes_recv"]) == expected(alg, M, N, r)
    for r in range(N):
        nat = res[r]["native"][0]
        assert nat["measured"] is False and nat["bytes_sent"] == 0
