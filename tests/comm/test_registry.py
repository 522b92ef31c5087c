"""The one table of collectives (lowbw.comm.registry): everyone reads it, and the costs did not move.

- every name is registered once, in the order configs list and reports plot; its broadcast is a broadcast;
- the engine runs, and both cost models time, whatever the table holds (a collective added to it only);
- a spec's per-link form equals its closed form on equal links (alpha = a + d);
- first principles: ring = 2(N-1) steps of M/N, ps = 2 steps with (N-1) M through the root each way;
- a frozen table of the cost models' values, computed by the code before the registry (commit 271a700's
  lowbw.net.costmodel / costlinks, with the per-algorithm formulas written inline there): the refactor guard.
"""

from __future__ import annotations

import math
from dataclasses import replace
from types import SimpleNamespace

import pytest
import torch

from lowbw.collective.spec import CollectiveSpec, Cost
from lowbw.comm import algorithms, engine
from lowbw.comm import registry as reg
from lowbw.comm.registry import expected
from lowbw.net import calibrated as cmod
from lowbw.net import costlinks as cl
from lowbw.net import costmodel as cm
from lowbw.net.costlinks import WorkerLink
from lowbw.net.costmodel import LinkParams

# the collectives whose old tables (before the specs) the fields are checked against, in the registry's order;
# a collective added since is in the table too, at its registry line's place
NAMES = ("ring", "tree", "ps", "butterfly", "alltoall", "roundrobin", "allgather", "native")


def test_the_table_holds_every_collective_once_in_order():
    assert tuple(a for a in reg.COLLECTIVES if a in NAMES) == NAMES
    assert algorithms.ALLREDUCE_ALGORITHMS == tuple(reg.COLLECTIVES) == engine.ALGORITHMS
    assert algorithms.BROADCAST_FOR == engine.BROADCAST_FOR == {a: s.broadcast for a, s in reg.COLLECTIVES.items()}
    for name, spec in reg.COLLECTIVES.items():
        assert spec.name == name
        assert spec.broadcast in algorithms.BROADCASTS and spec.gather in ("ring", "direct")
        assert (spec.run is None) == (name == "native")
    with pytest.raises(ValueError, match="no-such"):
        reg.get("no-such")


def test_engine_and_cost_models_read_only_the_table(monkeypatch):
    calls = []
    fake = CollectiveSpec(name="fake", run=lambda flat, tp, red, chunk, window, root=0: calls.append(flat.numel()),
                          cost=lambda n: Cost(3.0, 0.5, 0.0), broadcast="flat", gather="direct")
    monkeypatch.setitem(reg.COLLECTIVES, "fake", fake)
    engine.run_allreduce(torch.zeros(5), SimpleNamespace(world_size=2), "fake", None, 1, 1)  # the engine reads N
    assert calls == [5]
    L = LinkParams(1e-3, 8e6)  # beta = 1 us/B
    assert cm.allreduce_time("fake", 1e6, 4, L) == pytest.approx(3e-3 + 0.5)
    assert cm.collective_time("broadcast", "fake", 1e6, 4, L) == cm.broadcast_time(1e6, 4, L, "flat")
    assert cm.collective_time("all_gather", "fake", 1e6, 4, L) == cm.collective_time("all_gather", "direct", 1e6, 4, L)
    links = [WorkerLink.symmetric(L)] * 4
    assert cl.links_allreduce_time("fake", 1e6, links) == pytest.approx(3e-3 + 0.5)
    monkeypatch.setitem(reg.COLLECTIVES, "fake", replace(fake, links=lambda m, links, root: 42.0))
    assert cl.links_allreduce_time("fake", 1e6, links) == 42.0


@pytest.mark.parametrize("name", [a for a in NAMES if reg.COLLECTIVES[a].links is not None])
@pytest.mark.parametrize("n", [2, 3, 5, 8])
def test_per_link_form_equals_closed_form_on_equal_links(name, n):
    spec = reg.COLLECTIVES[name]
    a, d, rate, m = 1e-3, 4e-4, 5e7, 3e6
    links = [WorkerLink(rate, rate, a, d)] * n
    for root in range(n):
        assert spec.links(m, links, root) == pytest.approx(cm.allreduce_time(name, m, n, LinkParams(a + d, rate)))


@pytest.mark.parametrize("n", range(2, 9))
def test_ring_and_ps_from_first_principles(n):
    alpha, beta, m = 2e-3, 1e-6, 1e6
    L = LinkParams(alpha, 8 / beta)
    # ring: reduce-scatter + all-gather, 2(N-1) steps, each one message of M/N on every link
    assert cm.allreduce_time("ring", m, n, L) == pytest.approx(2 * (n - 1) * (alpha + m / n * beta))
    # ps: gather (root's downlink takes N-1 vectors), broadcast (its uplink sends N-1): 2 steps
    assert cm.allreduce_time("ps", m, n, L) == pytest.approx(2 * alpha + 2 * (n - 1) * m * beta)
    # per-link ring: the slowest hop sets every step's pace
    links = [WorkerLink(8 / beta, 8 / beta, alpha, 0.0)] * (n - 1) + [WorkerLink(4 / beta, 8 / beta, alpha, 0.0)]
    assert cl.ring_time(m, links) == pytest.approx(2 * (n - 1) * (alpha + 2 * m / n * beta))


