"""A real single-node SLURM cluster for tests: Debian's slurm-wlm (slurmctld + slurmd) and munge, every file
(key, sockets, state, logs, slurm.conf) in a private directory, started and stopped by the caller.

    reason = install()                      # None, or why the cluster cannot be had (not root, no apt, ...)
    with local_cluster(tmp_path) as c:      # c.env: the environment for sbatch/squeue/snakemake (SLURM_CONF)
        subprocess.run(["sbatch", ...], env=c.env)

The daemons take their configuration with -f, the clients with SLURM_CONF, munge its key and socket on the
command line (slurm.conf's AuthInfo names the socket). One file goes to /etc while the cluster runs: the
SLURM executor plugin's job step (snakemake-executor-plugin-slurm-jobstep) removes SLURM_CONF from the
environment of the `srun` it starts inside each job, so that srun reads /etc/slurm/slurm.conf; it is a
symlink to this cluster's slurm.conf, made only where no slurm.conf exists and removed on exit (a machine
with its own SLURM configuration is left alone: see :func:`local_cluster`). There is no slurmdbd (it
needs a MySQL server), so `sacct` answers "accounting storage is disabled"; what sacct would report, the
final state and exit code of every job, comes from the job-completion log (JobCompType=jobcomp/filetxt)
and, while the controller keeps the job (MinJobAge), from `scontrol show job`.

A cluster left behind (its creator SIGKILLed mid-test) is told from a site's own configuration by its marker
(``lowbw-test-cluster.json`` with the creator's pid, next to its slurm.conf, and a ``# lowbw test cluster``
line in it) and its cluster name (``lowbwtest``): :func:`system_conf_state` says which it is, and
``sudo python -m lowbw doctor`` (:func:`lowbw.workflow.doctor.stop_slurm_test_cluster`) removes one whose creator
is gone. While the cluster runs, SIGTERM and SIGHUP raise KeyboardInterrupt as SIGINT does, so a time limit's
SIGTERM stops pytest through its fixtures' teardown, this cluster's included.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from lowbw.workflow.doctor import (
    SLURM_CLUSTER_NAME,
    SLURM_MARKER,
    SlurmTestCluster,
    process_start,
    slurm_test_cluster,
    stop_slurm_test_cluster,
)

#: Debian packages of the cluster and the programs the tests need from them
PACKAGES = ("slurm-wlm", "munge")
PROGRAMS = ("slurmctld", "slurmd", "sbatch", "squeue", "scontrol", "scancel", "munged")
PARTITION = SLURM_CLUSTER_NAME
SYSTEM_CONF = Path("/etc/slurm/slurm.conf")
#: seconds a daemon, the node or a job queue may take to reach the awaited state
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class LocalSlurm:
    """A running one-node cluster: its directory, config file, partition, job-completion log, client env."""

    root: Path
    conf: Path
    partition: str
    jobcomp: Path
    env: dict[str, str]


@dataclass(frozen=True)
class JobRecord:
    """One finished job as the job-completion log records it."""

    job_id: int
    name: str
    state: str
    exit_code: str
    partition: str
    tres: str


def missing_programs() -> list[str]:
    return [p for p in PROGRAMS if shutil.which(p) is None]


def install(timeout_s: float = 600.0) -> str | None:
    """Install slurm-wlm and munge with apt-get unless already there (a rerun costs nothing). Returns None
    when the cluster can be started, else the reason it cannot. The packages' own services are kept from
    starting during the install (a temporary policy-rc.d answering 101, Debian's mechanism for it)."""
    if not missing_programs():
        return None
    if os.geteuid() != 0:
        return "needs root to install and run slurmctld/slurmd/munged"
    if shutil.which("apt-get") is None:
        return "needs apt-get (Debian's slurm-wlm and munge packages)"
    policy = Path("/usr/sbin/policy-rc.d")
    ours = not policy.exists()
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    cmd = ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *PACKAGES]
    try:
        if ours:
            policy.write_text("#!/bin/sh\nexit 101\n")
            policy.chmod(0o755)
        r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout_s)
        if r.returncode != 0:  # a fresh machine may not have the package lists yet
            subprocess.run(["apt-get", "update", "-qq"], env=env, capture_output=True, timeout=timeout_s)
            r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout_s)
        if r.returncode != 0:
            return f"apt-get install {' '.join(PACKAGES)} failed: {(r.stderr or r.stdout).strip()[-300:]}"
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"apt-get install {' '.join(PACKAGES)} failed: {e}"
    finally:
        if ours:
            with contextlib.suppress(FileNotFoundError):
                policy.unlink()
    missing = missing_programs()
    return f"installed {' '.join(PACKAGES)} but {', '.join(missing)} not on PATH" if missing else None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _node_line(name: str) -> str:
    """``NodeName=... CPUs=... RealMemory=...`` of this machine as slurmd measures it (``slurmd -C``)."""
    out = subprocess.run(["slurmd", "-C"], capture_output=True, text=True, timeout=30, check=True).stdout
    line = out.splitlines()[0]
    line = re.sub(r"^NodeName=\S+", f"NodeName={name} NodeAddr=127.0.0.1", line)
    return line + " State=UNKNOWN"


