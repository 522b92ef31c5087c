"""A dead or stuck worker makes the others fail within the timeout, with an error naming the peer."""

from __future__ import annotations

import os
import threading
import time

import pytest
import torch

import lowbw.comm as comm
from lowbw.comm import GroupAbortedError, PeerFailedError, PeerTimeoutError, ThreadCollective, run_threads
from lowbw.comm.testing import ProcsError, RankResult, run_procs

TIMEOUT = 2.0
#: "did not hang" bound for a survivor's failed call (not a speed claim: generous on a busy machine): below the
#: 30 s the stuck victim stays silent, after which its exit would end the call with a PeerFailedError anyway
GAVE_UP_S = 25.0


def _victim_worker(rank, world_size, mode, alg, flags):
    import torch.distributed as dist

    victim = world_size - 1
    comm.allreduce(torch.ones(10), alg, timeout=30)  # every connection works
    dist.barrier()
    if rank == victim:
        if mode == "die":
            os._exit(7)
        deadline = time.monotonic() + 30  # stuck: alive but silent until the others have given up
        while time.monotonic() < deadline and len(os.listdir(flags)) < world_size - 1:
            time.sleep(0.05)
        return "slept"
    time.sleep(0.3)  # the victim is gone (or asleep) by now
    t0 = time.monotonic()
    try:
        comm.allreduce(torch.ones(1000), alg, timeout=TIMEOUT, chunk_bytes=400)
        out = {"type": None, "elapsed": time.monotonic() - t0}
    except comm.CommError as e:
        out = {"type": type(e).__name__, "msg": str(e), "peer": e.peer, "elapsed": time.monotonic() - t0}
    open(os.path.join(flags, f"done{rank}"), "w").close()
    return out


@pytest.mark.parametrize(("mode", "alg"), [("die", "ring"), ("hang", "ring"), ("die", "ps"), ("hang", "butterfly")])
def test_dead_or_stuck_peer_is_named(mode, alg, tmp_path):
    N = 3
    # run_procs' timeout kills a hung world (its survivors then have no result, failing the asserts below)
    res: list[RankResult] = run_procs(_victim_worker, N, mode, alg, str(tmp_path), timeout=60, raise_errors=False)
    victim = N - 1
    if mode == "die":
        assert res[victim].exitcode == 7 and not res[victim].ok
    survivors = [r.value for r in res[:victim]]
    for i, s in enumerate(survivors):
        assert s["type"] in ("PeerTimeoutError", "PeerFailedError"), (i, s)
        assert s["elapsed"] < GAVE_UP_S, (i, s)  # did not hang (generous): the type says what ended it
        assert s["peer"] is not None and f"rank {s['peer']}" in s["msg"], s
        assert f"rank {i} " in s["msg"]  # who is reporting
    naming = [s for s in survivors if s["peer"] == victim]
    assert naming, survivors  # whoever waits on the victim itself names it
    if mode == "hang":
        assert any(s["type"] == "PeerTimeoutError" and s["elapsed"] >= 0.9 * TIMEOUT for s in naming), naming
        assert all("timed out" in s["msg"] for s in naming if s["type"] == "PeerTimeoutError")
    else:  # the victim's death was noticed as such (a closed connection), not as the peer timeout
        assert any(s["type"] == "PeerFailedError" for s in naming), naming


def _fails(rank, world_size):
    import torch.distributed as dist

    dist.barrier()  # both ranks are connected: rank 1 failing must not race rank 0's connection set-up
    if rank == 1:
        raise ValueError("boom on rank 1")
    return rank


def test_run_procs_reports_failures_and_timeouts():
    with pytest.raises(ProcsError, match="rank 1: ValueError: boom on rank 1") as ei:
        run_procs(_fails, 2, timeout=60)
    assert ei.value.results[0].ok and ei.value.results[0].value == 0
    res = run_procs(_sleeper, 2, timeout=3, raise_errors=False)
    assert [r.ok for r in res] == [True, False] and "killed" in res[1].error


def _sleeper(rank, world_size):
    if rank == 1:
        time.sleep(60)
    return rank


# ----- threads ----------------------------------------------------------------------------------------------
def test_thread_peer_that_never_comes_is_named():
    colls = ThreadCollective.group(3, "ring", timeout=0.5)
    errors = {}

    def body(r):
        try:
            colls[r].all_reduce(torch.ones(30))
        except comm.CommError as e:
            errors[r] = e

    ts = [threading.Thread(target=body, args=(r,), daemon=True) for r in (0, 1)]  # rank 2 never calls
    for t in ts:
        t.start()
    for t in ts:
        t.join(30)  # did not hang: a generous bound (the timeout is 0.5 s); the errors below say what ended them
    assert not any(t.is_alive() for t in ts)
    assert isinstance(errors[0], PeerTimeoutError) and errors[0].peer == 2 and "rank 2" in str(errors[0])
    assert isinstance(errors[1], PeerTimeoutError) and errors[1].peer in (0, 2)


def test_run_threads_aborts_the_group_and_reraises_the_first_error():
    colls = ThreadCollective.group(4, "tree", timeout=30)

    ended: dict[int, str] = {}

    def fn(r, c):
        if r == 2:
            raise KeyError("worker 2 broke")
        try:
            return c.all_reduce(torch.ones(100))
        except comm.CommError as e:
            ended[r] = type(e).__name__
            raise

    with pytest.raises(KeyError, match="worker 2 broke"):
        run_threads(fn, colls)
    # the others were aborted by the group, not ended by their 30 s timeout (a PeerTimeoutError)
    assert ended == {0: "GroupAbortedError", 1: "GroupAbortedError", 3: "GroupAbortedError"}, ended
    with pytest.raises(GroupAbortedError):
        colls[0].all_reduce(torch.ones(3))  # the group stays aborted


def test_thread_barrier_times_out():
    colls = ThreadCollective.group(2, "ring", timeout=0.3)
    with pytest.raises(PeerTimeoutError, match="barrier"):
        colls[0].barrier()
    assert isinstance(PeerFailedError("x"), comm.CommError)
