"""``python -m lowbw doctor``: find and remove what crashed or killed lowbw runs left behind.

* testbed network namespaces (``<prefix>-<pid>-...``) whose creating process is gone (``--all``: every one
  with the prefix, also of running testbeds), and the processes still running inside them;
* orphaned training workers: ``lowbw.train.worker`` processes whose launcher is gone (re-parented);
* stale run-directory locks (``.lock`` under ``--runs``, default ``runs``): locks held only by orphaned
  workers; killing them releases the lock (flock locks die with their holders). Locks of live runs are
  listed with their holders and left alone; an unheld ``.lock`` file blocks nothing and is kept (deleting
  it could let two runs lock two different files).

Nothing is removed with ``--dry-run``. Exit status 0 when nothing was left behind or all of it was removed.

``python -m lowbw.doctor --guard TAG`` is the helper the procs launcher starts next to a testbed: it waits
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

__all__ = ["Findings", "scan", "clean", "add_parser", "main", "guard"]

WORKER_MODULE = "lowbw.train.worker"


@dataclass
class Findings:
    """What a scan found: namespace names, orphaned worker PIDs, locks held only by orphans, locks of live
    runs -> holder PIDs."""

    namespaces: list[str] = field(default_factory=list)
    orphans: list[int] = field(default_factory=list)
    stale_locks: list[Path] = field(default_factory=list)
    held_locks: dict[Path, list[int]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def empty(self) -> bool:
        return not (self.namespaces or self.orphans or self.stale_locks)


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


def _locks(runs: Path, orphans: list[int]) -> tuple[list[Path], dict[Path, list[int]]]:
    """(locks held only by orphans, locks held by live runs -> holder PIDs)."""
    from lowbw.runio import lock_holders

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


def scan(runs: str | Path = "runs", prefix: str = "lbw", all_: bool = False) -> Findings:
    """Look for leftovers; removes nothing."""
    f = Findings()
    from lowbw.net.testbed import list_leftovers, netns_missing

    missing = netns_missing()
    if missing:
        f.notes.append("namespaces not checked: " + "; ".join(missing))
    else:
        f.namespaces = list_leftovers(prefix, all_)
    f.orphans = orphaned_workers()
    f.stale_locks, f.held_locks = _locks(Path(runs), f.orphans)
    return f


def clean(f: Findings) -> None:
    """Remove what ``f`` lists: kill orphans (which releases their locks) and delete namespaces."""
    from lowbw.net.namespaces import delete_namespaces

    for pid in f.orphans:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    delete_namespaces(f.namespaces)


def guard(tag: str) -> int:
    """Wait for EOF on stdin, then delete namespaces ``tag-*`` and kill what runs in them."""
    with contextlib.suppress(OSError):
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # the launcher's Ctrl-C is not ours to die of
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        while sys.stdin.buffer.read(65536):
            pass
    from lowbw.net.namespaces import delete_namespaces
    from lowbw.net.probe import run_command

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


def main(args: argparse.Namespace) -> int:
    f = scan(args.runs, args.prefix, args.all_)
    for n in f.notes:
        print(f"note: {n}")
    for ns in f.namespaces:
        print(f"namespace {ns}: left by a dead testbed")
    for pid in f.orphans:
        print(f"worker {pid}: orphaned ({' '.join(_cmdline(pid))[:120]})")
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
    print(f"removed {len(f.namespaces)} namespace(s), {len(f.orphans)} orphaned worker(s), "
          f"released {len(f.stale_locks)} stale lock(s)")
    return 0


if __name__ == "__main__":
    ap = argparse.ArgumentParser(prog="python -m lowbw.doctor", description=__doc__.splitlines()[0])
    ap.add_argument("--guard", metavar="TAG", help=argparse.SUPPRESS)
    _args(ap)
    a = ap.parse_args()
    sys.exit(guard(a.guard) if a.guard else main(a))