def write_conf(root: Path, node: str, munge_socket: Path) -> Path:
    """slurm.conf for a one-node cluster on localhost: both daemons as root, free ports, no cgroups
    (linuxproc process tracking: works in containers), consumable cores and memory, completed jobs kept by
    the controller for an hour and logged to a text file."""
    conf = root / "slurm.conf"
    (root / "state").mkdir()
    (root / "spool").mkdir()
    (root / "plugstack.conf").write_text("")
    conf.write_text("\n".join([
        f"# lowbw test cluster (tests/slurm_local.py, creator pid {os.getpid()}, marker {root / SLURM_MARKER}); "
        "if it is left behind: sudo python -m lowbw doctor",
        f"ClusterName={SLURM_CLUSTER_NAME}",
        f"SlurmctldHost={node}(127.0.0.1)",
        "SlurmUser=root",
        "SlurmdUser=root",
        f"SlurmctldPort={free_port()}",
        f"SlurmdPort={free_port()}",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        f"AuthInfo=socket={munge_socket}",
        f"StateSaveLocation={root / 'state'}",
        f"SlurmdSpoolDir={root / 'spool'}",
        f"SlurmctldPidFile={root / 'slurmctld.pid'}",
        f"SlurmdPidFile={root / 'slurmd.pid'}",
        f"SlurmctldLogFile={root / 'slurmctld.log'}",
        f"SlurmdLogFile={root / 'slurmd.log'}",
        f"PlugStackConfig={root / 'plugstack.conf'}",
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "MpiDefault=none",
        "SchedulerType=sched/backfill",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core_Memory",
        "AccountingStorageType=accounting_storage/none",
        "JobAcctGatherType=jobacct_gather/none",
        "JobCompType=jobcomp/filetxt",
        f"JobCompLoc={root / 'jobcomp.txt'}",
        "MinJobAge=3600",
        "ReturnToService=2",
        _node_line(node),
        f"PartitionName={PARTITION} Nodes={node} Default=YES MaxTime=INFINITE State=UP",
        "",
    ]))
    return conf


def _wait(pred, timeout_s: float, what: str, logs: list[Path]) -> None:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if pred():
            return
        time.sleep(0.2)
    tail = "\n".join(f"--- {p}\n" + p.read_text(errors="replace")[-2000:] for p in logs if p.exists())
    raise TimeoutError(f"{what} within {timeout_s:g} s\n{tail}")


def _pid(path: Path) -> int | None:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _alive(pid: int | None) -> bool:
    if pid is None:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    with contextlib.suppress(OSError):  # a zombie is dead for our purposes
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    return True


