"""Run one config on its backend and write the run directory.

* ``sim``: :class:`~lowbw.train.world.SimWorld` in this process.
* ``procs``: M worker processes (``python -m lowbw.train.worker``) rendezvousing over env:// on this machine
  (gloo on CPU, NCCL on CUDA); with ``testbed: true`` each runs inside its own network namespace behind a
  tc-shaped link (:class:`lowbw.net.testbed.Testbed`; without root it falls back to in-process rate limiting
  of point-to-point traffic, and the run's config.json says which).
* ``torchrun``: the same worker under ``torchrun`` (env:// rendezvous from its environment). Called inside
  torchrun (``RANK`` set) this process *is* a worker; otherwise it starts
  ``python -m torch.distributed.run --standalone --nproc_per_node M -m lowbw.train.worker ...``.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from lowbw.train.config import RunConfig

__all__ = ["run", "free_port"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _prepare_out(out: str | os.PathLike, overwrite: bool) -> Path:
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    if (out / "summary.json").exists():
        if not overwrite:
            raise FileExistsError(f"{out}/summary.json exists: the run is complete (use overwrite / --force to redo)")
        (out / "summary.json").unlink()
        for p in (out / "checkpoint").glob("*") if (out / "checkpoint").exists() else []:
            p.unlink()
    return out


@contextlib.contextmanager
def _exclusive(out: Path):
    """Hold ``out/.lock`` (flock) while training: two processes never write one run directory."""
    import fcntl

    f = open(out / ".lock", "w")  # noqa: SIM115 (held for the duration of the run)
    try:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise RuntimeError(f"{out} is being written by another process (it holds {out}/.lock)") from None
        yield
    finally:
        f.close()


def run(cfg: RunConfig | dict[str, Any], out: str | os.PathLike, *, overwrite: bool = False, data=None,
        quiet: bool = False) -> dict[str, Any]:
    """Train ``cfg`` into run directory ``out``; returns summary.json's content."""
    if not isinstance(cfg, RunConfig):
        cfg = RunConfig.from_dict(cfg)
    if cfg.backend == "torchrun" and "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        from lowbw.train.worker import worker_main  # inside torchrun: this process is one worker

        return worker_main(cfg, Path(out))
    outp = Path(out)
    outp.mkdir(parents=True, exist_ok=True)
    with _exclusive(outp):
        outp = _prepare_out(outp, overwrite)
        return _run(cfg, outp, data, quiet)


def _run(cfg: RunConfig, outp: Path, data, quiet: bool) -> dict[str, Any]:
    if cfg.backend == "sim":
        return _run_sim(cfg, outp, data)
    if data is None and cfg.dataset != "synthetic":  # fill the dataset cache once, before M processes read it
        from lowbw.data import load

        load(cfg.dataset)
    return _run_procs(cfg, outp, quiet=quiet)


def _run_sim(cfg: RunConfig, out: Path, data) -> dict[str, Any]:
    import torch

    from lowbw.train.loop import Trainer
    from lowbw.train.world import SimWorld

    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    world = SimWorld(cfg)
    tr = Trainer(cfg, world, out, data=data)
    return tr.run()


def _worker_cmd(cfg_path: Path, out: Path) -> list[str]:
    return [sys.executable, "-m", "lowbw.train.worker", "--config", str(cfg_path), "--out", str(out)]


def _run_procs(cfg: RunConfig, out: Path, quiet: bool = False) -> dict[str, Any]:
    from lowbw.train.world import default_threads

    cfg_path = out / ".worker-config.json"
    cfg_path.write_text(json.dumps(cfg.to_dict(), sort_keys=True))
    threads = default_threads(cfg)
    env = dict(os.environ)
    env["OMP_NUM_THREADS"] = str(threads)
    env["LOWBW_THREADS"] = str(threads)
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    port = cfg.master_port or free_port()
    stderr = subprocess.DEVNULL if quiet else None
    if cfg.backend == "torchrun":
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={cfg.workers}",
               "-m", "lowbw.train.worker", "--config", str(cfg_path), "--out", str(out)]
        rc = subprocess.run(cmd, env=env, stdout=stderr, stderr=stderr).returncode
        codes = [rc]
    elif cfg.testbed:
        from lowbw.net.testbed import Testbed

        rate = f"{cfg.bandwidth_mbit}mbit"
        delay = f"{cfg.latency_ms}ms" if cfg.latency_ms else None
        with Testbed(workers=cfg.workers, rate=rate, delay=delay, master_port=port) as tb:
            env["PYTHONPATH"] = env["PYTHONPATH"]
            codes = tb.run(_worker_cmd(cfg_path, out), env=env, cwd=root, stdout=stderr, stderr=stderr)
            (out / ".testbed.json").write_text(json.dumps(tb.describe(), default=str))
    else:
        codes = _spawn(cfg, _worker_cmd(cfg_path, out), env, port, stderr)
    if any(c != 0 for c in codes):
        raise RuntimeError(f"backend={cfg.backend}: worker exit codes {codes} (see the workers' stderr)")
    summ = out / "summary.json"
    if not summ.exists():
        raise RuntimeError(f"backend={cfg.backend}: workers exited but {summ} was not written")
    return json.loads(summ.read_text())


def _spawn(cfg: RunConfig, cmd: list[str], env: dict[str, str], port: int, stderr, grace: float = 30.0) -> list[int]:
    procs = []
    for r in range(cfg.workers):
        e = dict(env)
        e.update({"RANK": str(r), "WORLD_SIZE": str(cfg.workers), "LOCAL_RANK": str(r),
                  "LOCAL_WORLD_SIZE": str(cfg.workers), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)})
        procs.append(subprocess.Popen(cmd, env=e, stdout=stderr, stderr=stderr, start_new_session=True))
    fail_at = None
    try:
        while True:
            codes = [p.poll() for p in procs]
            if all(c is not None for c in codes):
                break
            if fail_at is None and any(c not in (None, 0) for c in codes):
                fail_at = time.time()
            if fail_at is not None and time.time() - fail_at > grace:
                break
            time.sleep(0.05)
    finally:
        for p in procs:  # a failed or interrupted run leaves no orphans
            if p.poll() is None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(p.pid, signal.SIGKILL)
                p.wait()
    return [p.returncode for p in procs]
