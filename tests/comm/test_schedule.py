"""The order in which our algorithms post messages: what makes them use full-duplex links fully.

Measured on the tc testbed (runs/bench/collectives.json): on gloo two ranks that both post isend before
irecv move the two directions one after the other, and N-1 flows posted into one link at once (incast)
run far over the bandwidth term. These tests pin the schedules that avoid both.
"""

from __future__ import annotations

import threading

import pytest
import torch

from lowbw.comm.direct import pairwise_rounds
from lowbw.comm.engine import run_allreduce
from lowbw.comm.numerics import Reducer
from lowbw.comm.transport import ThreadHub, ThreadTransport


class Recording(ThreadTransport):
    """ThreadTransport that logs every posted (kind, peer) in order."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.log: list[tuple[str, int]] = []

    def _post(self, live) -> None:
        self.log += [(h.kind, h.peer) for h, _ in live]
        super()._post(live)


def _run(algorithm: str, n: int, numel: int, chunk: int) -> list[list[tuple[str, int]]]:
    hub = ThreadHub(n)
    tps = [Recording(hub, r, timeout=30) for r in range(n)]
    xs = [torch.full((numel,), float(r + 1)) for r in range(n)]
    errors = []

    def body(r):
        try:
            run_allreduce(xs[r], tps[r], algorithm, Reducer("sum", torch.float32, n), chunk, 4)
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)
            hub.abort(str(e))

    threads = [threading.Thread(target=body, args=(r,)) for r in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    for x in xs:
        assert torch.equal(x, torch.full((numel,), n * (n + 1) / 2))
    return [tp.log for tp in tps]


@pytest.mark.parametrize("algorithm", ["ring", "butterfly", "alltoall", "roundrobin", "allgather"])
@pytest.mark.parametrize("n", [2, 3, 4])
def test_receives_are_posted_before_the_first_send(algorithm, n):
    folded = 2 * (n - (1 << (n.bit_length() - 1)))  # butterfly: ranks < folded first send one way only
    for r, log in enumerate(_run(algorithm, n, 1000, 64)):
        if algorithm == "butterfly" and r < folded:
            assert log[0] == ("send" if r % 2 == 0 else "recv", r + 1 if r % 2 == 0 else r - 1)
            continue
        first_send = next(i for i, (kind, _) in enumerate(log) if kind == "send")
        if algorithm == "ring" and n > 2:
            # the step-0 sends (segment r, 1000/n elements in chunks of 64) start the pipeline and go out
            # first: the right neighbour never sends here, so nothing the other way waits behind them
            k = len(range(0, 1000 // n, 64))
            assert log[:k] == [("send", (r + 1) % n)] * k, (n, r, log[:k + 1])
            assert log[k] == ("recv", (r - 1) % n), (n, r, log[:k + 1])
            assert ("recv", (r + 1) % n) not in log, (n, r)
            continue
        assert log[0][0] == "recv", (algorithm, n, r, log[:3])
        if algorithm == "ring" and n == 2:  # the whole window of receives (4) before the first send
            assert first_send == 4, (r, log[:6])
        # where the peer this rank first sends to sends here at the same time (N=2: always; butterfly:
        # every step), the receive from it is posted first
        if n == 2 or algorithm == "butterfly":
            assert ("recv", log[first_send][1]) in log[:first_send], (algorithm, n, r, log[:first_send + 1])


@pytest.mark.parametrize("algorithm", ["alltoall", "roundrobin"])
@pytest.mark.parametrize("n", [3, 4, 5])
def test_direct_algorithms_send_in_pairwise_rounds(algorithm, n):
    numel, chunk = 10 * n, 4
    for r, log in enumerate(_run(algorithm, n, numel, chunk)):
        sends = [p for kind, p in log if kind == "send"]
        recvs = [p for kind, p in log if kind == "recv"]
        order = [dst for dst, _ in pairwise_rounds(r, n)]
        rorder = [src for _, src in pairwise_rounds(r, n)]
        # consecutive runs of the same peer, in round order (alltoall repeats the rounds per chunk)
        runs = [p for i, p in enumerate(sends) if i == 0 or sends[i - 1] != p]
        rruns = [p for i, p in enumerate(recvs) if i == 0 or recvs[i - 1] != p]
        reps = len(runs) // (n - 1)
        assert runs == order * reps and rruns == rorder * reps, (r, runs, rruns)
        assert reps == (2 if algorithm == "roundrobin" else -(-numel // chunk))


def test_pairwise_rounds_pair_every_sender_with_its_receiver():
    for n in range(2, 9):
        rounds = [pairwise_rounds(r, n) for r in range(n)]
        for k in range(n - 1):
            dsts = [rounds[r][k][0] for r in range(n)]
            assert sorted(dsts) == list(range(n))  # one incoming flow per rank per round
            for r in range(n):
                assert rounds[dsts[r]][k][1] == r  # the destination receives from r in the same round