def _stop(pids: dict[str, int | None]) -> list[str]:
    """SIGTERM, then SIGKILL after STOP_TIMEOUT_S; returns the names of those that had to be killed."""
    killed = []
    for pid in pids.values():
        if _alive(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
    end = time.monotonic() + STOP_TIMEOUT_S
    while time.monotonic() < end and any(_alive(p) for p in pids.values()):
        time.sleep(0.2)
    for name, pid in pids.items():
        if _alive(pid):
            killed.append(name)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    return killed


def _node_ready(env: dict[str, str], node: str) -> bool:
    r = subprocess.run(["sinfo", "-h", "-n", node, "-o", "%t"], env=env, capture_output=True, text=True,
                       timeout=30)
    return r.returncode == 0 and r.stdout.strip() in ("idle", "mix", "alloc")


def _queue_empty(env: dict[str, str]) -> bool:
    r = subprocess.run(["squeue", "-h", "-o", "%i"], env=env, capture_output=True, text=True, timeout=30)
    return r.returncode == 0 and not r.stdout.strip()


def system_conf_state(system_conf: Path = SYSTEM_CONF) -> tuple[str, SlurmTestCluster | None]:
    """What is at ``system_conf``: ``("absent", None)``; ``("site", None)``, a configuration that is not a lowbw
    test cluster's; ``("running", c)``, a test cluster whose creator is alive (another test run); ``("left", c)``,
    a test cluster whose creator is gone (for :func:`lowbw.workflow.doctor.stop_slurm_test_cluster`)."""
    if not (system_conf.exists() or system_conf.is_symlink()):
        return "absent", None
    c = slurm_test_cluster(system_conf)
    if c is None:
        return "site", None
    return ("running" if c.creator_alive else "left"), c


def remove_leftover(c: SlurmTestCluster) -> str:
    """Stop a test cluster whose creator is gone (as ``lowbw doctor`` does) and say what was removed."""
    killed = stop_slurm_test_cluster(c, STOP_TIMEOUT_S)
    return (f"removed a test SLURM cluster left by pid {c.creator} in {c.root} ({len(c.processes)} process(es)"
            + (f", {len(killed)} SIGKILLed" if killed else "") + f") and the {c.conf} symlink")


@contextlib.contextmanager
def _signals_interrupt() -> Iterator[None]:
    """While inside: SIGTERM and SIGHUP raise KeyboardInterrupt (as SIGINT does), so pytest stops and runs its
    fixtures' teardown instead of dying with the daemons running (a time limit sends SIGTERM)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}: tearing the test SLURM cluster down")

    old = {sig: signal.signal(sig, interrupt) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)


def _ignore_signals() -> None:
    """No signal may cut the teardown short (a time limit's SIGKILL still ends everything)."""
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
            signal.signal(sig, signal.SIG_IGN)


@contextlib.contextmanager
def local_cluster(tmp: Path, system_conf: Path = SYSTEM_CONF) -> Iterator[LocalSlurm]:
    """Start munged, slurmctld and slurmd under ``tmp/slurm`` and yield the cluster. On exit (also on an
    error, SIGINT, SIGTERM or SIGHUP) every job is cancelled, the daemons are shut down (SIGKILL after
    STOP_TIMEOUT_S) and checked gone, and the ``system_conf`` symlink (/etc/slurm/slurm.conf) is removed; a
    daemon that had to be killed is an error. Raises FileExistsError where ``system_conf`` exists (a site's
    configuration, another test cluster, or a leftover: see :func:`system_conf_state`)."""
    if system_conf.exists() or system_conf.is_symlink():
        raise FileExistsError(f"{system_conf} exists: this machine has its own SLURM configuration")
    with _signals_interrupt():
        yield from _local_cluster(Path(tmp), system_conf)


def _local_cluster(tmp: Path, system_conf: Path) -> Iterator[LocalSlurm]:
    root = Path(tmp) / "slurm"
    (root / "munge").mkdir(parents=True)
    root.chmod(0o700)
    (root / SLURM_MARKER).write_text(json.dumps({"creator_pid": os.getpid(), "creator_start": process_start(
        os.getpid()), "created": time.time(), "conf": str(root / "slurm.conf")}))
    key = root / "munge" / "munge.key"
    key.write_bytes(os.urandom(128))
    key.chmod(0o600)
    sock = root / "munge" / "munge.socket"
    node = socket.gethostname().split(".")[0]
    pidfiles = {"munged": root / "munge" / "munged.pid", "slurmctld": root / "slurmctld.pid",
                "slurmd": root / "slurmd.pid"}
    logs = [root / "munge" / "munged.log", root / "slurmctld.log", root / "slurmd.log"]
    env = None
    try:
        subprocess.run(["munged", "--force", f"--key-file={key}", f"--socket={sock}",
                        f"--pid-file={pidfiles['munged']}", f"--seed-file={root / 'munge' / 'seed'}",
                        f"--log-file={logs[0]}"], check=True, capture_output=True, timeout=30)
        conf = write_conf(root, node, sock)
        system_conf.parent.mkdir(parents=True, exist_ok=True)
        system_conf.symlink_to(conf)
        env = dict(os.environ, SLURM_CONF=str(conf))
        subprocess.run(["slurmctld", "-f", str(conf), "-i"], check=True, capture_output=True, timeout=30, env=env)
        subprocess.run(["slurmd", "-f", str(conf)], check=True, capture_output=True, timeout=30, env=env)
        _wait(lambda: _node_ready(env, node), START_TIMEOUT_S, f"node {node} did not come up", logs)
        yield LocalSlurm(root, conf, PARTITION, root / "jobcomp.txt", env)
    finally:
        old = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)}
        _ignore_signals()
        try:
            _teardown(env, pidfiles, root, system_conf)
        finally:
            for sig, handler in old.items():
                with contextlib.suppress(ValueError, TypeError):
                    signal.signal(sig, handler)


