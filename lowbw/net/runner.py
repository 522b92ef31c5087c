"""Running the testbed's worker processes: launch, wait (torchrun's failure semantics), stop, the signals
that unwind a ``with Testbed(...)`` block, and the thread that applies a rate schedule.

Every worker runs in its own process group, so stopping it stops what it started too.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

__all__ = ["worker_dir", "torchrun_argv", "sched_rr", "start_process", "wait_all", "kill_groups", "stop_all",
           "SignalGuard", "RateScheduler"]

TERM_GRACE_S = 3.0  # seconds a worker gets between SIGTERM and SIGKILL when the testbed closes
POLL_S = 0.05  # how often wait_all looks at the workers


def worker_dir(cwd: str | None, rank: int) -> str | None:
    """``cwd`` with ``{rank}`` filled in (the directory is created), else ``cwd`` unchanged."""
    if cwd is None or "{rank}" not in str(cwd):
        return cwd
    wd = str(cwd).replace("{rank}", str(rank))
    os.makedirs(wd, exist_ok=True)
    return wd


def torchrun_argv(command: Sequence[str], workers: int, master_addr: str, master_port: int) -> list[str]:
    """``torchrun --nnodes N --nproc-per-node 1 ... SCRIPT ARGS`` for ``--launcher torchrun``: every
    namespace runs one single-process torchrun node; the node rank comes from ``PET_NODE_RANK`` (torchrun
    reads its flags from ``PET_<FLAG>``). ``command``: ``[python] script.py args`` or ``[python] -m mod args``."""
    cmd = list(command)
    if cmd and os.path.basename(cmd[0]).startswith("python"):
        cmd = cmd[1:]
    if not cmd:
        raise ValueError("--launcher torchrun needs a script (or -m module) after --")
    if cmd[0] == "-m" and len(cmd) < 2:
        raise ValueError("--launcher torchrun: -m needs a module name")
    return [sys.executable, "-m", "torch.distributed.run", "--nnodes", str(workers), "--nproc-per-node", "1",
            "--master-addr", master_addr, "--master-port", str(master_port), *cmd]


def sched_rr(priority: int) -> Callable[[], None]:
    """A ``preexec_fn`` putting the child under SCHED_RR ``priority`` (inherited by what it execs)."""
    def apply() -> None:
        os.sched_setscheduler(0, os.SCHED_RR, os.sched_param(priority))
    return apply


def start_process(argv: Sequence[str], env: dict[str, str], cwd: str | None, stdout: Any, stderr: Any,
                  realtime: int | None) -> subprocess.Popen:
    """One worker process in a new session (its own process group)."""
    return subprocess.Popen(list(argv), env=env, cwd=cwd, stdout=stdout, stderr=stderr, start_new_session=True,
                            preexec_fn=None if realtime is None else sched_rr(realtime))


def kill_groups(procs: Sequence[subprocess.Popen], sig: int) -> None:
    """Send ``sig`` to the process group of every process still running."""
    for p in procs:
        if p.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(p.pid, sig)


def wait_all(procs: Sequence[subprocess.Popen], timeout: float | None = None, grace: float = 30.0) -> list[int]:
    """Wait for every process; once one has failed, the others get ``grace`` seconds before being killed
    (as torchrun does); after ``timeout`` seconds all are killed. Returns the exit codes (negative = killed
    by that signal)."""
    deadline = None if timeout is None else time.time() + timeout
    fail_at: float | None = None
    while True:
        codes = [p.poll() for p in procs]
        if all(c is not None for c in codes):
            break
        now = time.time()
        if fail_at is None and any(c not in (None, 0) for c in codes):
            fail_at = now
        if (fail_at is not None and now - fail_at > grace) or (deadline is not None and now > deadline):
            kill_groups(procs, signal.SIGKILL)
            for p in procs:
                p.wait()
            break
        time.sleep(POLL_S)
    return [p.returncode for p in procs]


def stop_all(procs: Sequence[subprocess.Popen]) -> None:
    """SIGTERM every process group, SIGKILL what is still running ``TERM_GRACE_S`` later."""
    kill_groups(procs, signal.SIGTERM)
    deadline = time.time() + TERM_GRACE_S
    for p in procs:
        with contextlib.suppress(subprocess.TimeoutExpired):
            p.wait(timeout=max(0.01, deadline - time.time()))
        if p.poll() is None:
            kill_groups([p], signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(timeout=5)


class SignalGuard:
    """While installed, SIGTERM and SIGHUP raise SystemExit(128 + signal) in the main thread, so ``with``
    blocks unwind and tear down (SIGINT already raises KeyboardInterrupt). Handlers someone else installed
    are left alone; outside the main thread it does nothing."""

    def __init__(self) -> None:
        self._old: dict[int, Any] = {}

    def install(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return

        def handler(signum: int, frame: Any) -> None:
            raise SystemExit(128 + signum)

        for sig in (signal.SIGTERM, signal.SIGHUP):
            with contextlib.suppress(ValueError, OSError):
                if signal.getsignal(sig) in (signal.SIG_DFL, None):
                    self._old[sig] = signal.signal(sig, handler)

    def restore(self) -> None:
        for sig, h in self._old.items():
            with contextlib.suppress(ValueError, OSError):
                signal.signal(sig, h)
        self._old = {}


class RateScheduler:
    """A daemon thread calling ``apply(payload)`` at each ``(seconds after t0, payload)`` of a schedule (any
    iterable in time order, e.g. a looping trace), until it ends or :meth:`stop`. Errors of ``apply`` are
    ignored (the testbed may be closing)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, schedule: Iterable[tuple[float, Any]], t0: float, apply: Callable[[Any], None]) -> None:
        self._stop.clear()

        def loop() -> None:
            for t, payload in schedule:
                if self._stop.wait(max(0.0, t0 + t - time.time())):
                    return
                with contextlib.suppress(Exception):
                    apply(payload)

        self._thread = threading.Thread(target=loop, name=self.name, daemon=True)
        self._thread.start()

    def stop(self, join: bool = False) -> None:
        """No more calls of ``apply`` from now on; ``join``: also wait (up to 5 s) for a call under way."""
        self._stop.set()
        t = self._thread
        if join and t is not None and t is not threading.current_thread():
            t.join(timeout=5)
