"""Run one config on its backend and write the run directory.

* ``sim``: :class:`~lowbw.train.world.SimWorld` in this process.
* ``procs``: M worker processes (``python -m lowbw.train.worker``) rendezvousing over env:// on this machine
  (gloo on CPU, NCCL on CUDA); with ``testbed: true`` each runs inside its own network namespace behind a
  tc-shaped link (:class:`lowbw.net.testbed.Testbed`; without root it falls back to in-process rate limiting
  of point-to-point traffic, and the run's config.json says which).
* ``torchrun``: the same worker under ``torchrun`` (rendezvous from its environment). Called inside
  torchrun (``RANK`` set) this process *is* a worker; otherwise it starts
  ``python -m lowbw.launch.torchrun --standalone --nproc_per_node M -m lowbw.train.worker ...`` (torchrun, its
  stores on 127.0.0.1 only).
* ``procs`` and ``torchrun`` rendezvous through a store listening on ``MASTER_ADDR`` only
  (:mod:`lowbw.launch.rendezvous`): 127.0.0.1, or the namespace's address in the testbed.

Failure behaviour: the run directory's ``.lock`` is held by the launcher *and* every worker
(flock, shared once the launcher has checked it is alone), so a rerun cannot start while an orphan still
writes; workers die with the launcher (parent-death signal) and a guardian process deletes the testbed's
namespaces if the launcher is SIGKILLed; a worker that stops answering ends the run within the peer timeout
with an error naming its rank; the first failing worker's error line becomes the launcher's error.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lowbw.net.link import LinkSpec
from lowbw.net.probe import RealtimeUnavailable, realtime_available
from lowbw.net.testbed import Testbed
from lowbw.net.trace import resolve_trace
from lowbw.runs.io import set_parent_death_signal
from lowbw.train.allocator import steady_allocator
from lowbw.train.config import RunConfig
from lowbw.train.rundir import RunDirError, RunLock, check_out, config_diff, finish, prepare_out
from lowbw.train.timeouts import peer_timeout_s
from lowbw.train.userfiles import FILES_BASE_ENV, is_file_spec

__all__ = ["run", "free_port", "RunDirError", "WorkerError", "config_diff", "peer_timeout_s", "testbed_links"]


class WorkerError(RuntimeError):
    """A worker failed; the message names the rank and carries its error line."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def testbed_links(cfg: RunConfig) -> dict:
    """The :class:`lowbw.net.testbed.Testbed` arguments of a run's network: ``bandwidth_mbit``/``latency_ms``
    for every worker, or one link per worker from ``worker_bandwidth_mbit`` (both ways; the testbed's
    ``--rates``), ``worker_uplink_mbit`` (``--up``) and ``worker_latency_ms`` (``--delays``, on the uplink);
    ``bandwidth_trace`` (a packaged name or a file) as the testbed's trace; ``link_loss`` on every uplink
    (the testbed's ``--loss``, through the userspace link emulator) under the ``tcp_congestion`` the clock
    models."""
    args: dict = {"workers": cfg.workers}
    if cfg.worker_bandwidth_mbit or cfg.worker_uplink_mbit or cfg.worker_latency_ms:
        M = cfg.workers
        down = list(cfg.worker_bandwidth_mbit) or [cfg.bandwidth_mbit] * M
        up = list(cfg.worker_uplink_mbit) or down
        lat = list(cfg.worker_latency_ms) or [cfg.latency_ms] * M
        args["links"] = [LinkSpec.parse(rate=f"{d}mbit", up=f"{u}mbit", delay=f"{a}ms" if a else None,
                                       loss=cfg.link_loss or None)
                         for d, u, a in zip(down, up, lat)]
    else:
        args["rate"] = f"{cfg.bandwidth_mbit}mbit"
        args["delay"] = f"{cfg.latency_ms}ms" if cfg.latency_ms else None
    if cfg.link_loss:  # dropped on the wire by the userspace link emulator, as a network loses packets: the
        # kernel's random-drop classifier (without netem) drops at the sender's own qdisc, which tells its TCP at
        # once (python -m lowbw bench loss measures both)
        args.update(congestion_control=cfg.tcp_congestion, link_emulator="userspace")
        if "links" not in args:
            args["loss"] = cfg.link_loss
    if cfg.bandwidth_trace:
        args["trace"] = resolve_trace(cfg.bandwidth_trace, cfg.workers)
    return args


