"""Run a function in N local processes joined by a torch.distributed group (for tests and small demos).

>>> from lowbw.comm.testing import run_procs
>>> def work(rank, world_size, x):          # module-level, so that child processes can import it
...     import torch, lowbw.comm as comm
...     t = torch.full((3,), float(rank + x))
...     return comm.allreduce(t, "ring")
>>> run_procs(work, 4, 1.0)                 # one result per rank  # doctest: +SKIP

Processes start from a ``forkserver`` that has torch imported already (quick, and safe: nothing is
forked from a process whose thread pools are running). The group lives on 127.0.0.1 only (gloo over the
loopback interface, rendezvous through a file or a TCP store listening on 127.0.0.1 only). Every child has the
torchrun-style environment (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT). Results come back
pickled; a child that fails, dies or outlives ``timeout`` is reported with its rank.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import pickle
import shutil
import socket
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from lowbw.launch.rendezvous import tcp_store

__all__ = ["RankResult", "ProcsError", "run_procs", "free_port"]

_PRELOAD = ["torch", "torch.distributed", "lowbw.comm"]


@dataclass
class RankResult:
    rank: int
    ok: bool
    value: Any = None
    error: str = ""  # "<ExceptionType>: message" of a failed rank, or why it has no result
    traceback: str = ""
    exitcode: int | None = None
    seconds: float = 0.0


class ProcsError(RuntimeError):
    """Some ranks failed; ``results`` has every rank's :class:`RankResult`."""

    def __init__(self, message: str, results: list[RankResult]):
        super().__init__(message)
        self.results = results


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _child(fn, rank: int, world_size: int, args, kwargs, init_method: str, backend: str, dist_timeout: float,
           outdir: str, env: dict, threads: int) -> None:
    os.environ.update(env)
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world_size))
    t0 = time.perf_counter()
    ok, value, err, tb = False, None, "", ""
    try:
        if threads:
            torch.set_num_threads(threads)
        timeout = timedelta(seconds=dist_timeout)
        if init_method.startswith("tcp://"):  # a store listening on 127.0.0.1 only (torch's tcp:// binds *)
            host, port = init_method[len("tcp://"):].rsplit(":", 1)
            store = tcp_store(host, int(port), world_size, rank == 0, timeout)
            dist.init_process_group(backend, store=store, rank=rank, world_size=world_size, timeout=timeout)
        else:
            dist.init_process_group(backend, init_method=init_method, rank=rank, world_size=world_size,
                                    timeout=timeout)
        value = fn(rank, world_size, *args, **kwargs)
        ok = True
    except BaseException as e:  # noqa: BLE001 - reported to the parent
        err, tb = f"{type(e).__name__}: {e}", traceback.format_exc()
    res = RankResult(rank, ok, value, err, tb, None, time.perf_counter() - t0)
    path = Path(outdir) / f"rank{rank}.pkl"
    try:
        data = pickle.dumps(res)
    except Exception as e:  # an unpicklable result
        data = pickle.dumps(RankResult(rank, False, None, f"result not picklable: {e!r}", tb, None, res.seconds))
    tmp = path.with_suffix(".tmp")
    tmp.write_bytes(data)
    tmp.rename(path)
    sys.stdout.flush()
    sys.stderr.flush()
    if ok:
        with contextlib.suppress(Exception):
            dist.destroy_process_group()
    os._exit(0 if ok else 1)  # no interpreter teardown: gloo threads of a broken group must not hang it


def run_procs(fn, world_size: int, *args, timeout: float = 120.0, backend: str = "gloo", init: str = "file",
              dist_timeout: float = 60.0, env: dict | None = None, threads: int = 1, raise_errors: bool = True,
              **kwargs) -> list:
    """Call ``fn(rank, world_size, *args, **kwargs)`` in ``world_size`` processes after
    ``init_process_group(backend)``; return the values in rank order.

    ``fn`` must be importable (a module-level function). ``timeout``: seconds for the whole run; children
    still running then are killed. ``init``: "file" (a rendezvous file, no port race) or "tcp" (a TCP store
    listening on 127.0.0.1 only, on a free port: :mod:`lowbw.launch.rendezvous`). ``threads``: torch threads per
    child (0: torch's default).
    ``raise_errors``: raise :class:`ProcsError` if any rank failed; if False, return
    :class:`RankResult` objects (value or error per rank).
    """
    if world_size < 1:
        raise ValueError(f"world_size={world_size} must be >= 1")
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(_PRELOAD)
    outdir = tempfile.mkdtemp(prefix="lowbw-procs-")
    port = free_port()
    if init == "file":
        init_method = f"file://{outdir}/rendezvous"
    elif init == "tcp":
        init_method = f"tcp://127.0.0.1:{port}"
    else:
        raise ValueError(f"init={init!r}: allowed 'file', 'tcp'")
    cenv = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
    if Path("/sys/class/net/lo").exists():
        cenv["GLOO_SOCKET_IFNAME"] = "lo"
    cenv.update(env or {})
    procs = []
    try:
        for r in range(world_size):
            p = ctx.Process(target=_child, name=f"lowbw-rank{r}",
                            args=(fn, r, world_size, args, kwargs, init_method, backend, dist_timeout, outdir,
                                  cenv, threads))
            p.start()
            procs.append(p)
        deadline = time.monotonic() + timeout
        for p in procs:
            p.join(max(0.0, deadline - time.monotonic()))
        killed = []
        for r, p in enumerate(procs):
            if p.is_alive():
                killed.append(r)
                p.kill()
                p.join(10)
        results = []
        for r, p in enumerate(procs):
            f = Path(outdir) / f"rank{r}.pkl"
            if f.exists():
                res = pickle.loads(f.read_bytes())
            elif r in killed:
                res = RankResult(r, False, error=f"TimeoutError: rank {r} still running after {timeout:g}s; killed")
            else:
                res = RankResult(r, False, error=f"ProcessDied: rank {r} exited with code {p.exitcode} "
                                                 "without a result")
            res.exitcode = p.exitcode
            results.append(res)
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join(5)
        shutil.rmtree(outdir, ignore_errors=True)
    if not raise_errors:
        return results
    bad = [r for r in results if not r.ok]
    if bad:
        lines = [f"{len(bad)} of {world_size} ranks failed:"]
        for b in bad:
            lines.append(f"  rank {b.rank}: {b.error}")
        first_tb = next((b.traceback for b in bad if b.traceback), "")
        if first_tb:
            lines.append(first_tb)
        raise ProcsError("\n".join(lines), results)
    return [r.value for r in results]
