"""``python -m lowbw doctor``: find and remove what crashed or killed lowbw runs left behind.

* testbed network namespaces (``<prefix>-<pid>-...``) whose creating process is gone (``--all``: every one
  with the prefix, also of running testbeds), and the processes still running inside them;
* orphaned training workers: ``lowbw.train.worker`` processes whose launcher is gone (re-parented);
* stale run-directory locks (``.lock`` under ``--runs``, default ``runs``): locks held only by orphaned
  workers; killing them releases the lock (flock locks die with their holders). Locks of live runs are
  listed with their holders and left alone; an unheld ``.lock`` file blocks nothing and is kept (deleting
  it could let two runs lock two different files).
* a one-node SLURM test cluster (``tests/slurm_local.py``) whose creator (the pytest run) is gone: its
  ``munged``/``slurmctld``/``slurmd`` and the ``/etc/slurm/slurm.conf`` symlink into its directory. Ours is
  told from a site's own configuration by its marker (``lowbw-test-cluster.json`` next to the linked
  ``slurm.conf``, a ``# lowbw test cluster`` line in it) or its cluster name (``ClusterName=lowbwtest``);
  a site's configuration is never touched.

Nothing is removed with ``--dry-run``. Exit status 0 when nothing was left behind or all of it was removed.

``python -m lowbw.workflow.doctor --guard TAG`` is the helper the procs launcher starts next to a testbed: it waits
for EOF on stdin (the launcher exited or was killed) and deletes the namespaces named ``TAG-*``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
from dataclasses import dataclass, field
from pathlib import Path

from lowbw.net.namespaces import delete_namespaces, ns_processes
from lowbw.net.probe import run_command
from lowbw.net.testbed import list_leftovers, netns_missing
from lowbw.runs.io import lock_holders

__all__ = ["Findings", "SlurmTestCluster", "scan", "clean", "add_parser", "main", "guard", "slurm_test_cluster",
           "stop_slurm_test_cluster", "process_start", "SLURM_CONF", "SLURM_MARKER", "SLURM_CLUSTER_NAME"]

WORKER_MODULE = "lowbw.train.worker"
#: where SLURM's tools look for their configuration (the test cluster links its own there while it runs)
SLURM_CONF = Path("/etc/slurm/slurm.conf")
#: the marker file a test cluster writes next to its slurm.conf, and its cluster name
SLURM_MARKER = "lowbw-test-cluster.json"
SLURM_CLUSTER_NAME = "lowbwtest"
SLURM_DAEMONS = ("munged", "slurmctld", "slurmd")


@dataclass
class Findings:
    """What a scan found: namespace names, orphaned worker PIDs, locks held only by orphans, locks of live
    runs -> holder PIDs."""

    namespaces: list[str] = field(default_factory=list)
    orphans: list[int] = field(default_factory=list)
    stale_locks: list[Path] = field(default_factory=list)
    held_locks: dict[Path, list[int]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    ns_processes: dict[str, list[tuple[int, str]]] = field(default_factory=dict)  # namespace -> (pid, command)
    slurm: list[SlurmTestCluster] = field(default_factory=list)  # test clusters whose creator is gone

    def empty(self) -> bool:
        return not (self.namespaces or self.orphans or self.stale_locks or self.slurm)

    def orphans_outside(self) -> list[int]:
        """Orphaned workers not running in one of the namespaces (those go with their namespace)."""
        inside = {pid for procs in self.ns_processes.values() for pid, _ in procs}
        return [p for p in self.orphans if p not in inside]


def _cmdline(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode("utf-8", "replace").split("\0")
    except OSError:
        return []


def _ppid(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return -1


def orphaned_workers() -> list[int]:
    """PIDs of lowbw workers whose launcher is gone: re-parented to init/a subreaper, or their
    ``LOWBW_PARENT_PID`` no longer their parent."""
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) == os.getpid():
            continue
        pid = int(d.name)
        cmd = _cmdline(pid)
        if WORKER_MODULE not in cmd:
            continue
        ppid = _ppid(pid)
        want = None
        with contextlib.suppress(OSError):
            for kv in (d / "environ").read_bytes().split(b"\0"):
                if kv.startswith(b"LOWBW_PARENT_PID="):
                    want = int(kv.split(b"=", 1)[1] or 0)
        parent_cmd = _cmdline(ppid)
        if ppid <= 1 or (want is not None and ppid != want) or not any("python" in c or "torch" in c
                                                                       for c in parent_cmd[:3]):
            out.append(pid)
    return sorted(out)


def process_start(pid: int) -> int | None:
    """The start time of process ``pid`` (clock ticks since boot, /proc/PID/stat field 22), None if gone:
    with the pid it names one process even after the pid is reused."""
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


# ------------------------------------------------------------------------------------ SLURM test clusters
@dataclass
class SlurmTestCluster:
    """A one-node SLURM test cluster (tests/slurm_local.py) found through ``conf`` (the symlink it made)."""

    conf: Path  # the symlink (normally /etc/slurm/slurm.conf)
    root: Path  # the cluster's private directory (its slurm.conf, pid files, logs)
    creator: int | None  # the pid of the process that made it (None: unknown)
    creator_alive: bool
    processes: list[tuple[int, str]] = field(default_factory=list)  # (pid, command) of its daemons


def _read_marker(root: Path) -> dict | None:
    import json

    try:
        return json.loads((root / SLURM_MARKER).read_text())
    except (OSError, ValueError):
        return None


def _ours(conf: Path, root: Path) -> bool:
    """Whether ``conf`` (a symlink to ``root/slurm.conf``) is a lowbw test cluster's: its marker, or its
    cluster name; a dangling link into a ``slurm`` directory under the temporary directory (the test's
    directory was deleted) counts as ours too."""
    import tempfile

    if (root / SLURM_MARKER).exists():
        return True
    try:
        text = (root / "slurm.conf").read_text(errors="replace")
    except OSError:
        tmp = os.path.realpath(tempfile.gettempdir())
        return root.name == "slurm" and not root.exists() and str(root).startswith(tmp + os.sep)
    name = f"ClusterName={SLURM_CLUSTER_NAME}"
    return "# lowbw test cluster" in text or any(ln.split("#")[0].replace(" ", "") == name for ln in text.splitlines())


def _cluster_processes(root: Path) -> list[tuple[int, str]]:
    """The daemons of the cluster in ``root``: those its pid files name, and every process whose command line
    names ``root`` (munged --key-file=ROOT/..., slurmctld/slurmd -f ROOT/slurm.conf)."""
    pids = set()
    for rel in ("munge/munged.pid", "slurmctld.pid", "slurmd.pid"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            pids.add(int((root / rel).read_text().split()[0]))
    needle = str(root) + os.sep
    for d in Path("/proc").iterdir():
        if d.name.isdigit() and int(d.name) != os.getpid() and any(needle in a for a in _cmdline(int(d.name))):
            pids.add(int(d.name))
    return sorted((p, " ".join(_cmdline(p)).strip()) for p in pids if _cmdline(p) and _ppid(p) != -1)


def slurm_test_cluster(conf: str | Path = SLURM_CONF) -> SlurmTestCluster | None:
    """The lowbw test cluster that ``conf`` links to, alive or not, or None (no file there, or a site's own
    configuration)."""
    conf = Path(conf)
    if not conf.is_symlink():
        return None  # absent, or a regular file: a site's configuration
    target = Path(os.readlink(conf))
    root = (conf.parent / target).parent if not target.is_absolute() else target.parent
    if not _ours(conf, root):
        return None
    marker = _read_marker(root) or {}
    creator = marker.get("creator_pid")
    alive = bool(creator) and process_start(int(creator)) is not None and (
        marker.get("creator_start") is None or process_start(int(creator)) == marker.get("creator_start"))
    return SlurmTestCluster(conf, root, creator, alive, _cluster_processes(root))


def stop_slurm_test_cluster(c: SlurmTestCluster, timeout_s: float = 30.0) -> list[int]:
    """Cancel its jobs and shut it down (where its controller still answers), stop its daemons (SIGTERM,
    SIGKILL after ``timeout_s``) and remove the symlink ``c.conf``. The cluster's directory is left alone.
    Returns the pids that had to be killed."""
    import shutil
    import subprocess
    import time

    conf = c.root / "slurm.conf"
    if conf.exists() and shutil.which("scontrol"):
        env = dict(os.environ, SLURM_CONF=str(conf))
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            subprocess.run(["scancel", "--full", "--partition", SLURM_CLUSTER_NAME], env=env, capture_output=True,
                           timeout=15)
            subprocess.run(["scontrol", "shutdown"], env=env, capture_output=True, timeout=15)
    pids = [p for p, _ in c.processes]
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGTERM)
    end = time.monotonic() + timeout_s
    while time.monotonic() < end and any(process_start(p) is not None and not _zombie(p) for p in pids):
        time.sleep(0.1)
    killed = [p for p in pids if process_start(p) is not None and not _zombie(p)]
    for pid in killed:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    if c.conf.is_symlink():
        with contextlib.suppress(OSError):
            c.conf.unlink()
    return killed


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return True


def _locks(runs: Path, orphans: list[int]) -> tuple[list[Path], dict[Path, list[int]]]:
    """(locks held only by orphans, locks held by live runs -> holder PIDs)."""
    stale, held = [], {}
    if not runs.is_dir():
        return stale, held
    for p in runs.rglob(".lock"):
        pids = lock_holders(p)
        if pids and set(pids) <= set(orphans):
            stale.append(p)
        elif pids:
            held[p] = pids
    return sorted(stale), held


def scan(runs: str | Path = "runs", prefix: str = "lbw", all_: bool = False,
         slurm_conf: str | Path = SLURM_CONF) -> Findings:
    """Look for leftovers; removes nothing."""
    f = Findings()
    missing = netns_missing()
    if missing:
        f.notes.append("namespaces not checked: " + "; ".join(missing))
    else:
        f.namespaces = list_leftovers(prefix, all_)
        f.ns_processes = {ns: ns_processes(ns) for ns in f.namespaces}
    cluster = slurm_test_cluster(slurm_conf)
    if cluster is not None and not cluster.creator_alive:
        f.slurm.append(cluster)
    elif cluster is not None:
        f.notes.append(f"test SLURM cluster in {cluster.root}: its creator (pid {cluster.creator}) is running; "
                       "left alone")
    f.orphans = orphaned_workers()
    f.stale_locks, f.held_locks = _locks(Path(runs), f.orphans)
    return f


def clean(f: Findings) -> None:
    """Remove what ``f`` lists: kill orphans (which releases their locks), delete namespaces (killing what
    runs in them) and stop test SLURM clusters."""
    for pid in f.orphans:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    delete_namespaces(f.namespaces)
    for c in f.slurm:
        stop_slurm_test_cluster(c)


def guard(tag: str) -> int:
    """Wait for EOF on stdin, then delete namespaces ``tag-*`` and kill what runs in them."""
    with contextlib.suppress(OSError):
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # the launcher's Ctrl-C is not ours to die of
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        while sys.stdin.buffer.read(65536):
            pass
    p = run_command(["ip", "netns", "list"], check=False)
    names = [line.split()[0] for line in p.stdout.splitlines() if line.split()]
    delete_namespaces(n for n in names if n.startswith(tag + "-"))
    return 0


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = sub.add_parser("doctor", help="list and remove what killed runs left behind (namespaces, workers, locks)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    _args(p)
    return p


def _args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--runs", default="runs", help="directory of run directories to check for locks (default runs)")
    p.add_argument("--prefix", default="lbw", help="testbed namespace prefix (default lbw)")
    p.add_argument("--all", dest="all_", action="store_true",
                   help="also namespaces of testbeds that are still running (stops them)")
    p.add_argument("--dry-run", "-n", action="store_true", help="only list, remove nothing")
    p.add_argument("--slurm-conf", default=str(SLURM_CONF),
                   help="where a test SLURM cluster links its slurm.conf (default /etc/slurm/slurm.conf)")


def main(args: argparse.Namespace) -> int:
    f = scan(args.runs, args.prefix, args.all_, getattr(args, "slurm_conf", SLURM_CONF))
    for n in f.notes:
        print(f"note: {n}")
    for ns in f.namespaces:
        procs = f.ns_processes.get(ns, [])
        print(f"namespace {ns}: left by a dead testbed" + (f", {len(procs)} process(es) in it" if procs else ""))
        for pid, cmd in procs:
            print(f"  process {pid} in {ns}: {cmd[:120]}")
    for pid in f.orphans_outside():
        print(f"worker {pid}: orphaned ({' '.join(_cmdline(pid))[:120]})")
    for c in f.slurm:
        print(f"test SLURM cluster in {c.root}: left by a test run that is gone (pid {c.creator}); "
              f"{c.conf} links to it")
        for pid, cmd in c.processes:
            print(f"  process {pid} of it: {cmd[:120]}")
    for p in f.stale_locks:
        print(f"lock {p}: stale (held only by orphaned workers)")
    for p, pids in sorted(f.held_locks.items()):
        print(f"lock {p}: held by running process(es) {', '.join(map(str, pids))} (left alone)")
    if f.empty():
        print("nothing left behind")
        return 0
    if args.dry_run:
        print("dry run: nothing removed (rerun without --dry-run to remove it)")
        return 1
    clean(f)
    in_ns = sum(len(p) for p in f.ns_processes.values())
    slurm = (f", stopped {len(f.slurm)} test SLURM cluster(s) ({sum(len(c.processes) for c in f.slurm)} "
             f"process(es)) and removed their {', '.join(str(c.conf) for c in f.slurm)}") if f.slurm else ""
    print(f"removed {len(f.namespaces)} namespace(s) with the {in_ns} process(es) running in them, "
          f"{len(f.orphans_outside())} orphaned worker(s) outside them, released {len(f.stale_locks)} stale "
          f"lock(s){slurm}")
    return 0


if __name__ == "__main__":
    ap = argparse.ArgumentParser(prog="python -m lowbw.workflow.doctor", description=__doc__.splitlines()[0])
    ap.add_argument("--guard", metavar="TAG", help=argparse.SUPPRESS)
    _args(ap)
    a = ap.parse_args()
    sys.exit(guard(a.guard) if a.guard else main(a))