def run(cfg: RunConfig | dict[str, Any], out: str | os.PathLike, *, overwrite: bool = False, data=None,
        quiet: bool = False, keep_checkpoint: bool = False) -> dict[str, Any]:
    """Train ``cfg`` into run directory ``out``; returns summary.json's content.

    ``overwrite`` redoes a complete run or one of another config; ``keep_checkpoint`` keeps ``checkpoint/``
    after the run completes (by default it is deleted once summary.json is written)."""
    if not isinstance(cfg, RunConfig):
        cfg = RunConfig.from_dict(cfg)
    outp = Path(out).resolve()  # workers may start elsewhere (testbed: cwd is the checkout)
    if cfg.backend == "torchrun" and "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        # lazy: keeps `lowbw --help` free of torch
        from lowbw.train.worker import worker_main  # inside torchrun: this process is one worker

        return worker_main(cfg, outp, keep_checkpoint=keep_checkpoint)
    if cfg.testbed_realtime and not realtime_available():  # before the run directory is touched
        raise RealtimeUnavailable(f"testbed_realtime={cfg.testbed_realtime}: this process may not put the workers "
                                  "under SCHED_RR (needs root or CAP_SYS_NICE, and a kernel that allows it); use 0")
    outp.mkdir(parents=True, exist_ok=True)
    lock = RunLock(outp).acquire()
    try:
        if check_out(cfg, outp, overwrite) == "complete":
            raise FileExistsError(f"{outp}/summary.json exists: the run is complete (use overwrite / --force to redo)")
        prepare_out(outp, overwrite)
        if cfg.backend == "sim":
            _run_sim(cfg, outp, data)
        else:
            if data is None and cfg.dataset != "synthetic":  # fill the dataset cache once, before M processes
                # lazy: keeps `lowbw --help` free of torch
                from lowbw.train.workload import fill_cache  # imports torch: only for a procs run

                fill_cache(cfg.dataset)
            if is_file_spec(cfg.model):  # the user's model builds, before M processes start
                from lowbw.train.workload import build_template  # lazy: imports torch

                build_template(cfg, None, "cpu")
            lock.share()
            _run_procs(cfg, outp, quiet=quiet)
        return finish(outp, keep_checkpoint)
    finally:
        lock.release()


def _run_sim(cfg: RunConfig, out: Path, data) -> dict[str, Any]:
    import torch  # lazy: keeps `lowbw --help` free of torch

    # lazy: keeps `lowbw --help` free of torch
    from lowbw.train.loop import Trainer
    from lowbw.train.world import SimWorld

    steady_allocator()
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    world = SimWorld(cfg)
    tr = Trainer(cfg, world, out, data=data)
    return tr.run()


# --------------------------------------------------------------------------------------- worker processes
def _worker_cmd(cfg_path: Path, out: Path) -> list[str]:
    return [sys.executable, "-m", "lowbw.train.worker", "--config", str(cfg_path), "--out", str(out)]