def test_every_collective_on_one_worker_costs_nothing():
    for name in reg.COLLECTIVES:
        assert cm.allreduce_time(name, 1e6, 1, LinkParams(1e-3, 1e6)) == 0.0
        assert cl.links_allreduce_time(name, 1e6, [WorkerLink(1e6, 1e6, 1e-3)]) == 0.0


def test_talk_formulas_only_where_the_talk_gives_one():
    assert sorted(a for a, s in reg.COLLECTIVES.items() if s.talk) == ["butterfly", "ps", "ring", "tree"]
    lg = math.ceil(math.log2(8))
    assert reg.COLLECTIVES["tree"].talk(8) == (2.0 * lg, 2.0 * lg)


# (algorithm, N, allreduce_time(alg, 1e6, N, LinkParams(1e-3, 1e8, 1e-10, 125000.0)),
#  allreduce_time(alg, 1e8, N, LinkParams(1e-2, 1e7), chunk_bytes=4 MiB)), computed by the code of commit 271a700
UNIFORM = [
    ('ring', 2, 0.07205, 80.02),
    ('ring', 3, 0.10073333333333334, 106.70666666666666),
    ('ring', 5, 0.12608, 128.08),
    ('ring', 8, 0.1440875, 140.14),
    ('tree', 2, 0.1421, 160.02),
    ('tree', 3, 0.30219999999999997, 320.02),
    ('tree', 5, 0.30419999999999997, 320.2497152),
    ('tree', 8, 0.30619999999999997, 320.4794304),
    ('ps', 2, 0.1421, 160.02),
    ('ps', 3, 0.30219999999999997, 320.02),
    ('ps', 5, 0.6224, 640.02),
    ('ps', 8, 1.1027, 1120.02),
    ('butterfly', 2, 0.07205, 80.02),
    ('butterfly', 3, 0.23415000000000002, 240.04),
    ('butterfly', 5, 0.276175, 280.06),
    ('butterfly', 8, 0.1360875, 140.06),
    ('alltoall', 2, 0.07110000000000001, 80.01),
    ('alltoall', 3, 0.1522, 160.02),
    ('alltoall', 5, 0.3144, 320.04),
    ('alltoall', 8, 0.5577000000000001, 560.07),
    ('roundrobin', 2, 0.07205, 80.02),
    ('roundrobin', 3, 0.10073333333333334, 106.70666666666666),
    ('roundrobin', 5, 0.12608, 128.08),
    ('roundrobin', 8, 0.1440875, 140.14),
    ('allgather', 2, 0.07110000000000001, 80.01),
    ('allgather', 3, 0.1522, 160.02),
    ('allgather', 5, 0.3144, 320.04),
    ('allgather', 8, 0.5577000000000001, 560.07),
    ('native', 2, 0.07205, 80.02),
    ('native', 3, 0.10073333333333334, 106.70666666666666),
    ('native', 5, 0.12608, 128.08),
    ('native', 8, 0.1440875, 140.14),
]


@pytest.mark.parametrize(("name", "n", "small", "big"), UNIFORM)
def test_uniform_costs_are_the_old_models(name, n, small, big):
    assert cm.allreduce_time(name, 1e6, n, LinkParams(1e-3, 1e8, 1e-10, 125000.0)) == small
    assert cm.allreduce_time(name, 1e8, n, LinkParams(1e-2, 1e7), chunk_bytes=1 << 22) == big


def _unequal(n):
    return [WorkerLink(1e8 / (i + 1), 2e8 / (i + 2), 1e-3 * i, 5e-4 * (n - i)) for i in range(n)]


# (algorithm, N, links_allreduce_time(alg, 1e6, _unequal(N), root=N-1)), computed by the code of commit 271a700
UNEQUAL = [
    ('ring', 3, 0.334),
    ('ring', 8, 1.274),
    ('tree', 3, 0.9670000000000001),
    ('tree', 8, 2.626),
    ('ps', 3, 0.805),
    ('ps', 8, 7.0175),
    ('butterfly', 3, 0.7340000000000001),
    ('butterfly', 8, 1.1860000000000002),
    ('alltoall', 3, 0.48700000000000004),
    ('alltoall', 8, 4.557),
    ('roundrobin', 3, 0.334),
    ('roundrobin', 8, 1.274),
    ('allgather', 3, 0.48700000000000004),
    ('allgather', 8, 4.557),
    ('native', 3, 0.334),
    ('native', 8, 1.274),
]


