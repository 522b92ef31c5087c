"""Data assignment schemes (thesis ch. 4), the train/validation split and the per-worker streams."""

from __future__ import annotations

import torch

from lowbw.train.assign import WorkerStream, assign, pairwise_intersections, split_indices

N = 1200


def counts(parts):
    c = torch.zeros(N, dtype=torch.long)
    for p in parts:
        c[p] += 1
    return c


def test_disjoint_and_full():
    parts = assign("disjoint", N, 4, 0)
    assert (counts(parts) == 1).all() and [len(p) for p in parts] == [300] * 4
    parts = assign("full", N, 4, 0)
    assert (counts(parts) == 4).all()


def test_coarse_groups_of_equal_data():
    parts = assign("coarse", N, 4, 0, shards=2)
    assert (counts(parts) == 2).all()
    assert torch.equal(parts[0].sort().values, parts[2].sort().values)
    assert pairwise_intersections(parts, N)[0, 1] == 0


def test_medium_consecutive_shards():
    M, C = 6, 2
    parts = assign("medium", N, M, 0, copies=C)
    assert (counts(parts) == C).all()
    inter = pairwise_intersections(parts, N)
    for i in range(M):  # 2C - 1 workers (itself included) intersect worker i, none hold equal data
        assert int((inter[i] > 0).sum()) == 2 * C - 1
        assert all(inter[i, j] < inter[i, i] for j in range(M) if j != i)


def test_fine_every_sample_c_times_equal_loads_near_equal_intersections():
    M, C = 8, 3
    n = 8000
    parts = assign("fine", n, M, 0, copies=C)
    c = torch.zeros(n, dtype=torch.long)
    for p in parts:
        c[p] += 1
        assert len(torch.unique(p)) == len(p)
    assert (c == C).all()
    assert {len(p) for p in parts} == {n * C // M}
    inter = pairwise_intersections(parts, n).double()
    off = inter[~torch.eye(M, dtype=torch.bool)]
    expected = C * (C - 1) * n / (M * (M - 1))
    assert (off > 0).all()
    assert (off - expected).abs().max() < 0.1 * expected


def test_household_shards_and_neighbourhood_overlap():
    # M = 16, H = 4, S_H = 2 (thesis Figure 4.7): households 0 and 2 hold the same household shard
    parts = assign("household", N, 16, 0, households=4, household_shards=2)
    hh = [torch.cat(parts[4 * h: 4 * h + 4]).sort().values for h in range(4)]
    assert torch.equal(hh[0], hh[2]) and torch.equal(hh[1], hh[3])
    assert len(set(hh[0].tolist()) & set(hh[1].tolist())) == 0
    inside = torch.cat(parts[0:4])
    assert len(torch.unique(inside)) == len(inside)  # disjoint inside a household
    assert (counts(parts) == 2).all()


def test_split_is_45k_5k_on_cifar10_and_seeded():
    tr, va = split_indices(50000, 0.1, 0)
    assert len(tr) == 45000 and len(va) == 5000
    assert len(set(tr.tolist()) & set(va.tolist())) == 0
    tr2, va2 = split_indices(50000, 0.1, 0)
    assert torch.equal(va, va2)


def test_stream_reshuffles_each_pass_and_resumes_exactly():
    idx = torch.arange(10)
    s = WorkerStream(idx, seed=1, rank=3)
    a = torch.cat([s.take(4) for _ in range(5)])  # 20 samples: two full passes
    assert sorted(a[:10].tolist()) == list(range(10)) and sorted(a[10:].tolist()) == list(range(10))
    assert s.passes == 2
    s2 = WorkerStream(idx, seed=1, rank=3)
    s2.take(7)
    st = s2.state_dict()
    rest = s2.take(13)
    s3 = WorkerStream(idx, seed=1, rank=3)
    s3.load_state_dict(st)
    assert torch.equal(s3.take(13), rest)
    assert not torch.equal(WorkerStream(idx, 1, 4).take(10), WorkerStream(idx, 1, 3).take(10))