@dataclass
class _Worker:
    """One supervised process: its stderr is copied to ``log`` (and the console unless quiet), the last
    lines kept to report its error."""

    rank: int | str
    proc: subprocess.Popen
    log: Path
    tail: deque = field(default_factory=lambda: deque(maxlen=40))
    reader: threading.Thread | None = None
    failed_at: float | None = None
    stopped_since: float | None = None

    def start_reader(self, echo: bool) -> None:
        def pump() -> None:
            in_tb = False  # a worker's traceback goes to its log only; the launcher reports its last line
            with open(self.log, "wb") as f:
                for raw in iter(self.proc.stderr.readline, b""):
                    f.write(raw)
                    f.flush()
                    line = raw.decode("utf-8", "replace").rstrip()
                    self.tail.append(line)
                    if line.startswith("Traceback (most recent call last)"):
                        in_tb = True
                    quiet_line = in_tb or line.startswith("lowbw worker rank")
                    if line.startswith("lowbw worker rank"):
                        in_tb = False
                    if echo and not quiet_line:
                        with contextlib.suppress(OSError, ValueError):
                            sys.stderr.write(raw.decode("utf-8", "replace"))
                            sys.stderr.flush()

        self.reader = threading.Thread(target=pump, daemon=True, name=f"lowbw-stderr-{self.rank}")
        self.reader.start()

    def error_line(self) -> str:
        lines = [x for x in self.tail if x.strip()]
        for x in reversed(lines):
            if x.startswith("lowbw worker"):
                return x
        return lines[-1] if lines else "(no error output)"


