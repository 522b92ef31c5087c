"""ThreadCollective's direct all-gather (one meeting of the threads) gives the ring all-gather's outputs and
meter counts exactly, and fails like it (dtype mismatch, a rank that never comes, an aborted group)."""

from __future__ import annotations

import pytest
import torch

from lowbw.comm import ThreadCollective, run_threads
from lowbw.comm.errors import CommError, PeerTimeoutError
from lowbw.comm.meter import Meter


def _gathers(N: int, gather: str, chunk_bytes: int):
    meters = [Meter() for _ in range(N)]
    colls = ThreadCollective.group(N, "ring", timeout=20, chunk_bytes=chunk_bytes, meters=meters, gather=gather)

    def fn(r, c):
        g = torch.Generator().manual_seed(r)
        outs = [c.all_gather(torch.randn(3 * r + 1, 2, generator=g)),             # shaped, different sizes
                c.all_gather(torch.randint(0, 9, ([0, 5, 40, 1, 7][r % 5],), generator=g)),  # one rank empty
                c.all_gather(torch.randn(50, generator=g).half()),                # several chunks each
                c.all_gather(torch.empty(0))]                                     # all empty
        return [[t.clone() for t in o] for o in outs]

    outs = run_threads(fn, colls)
    stats = [[{k: v for k, v in s.as_dict().items() if k != "seconds"} for s in m.calls] for m in meters]
    return outs, stats


@pytest.mark.parametrize("N", [2, 3, 5])
def test_direct_equals_ring(N):
    o_ring, s_ring = _gathers(N, "ring", chunk_bytes=16)
    o_dir, s_dir = _gathers(N, "direct", chunk_bytes=16)
    assert s_dir == s_ring
    assert sum(c["msgs_sent"] for c in s_ring[0]) > 4 * (N - 1)  # chunking was exercised
    for a, b in zip(o_ring, o_dir):
        for x, y in zip(a, b):
            for u, v in zip(x, y):
                assert u.dtype == v.dtype and u.shape == v.shape and torch.equal(u, v)


def test_direct_dtype_mismatch_names_rank():
    colls = ThreadCollective.group(2, timeout=10)
    either = r"rank (1 sent torch.float16, rank 0 has torch.float32|0 sent torch.float32, rank 1 has torch.float16)"
    with pytest.raises(CommError, match=either):
        run_threads(lambda r, c: c.all_gather(torch.ones(3, dtype=torch.float16 if r else torch.float32)), colls)


def test_direct_times_out_naming_the_missing_rank():
    colls = ThreadCollective.group(3, timeout=0.5)
    # run_threads' own timeout is a generous "did not hang" bound: had the collective's 0.5 s timeout not
    # fired, it would end the run with "did not finish within", which the match below rejects
    with pytest.raises(PeerTimeoutError, match=r"ranks \[2\] did not arrive"):
        run_threads(lambda r, c: c.all_gather(torch.ones(2)) if r < 2 else None, colls, timeout=60)


def test_bad_gather_mode():
    with pytest.raises(ValueError, match="gather='mail'"):
        ThreadCollective.group(2, gather="mail")


def test_allgather_allreduce_reuses_its_buffer_across_sizes_and_dtypes():
    from lowbw.comm.gather import clear_workspace

    colls = ThreadCollective.group(3, "allgather", timeout=20, chunk_bytes=64)

    def fn(r, c):
        outs = []
        for n, dt in [(50, torch.float32), (7, torch.float32), (80, torch.float32), (9, torch.float16)]:
            x = (torch.arange(n, dtype=torch.float32) * (r + 1)).to(dt)
            outs.append(c.all_reduce(x))
        clear_workspace()
        outs.append(c.all_reduce(torch.full((5,), float(r))))
        return outs

    for outs in run_threads(fn, colls):
        for o, n in zip(outs, [50, 7, 80, 9]):
            torch.testing.assert_close(o.float(), torch.arange(n, dtype=torch.float32) * 6)
        assert torch.equal(outs[-1], torch.full((5,), 3.0))