@pytest.mark.parametrize(("name", "n", "t"), UNEQUAL)
def test_per_link_costs_are_the_old_models(name, n, t):
    assert cl.links_allreduce_time(name, 1e6, _unequal(n), n - 1) == t


# --- a collective's volume, duplexity and handshake are fields of its spec (issue 47) --------------------------
def _old_expected(algorithm, M, N, rank, root=0):
    """lowbw.comm.meter.expected as it was before the spec held the volume (commit d7c92da), inline."""
    if N == 1:
        return 0, 0
    if algorithm in ("ring", "roundrobin", "butterfly", "native"):  # native: the engine mapped it to ring
        v = 2 * (N - 1) * M // N
        return v, v
    if algorithm == "ps":
        return ((N - 1) * M, (N - 1) * M) if rank == root else (M, M)
    if algorithm in ("alltoall", "allgather"):
        return (N - 1) * M, (N - 1) * M
    kids = sum(1 for c in (2 * rank + 1, 2 * rank + 2) if c < N)  # tree
    up = 0 if rank == 0 else M
    return up + kids * M, kids * M + up


def _old_handshake(algorithm, n):
    """lowbw.net.calibrated.handshake_steps before the spec held it (commit d7c92da), inline."""
    if n < 2:
        return 0
    if algorithm in ("ps", "ring") or (algorithm == "tree" and n <= 4):
        return 1
    if algorithm == "butterfly":
        p2 = 1 << (n.bit_length() - 1)
        return 2 * (p2.bit_length() - 1) + (1 if n != p2 else 0)
    return None


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 8])
def test_spec_fields_are_the_old_tables(n):
    M = 4096 * 8 * 7
    for name in NAMES:
        for r in range(n):
            assert expected(name, M, n, r) == _old_expected(name, M, n, r), (name, n, r)
        assert expected("ps", M, n, n - 1, root=n - 1) == _old_expected("ps", M, n, n - 1, root=n - 1)
        assert cmod.handshake_steps(name, n) == _old_handshake(name, n), (name, n)
    old_duplex = ("ring", "native", "butterfly", "alltoall", "roundrobin", "allgather")
    old = {a: reg.COLLECTIVES[a] for a in NAMES}
    assert {a for a, s in old.items() if s.duplex} == set(old_duplex)
    assert {a for a, s in old.items() if s.heap_chain} == {"tree"}
    assert {a for a, s in old.items() if s.handshake_every_step} == {"butterfly"}
    assert {a for a, s in old.items() if s.segment_order} == {"ring"}  # packing's segment-major layout


def test_meter_and_testbed_model_read_only_the_spec_fields(monkeypatch):
    fake = CollectiveSpec(name="fake", run=lambda *a, **k: None, cost=lambda n: Cost(3.0, 0.5, 0.0),
                          broadcast="flat", volume=lambda n, m, rank, root: (7 * m, 5 * m), duplex=True,
                          handshake=lambda n: n + 1, step_messages=lambda m, n, c: [(m / 2, "up")] * 3)
    monkeypatch.setitem(reg.COLLECTIVES, "fake", fake)
    assert expected("fake", 10, 4, 0) == (70, 50) and expected("fake", 10, 1, 0) == (0, 0)
    assert cmod.handshake_steps("fake", 4) == 5
    cal = {"fit": {"alpha_s": 1e-3, "bandwidth_bps": 8e6, "burst_bytes": 0.0},
           "fit_duplex": {"alpha_s": 1e-3, "bandwidth_bps": 4e6, "burst_bytes": 0.0}, "nominal_rate_bps": 1e7}
    assert cmod.model_link(cal, "fake").bandwidth_bps == 4e6  # duplex: the simultaneous exchange's beta
    monkeypatch.setitem(reg.COLLECTIVES, "fake", replace(fake, duplex=False, handshake=None, volume=None))
    assert cmod.model_link(cal, "fake").bandwidth_bps == 8e6
    assert cmod.handshake_steps("fake", 4) is None
    assert cmod.step_messages("fake", 10.0, 4) == [(5.0, "up")] * 3
    assert cmod.window_wait(cal, "fake", 1e6, 4) == 0.0  # no heap chain
    with pytest.raises(ValueError, match="'fake'.*no textbook volume|no textbook volume.*'fake'"):
        expected("fake", 10, 4, 0)


def test_an_unknown_collective_is_an_error_not_the_ring():
    for f in (lambda: expected("no-such", 10, 4, 0), lambda: cmod.handshake_steps("no-such", 4),
              lambda: cmod.step_messages("no-such", 1e3, 4),
              lambda: cmod.model_link({"fit": {}}, "no-such")):
        with pytest.raises(ValueError, match="algorithm='no-such' is not known; allowed: ring, tree"):
            f()