def _teardown(env: dict[str, str] | None, pidfiles: dict[str, Path], root: Path, system_conf: Path) -> None:
    """Cancel every job, shut the daemons down (SIGKILL after STOP_TIMEOUT_S), remove the symlink."""
    if env is not None and _alive(_pid(pidfiles["slurmctld"])):
        subprocess.run(["scancel", "--full", "--partition", PARTITION], env=env, capture_output=True, timeout=30)
        with contextlib.suppress(TimeoutError):
            _wait(lambda: _queue_empty(env), STOP_TIMEOUT_S, "jobs still queued", [])
        subprocess.run(["scontrol", "shutdown"], env=env, capture_output=True, timeout=30)
    pids = {name: _pid(p) for name, p in pidfiles.items()}
    slurm = {k: v for k, v in pids.items() if k != "munged"}
    killed = _stop(slurm) + _stop({"munged": pids["munged"]})
    if system_conf.is_symlink() and os.readlink(system_conf) == str(root / "slurm.conf"):
        system_conf.unlink()
    if killed:
        raise RuntimeError(f"had to SIGKILL {', '.join(killed)} of the test cluster in {root}")


def job_records(cluster: LocalSlurm) -> list[JobRecord]:
    """Every job the cluster finished, from its job-completion log (one ``Key=Value ...`` line per job)."""
    if not cluster.jobcomp.exists():
        return []
    out = []
    for line in cluster.jobcomp.read_text().splitlines():
        f = dict(kv.split("=", 1) for kv in line.split() if "=" in kv)
        out.append(JobRecord(int(f["JobId"]), f.get("Name", ""), f.get("JobState", ""), f.get("ExitCode", ""),
                             f.get("Partition", ""), f.get("Tres", "")))
    return out


def show_jobs(cluster: LocalSlurm) -> list[dict[str, str]]:
    """``scontrol show job`` of every job the controller still holds, one dict of its fields per job."""
    r = subprocess.run(["scontrol", "show", "job", "--oneliner"], env=cluster.env, capture_output=True, text=True,
                       timeout=30, check=True)
    jobs = []
    for line in r.stdout.splitlines():
        if line.strip() and "JobId=" in line:
            fields = (kv.split("=", 1) for kv in re.split(r" (?=[A-Za-z:/]+=)", line.strip()) if "=" in kv)
            jobs.append({k: v.strip() for k, v in fields})
    return jobs