def _state(pid: int) -> str:
    """The kernel's one-letter state of ``pid`` (T/t = stopped/traced), '' if unknown."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return ""


def _kill_all(workers: list[_Worker]) -> None:
    for w in workers:
        if w.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(w.proc.pid, signal.SIGKILL)
    for w in workers:
        with contextlib.suppress(subprocess.TimeoutExpired):
            w.proc.wait(timeout=10)


def _supervise(workers: list[_Worker], stall_s: float, grace: float) -> str | None:
    """Wait for the workers; returns None if all exited 0, else the reason, naming the rank.

    A worker whose process is stopped (SIGSTOP, a debugger) for ``stall_s`` ends the run; once one fails
    the others get ``grace`` seconds to report their own errors. Every worker is dead on return."""
    stalled: list[_Worker] = []
    fail_at = None
    try:
        while True:
            now = time.time()
            live = [w for w in workers if w.proc.poll() is None]
            for w in workers:
                if w.proc.returncode not in (None, 0) and w.failed_at is None:
                    w.failed_at = now
                    fail_at = fail_at or now
            if not live:
                break
            for w in live:
                if isinstance(w.rank, int) and _state(w.proc.pid) in ("T", "t"):
                    w.stopped_since = w.stopped_since or now
                    if now - w.stopped_since >= stall_s or fail_at is not None:
                        stalled.append(w)
                else:
                    w.stopped_since = None
            if stalled or (fail_at is not None and now - fail_at > grace):
                break
            time.sleep(0.1)
    finally:
        _kill_all(workers)
        for w in workers:
            if w.reader is not None:
                w.reader.join(timeout=5)
    if stalled:
        w = stalled[0]
        others = [f"rank {x.rank}: {x.error_line()}" for x in workers if x.failed_at is not None]
        return (f"rank {w.rank} stopped answering (its process {w.proc.pid} is stopped) for "
                f"{time.time() - w.stopped_since:.0f} s (peer timeout {stall_s:g} s)"
                + ("; " + "; ".join(others[:1]) if others else ""))
    failed = sorted((w for w in workers if w.failed_at is not None), key=lambda w: (w.failed_at, str(w.rank)))
    if not failed:
        return None
    first = failed[0]
    codes = ", ".join(f"{w.rank}: {w.proc.returncode}" for w in workers)
    rc = first.proc.returncode
    if rc < 0:
        with contextlib.suppress(ValueError):
            return f"rank {first.rank} was killed by {signal.Signals(-rc).name} [exit codes {codes}; logs: {first.log}]"
    return f"rank {first.rank} failed (exit {rc}): {first.error_line()} [exit codes {codes}; logs: {first.log}]"


def _guardian(tag: str) -> subprocess.Popen:
    """A helper that deletes the testbed's namespaces (and kills what runs in them) once this process is
    gone, however it died: it waits for EOF on its stdin, which only our death or exit closes."""
    return subprocess.Popen([sys.executable, "-m", "lowbw.workflow.doctor", "--guard", tag], stdin=subprocess.PIPE,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)


def _env_paths(env: dict[str, str]) -> None:
    """Make dataset paths absolute: workers may run in another directory."""
    from lowbw.data import DATA_DIR_ENV, MIRROR_ENV  # lazy: keeps `lowbw --help` free of torch

    for k in (DATA_DIR_ENV, MIRROR_ENV):
        v = env.get(k)
        if v and "://" not in v:
            env[k] = str(Path(v).expanduser().resolve())


def _run_procs(cfg: RunConfig, out: Path, quiet: bool = False) -> None:
    from lowbw.train.world import default_threads  # lazy: keeps `lowbw --help` free of torch

    cfg_path = out / ".worker-config.json"
    cfg_path.write_text(json.dumps(cfg.to_dict(), sort_keys=True))
    threads = default_threads(cfg)
    env = dict(os.environ)
    _env_paths(env)
    env["OMP_NUM_THREADS"] = str(threads)
    env["LOWBW_THREADS"] = str(threads)
    env["LOWBW_LAUNCHED"] = "1"  # the launcher seals summary.json, not rank 0
    env.setdefault(FILES_BASE_ENV, os.getcwd())  # user files' relative paths (workers may start elsewhere)
    if cfg.backend != "torchrun":  # torchrun's agent is the workers' parent; it dies with us instead
        env["LOWBW_PARENT_PID"] = str(os.getpid())
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    port = cfg.master_port or free_port()
    if not cfg.testbed and Path("/sys/class/net/lo").exists():
        env["GLOO_SOCKET_IFNAME"] = "lo"  # gloo's sockets on 127.0.0.1, not on the address the host name has
    stdout = subprocess.DEVNULL if quiet else None
    stall = peer_timeout_s(cfg)
    grace = 10.0
    cmd = _worker_cmd(cfg_path, out)
    workers: list[_Worker] = []

    def watch(procs: list[subprocess.Popen], ranks: list) -> str | None:
        for r, p in zip(ranks, procs):
            workers.append(_Worker(r, p, out / f".worker-{r}.log"))
        for w in workers:
            w.start_reader(echo=not quiet)
        return _supervise(workers, stall, grace)

    try:
        if cfg.backend == "torchrun":
            tcmd = [sys.executable, "-m", "lowbw.launch.torchrun", "--standalone",  # its stores on 127.0.0.1 only
                    f"--nproc_per_node={cfg.workers}", *cmd[1:]]
            p = subprocess.Popen(tcmd, env=env, stdout=stdout, stderr=subprocess.PIPE, start_new_session=True,
                                 preexec_fn=lambda: set_parent_death_signal(signal.SIGTERM))
            reason = watch([p], ["torchrun"])
        elif cfg.testbed:
            with Testbed(**testbed_links(cfg), master_port=port, realtime=cfg.testbed_realtime or None) as tb:
                guard = _guardian(tb.tag) if tb.emulation == "netns-tc" else None
                try:
                    procs = tb.launch(cmd, env=env, cwd=root, stdout=stdout, stderr=subprocess.PIPE)
                    reason = watch(procs, list(range(cfg.workers)))
                    (out / ".testbed.json").write_text(json.dumps(tb.describe(), default=str))
                finally:
                    if guard is not None:
                        tb.close()
                        guard.stdin.close()
                        with contextlib.suppress(subprocess.TimeoutExpired):
                            guard.wait(timeout=30)
        else:
            procs = []
            for r in range(cfg.workers):
                e = dict(env)
                e.update({"RANK": str(r), "WORLD_SIZE": str(cfg.workers), "LOCAL_RANK": str(r),
                          "LOCAL_WORLD_SIZE": str(cfg.workers), "MASTER_ADDR": "127.0.0.1",
                          "MASTER_PORT": str(port)})
                procs.append(subprocess.Popen(cmd, env=e, stdout=stdout, stderr=subprocess.PIPE,
                                              start_new_session=True))
            reason = watch(procs, list(range(cfg.workers)))
    finally:
        _kill_all(workers)
    if reason:
        raise WorkerError(f"backend={cfg.backend}: {reason}")
    summ = out / "summary.json"
    if not summ.exists():
        raise WorkerError(f"backend={cfg.backend}: workers exited but {summ} was not written")
