"""The machine's conditions while a benchmark measured: load, CPU steal, other processes' CPU, own CPU time.

A timing taken while other work shares the cores is not the machine's: two workers on two cores at load 6-8
took twice as long as on the idle machine. Every benchmark that times anything wraps its measurement in
:func:`record` (before, during from a background sampler, after) and writes :meth:`Conditions.to_json` into its
result under ``"conditions"`` (and per cell where it has cells); :func:`check` prints a warning on stderr when
the machine was busy, and with ``--strict`` refuses to write the result (one-line error, exit 1).

Sources (Linux): ``/proc/loadavg`` (1/5/15-minute load averages: runnable + uninterruptible tasks, ours
included), ``/proc/stat``'s aggregate ``cpu`` line (jiffies of all cores: busy = user + nice + system + irq +
softirq, steal = time the hypervisor ran another guest), ``/proc/<pid>/stat`` of every process (its parent,
its own and its reaped children's user + system ticks). Over a span of wall time ``W`` s on ``C`` cores:

* ``cpu_busy = busy jiffies / all jiffies`` (0..1, all cores together)
* ``steal = steal jiffies / all jiffies``
* ``own CPU s``: the CPU of our process tree, the processes descended from its root (``utime + stime + cutime
  + cstime`` summed over them, so a member that exits and is reaped by its parent keeps counting). The root is
  the workflow that launched the benchmark where it says so (``$LOWBW_WORKFLOW_PID``, which the Snakefile
  sets to Snakemake's pid: Snakemake, papermill, its kernel and the benchmark's workers are the build's own
  work, not contention), else this process (the benchmark and its workers, running or reaped). The workflow
  runs a measuring benchmark alone (its ``machine`` resource), so nothing else of the tree competes with it.
* ``own tasks``: the threads of our process tree that are runnable or in uninterruptible sleep (state R or D
  in ``/proc/<pid>/task/<tid>/stat``) at each sample: what the load average counts of ours. Four workers on two
  cores are four runnable tasks but at most two cores of CPU.
* ``others_cores = max(0, busy jiffies / HZ - own CPU s) / W``: other processes' CPU, in cores, on average

Verdict ``busy`` (any of; the thresholds are the module's constants):

* ``others_cores > OTHERS_MAX * C`` -- other processes took more than a quarter of the cores;
* ``steal > STEAL_MAX`` -- the hypervisor took more than 5% of the CPU time;
* each rate beyond the resolution of the counters it comes from (one tick, ``1 / HZ`` s, of each over the span:
  a short cell's single stolen tick is not steal it can resolve; see :func:`verdict`);
* only where ``/proc/stat`` cannot be read (no ``others_cores``): ``mean load1 - max(own cores, mean own tasks) >
  LOAD_EXCESS_MAX * C`` -- more tasks wanted a core than there were, beyond our own (our own tasks subtracted as
  the load counts them, by task, not by core). Where other processes' CPU is measured it decides alone: the
  1-minute load average lags by a minute, so a benchmark that starts right after our own four-worker cells
  read a load of 3.5 on an idle machine.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import threading
import time
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

__all__ = ["OTHERS_MAX", "STEAL_MAX", "LOAD_EXCESS_MAX", "CLOCK_HZ", "WORKFLOW_PID_ENV", "tree_root", "Sample",
           "Conditions", "Recorder", "record", "verdict", "check", "add_strict_flag", "describe", "is_busy"]

OTHERS_MAX = 0.25  # other processes' CPU, as a fraction of the cores, above which the machine was busy
STEAL_MAX = 0.05  # fraction of CPU time stolen by the hypervisor above which the machine was busy
LOAD_EXCESS_MAX = 1.0  # mean 1-minute load less our own cores, as a multiple of the cores, above which busy

_PROC_STAT = Path("/proc/stat")
_PROC_LOADAVG = Path("/proc/loadavg")


@dataclass(frozen=True)
class Sample:
    """One look at the machine."""

    t: float  # seconds since the recording started (monotonic clock)
    load1: float  # 1-minute load average
    cpu_busy: float | None  # fraction of all cores' time busy since the previous sample (None: no /proc/stat)
    steal: float | None  # fraction of all cores' time stolen since the previous sample (None: no /proc/stat)
    own_cores: float  # our process tree's CPU seconds per wall second since the previous sample
    own_tasks: int = 0  # our process tree's threads runnable or in uninterruptible sleep at this look


@dataclass(frozen=True)
class Conditions:
    """The machine while one benchmark (or one of its cells) measured."""

    host: str  # hostname
    cores: int  # os.cpu_count()
    date: str  # UTC start, ISO 8601
    wall_s: float  # wall seconds from before to after
    cpu_s: float  # our process tree's user + system CPU seconds over the span (module docstring)
    load_before: tuple[float, float, float]  # 1/5/15-minute load averages before
    load_after: tuple[float, float, float]  # 1/5/15-minute load averages after
    load1_max: float  # highest 1-minute load average of all samples
    load1_mean: float  # mean 1-minute load average of all samples (before, during, after)
    cpu_busy: float | None  # fraction of all cores' time busy over the span (None: no /proc/stat)
    steal: float | None  # fraction of all cores' time stolen over the span (None: no /proc/stat)
    others_cores: float | None  # other processes' CPU over the span, in cores (None: no /proc/stat)
    during: tuple[Sample, ...]  # background samples between before and after (bounded, thinned when long)
    busy: bool  # the verdict (module docstring)
    reasons: tuple[str, ...]  # why busy, one phrase each (empty when not)
    tree: str = ""  # whose CPU counted as ours: "workflow <pid>" ($LOWBW_WORKFLOW_PID) or "process <pid>"
    own_tasks_mean: float = 0.0  # mean over the looks (before, during, after) of our runnable threads

    def to_json(self, samples: bool = True) -> dict[str, Any]:
        """A JSON-ready dict (``samples=False``: without the ``during`` samples, for per-cell records)."""
        d = asdict(self)
        d["load_before"], d["load_after"] = list(self.load_before), list(self.load_after)
        d["reasons"] = list(self.reasons)
        d["during"] = [asdict(s) for s in self.during] if samples else []
        d["own_cores"] = self.cpu_s / self.wall_s if self.wall_s > 0 else 0.0
        d["thresholds"] = {"others_max_frac_of_cores": OTHERS_MAX, "steal_max": STEAL_MAX,
                           "load_excess_max_frac_of_cores": LOAD_EXCESS_MAX}
        return d


def _loadavg() -> tuple[float, float, float]:
    try:
        return tuple(float(x) for x in _PROC_LOADAVG.read_text().split()[:3])  # type: ignore[return-value]
    except (OSError, ValueError):
        return os.getloadavg()


def _jiffies() -> tuple[int, int, int] | None:
    """(busy, steal, total) jiffies of all cores since boot, or None where /proc/stat is not readable."""
    try:
        with _PROC_STAT.open() as f:
            first = f.readline().split()
    except OSError:
        return None
    if not first or first[0] != "cpu":
        return None
    v = [int(x) for x in first[1:9]] + [0] * max(0, 8 - len(first[1:9]))
    user, nice, system, idle, iowait, irq, softirq, steal = v[:8]
    busy = user + nice + system + irq + softirq
    return busy, steal, busy + idle + iowait + steal


WORKFLOW_PID_ENV = "LOWBW_WORKFLOW_PID"  # the pid of the workflow whose process tree counts as ours
_PROC = Path("/proc")
# clock ticks a second of the /proc counters (USER_HZ)
CLOCK_HZ = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _processes() -> dict[int, tuple[int, int]] | None:
    """``{pid: (parent pid, CPU ticks: own + reaped children's user and system)}`` of every process, or None
    where /proc is not readable (a process that exits while read is left out)."""
    table = _process_table()
    return None if table is None else {pid: (ppid, ticks) for pid, (ppid, ticks, _) in table.items()}


def _process_table() -> dict[int, tuple[int, int, str]] | None:
    """``{pid: (parent pid, CPU ticks, state letter)}`` of every process (:func:`_processes`)."""
    if not (_PROC / "self" / "stat").exists():
        return None
    out = {}
    for d in os.listdir(_PROC):
        if not d.isdigit():
            continue
        try:
            raw = (_PROC / d / "stat").read_bytes()
        except OSError:
            continue
        f = raw[raw.rindex(b")") + 2:].split()  # after "pid (comm) ": state, ppid, ... utime(11) .. cstime(14)
        out[int(d)] = (int(f[1]), int(f[11]) + int(f[12]) + int(f[13]) + int(f[14]), f[0].decode())
    return out


def tree_root() -> int:
    """The root of the process tree whose CPU counts as ours: ``$LOWBW_WORKFLOW_PID`` where that process is
    alive and an ancestor of this one, else this process (module docstring)."""
    me = os.getpid()
    try:
        root = int(os.environ.get(WORKFLOW_PID_ENV, ""))
    except ValueError:
        return me
    procs = _processes() or {}
    pid, seen = me, set()
    while pid in procs and pid not in seen:  # walk up: is root an ancestor?
        if pid == root:
            return root
        seen.add(pid)
        pid = procs[pid][0]
    return me


def _runnable_threads(pid: int) -> int:
    """Threads of ``pid`` in state R (running or runnable) or D (uninterruptible): what the load counts."""
    n = 0
    try:
        tids = os.listdir(_PROC / str(pid) / "task")
    except OSError:
        return 0
    for tid in tids:
        try:
            raw = (_PROC / str(pid) / "task" / tid / "stat").read_bytes()
        except OSError:
            continue
        n += raw[raw.rindex(b")") + 2:raw.rindex(b")") + 3] in (b"R", b"D")
    return n


def _tree_usage(root: int) -> tuple[float, int]:
    """(CPU seconds so far, runnable threads now) of ``root`` and its descendants (CPU: own + reaped
    children's); without /proc, this process's and its reaped children's CPU (``os.times``) and 0 threads."""
    procs = _process_table()
    if procs is None or root not in procs:
        t = os.times()
        return t.user + t.system + t.children_user + t.children_system, 0
    children: dict[int, list[int]] = {}
    for pid, (ppid, _, _) in procs.items():
        children.setdefault(ppid, []).append(pid)
    ticks, tasks, todo = 0, 0, [root]
    while todo:
        pid = todo.pop()
        ticks += procs[pid][1]
        tasks += _runnable_threads(pid) if procs[pid][2] != "Z" else 0  # a zombie has no threads left
        todo.extend(children.get(pid, ()))
    return ticks / CLOCK_HZ, tasks



@dataclass(frozen=True)
class _Raw:
    mono: float  # time.monotonic()
    load: tuple[float, float, float]  # 1/5/15-minute load averages
    jiffies: tuple[int, int, int] | None  # (busy, steal, total) since boot
    own_cpu: float  # our process tree's CPU seconds so far
    own_tasks: int  # our process tree's runnable threads now


def _raw(root: int) -> _Raw:
    cpu, tasks = _tree_usage(root)
    return _Raw(time.monotonic(), _loadavg(), _jiffies(), cpu, tasks)


def _fractions(a: _Raw, b: _Raw) -> tuple[float | None, float | None, int | None]:
    """(busy fraction, steal fraction, busy jiffies) from a to b."""
    if a.jiffies is None or b.jiffies is None:
        return None, None, None
    busy, steal, total = (y - x for x, y in zip(a.jiffies, b.jiffies))
    if total <= 0:
        return 0.0, 0.0, 0
    return busy / total, steal / total, busy


def verdict(cores: int, others_cores: float | None, steal: float | None, load1_mean: float,
            own_cores: float, own_tasks: float = 0.0, wall_s: float | None = None) -> tuple[str, ...]:
    """Why the machine counts as busy (empty: it did not); the rules of the module docstring.

    With ``wall_s`` (the span, s) a rate must exceed its threshold by more than the counters' resolution,
    one clock tick (``1 / HZ`` s) of each counter it is computed from: ``steal`` by ``1 / (HZ * wall_s *
    cores)``, ``others_cores`` by ``2 / (HZ * wall_s)`` (the machine's busy ticks and our tree's CPU ticks).
    A 66 ms cell on 2 cores spans 13 ticks, so one stolen tick reads as 7.7% steal and says nothing."""
    why = []
    tick = 0.0 if not wall_s or wall_s <= 0 else 1.0 / (CLOCK_HZ * wall_s)
    if others_cores is not None and others_cores - 2 * tick > OTHERS_MAX * cores:
        why.append(f"other processes used {others_cores:.2f} of {cores} cores")
    if steal is not None and steal - tick / cores > STEAL_MAX:
        why.append(f"CPU steal {100 * steal:.1f}%")
    ours = max(own_cores, own_tasks)
    if others_cores is None and load1_mean - ours > LOAD_EXCESS_MAX * cores:
        why.append(f"load {load1_mean:.1f} on {cores} cores ({ours:.1f} of it ours)")
    return tuple(why)


class Recorder:
    """Records the machine's conditions over a span: ``with record() as rec: ...`` then ``rec.conditions``.

    A daemon thread samples every ``interval_s`` seconds (0: no thread, before and after only); at
    ``max_samples`` it drops every other sample and doubles its interval, so a long benchmark keeps a bounded
    record of its whole span; it stops at :meth:`stop` or by itself after ``max_s`` seconds."""

    def __init__(self, interval_s: float = 1.0, max_samples: int = 256, max_s: float = 48 * 3600):
        if interval_s < 0 or max_samples < 2 or max_s <= 0:
            raise ValueError(f"record: interval_s={interval_s} (>= 0), max_samples={max_samples} (>= 2), "
                             f"max_s={max_s} (> 0)")
        self.interval_s, self.max_samples, self.max_s = interval_s, max_samples, max_s
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._samples: list[Sample] = []
        self._thread: threading.Thread | None = None
        self._before: _Raw | None = None
        self._date = ""
        self._root = os.getpid()  # the root of our process tree (tree_root(), fixed at start)
        self.conditions: Conditions | None = None

    def start(self) -> Recorder:
        self._date = datetime.now(UTC).isoformat(timespec="seconds")
        self._root = tree_root()
        self._before = _raw(self._root)
        if self.interval_s > 0:
            self._thread = threading.Thread(target=self._run, name="lowbw-conditions", daemon=True)
            self._thread.start()
        return self

    def _run(self) -> None:
        assert self._before is not None
        prev, interval = self._before, self.interval_s
        while not self._stop.wait(interval):
            now = _raw(self._root)
            if now.mono - self._before.mono > self.max_s:
                return
            busy, steal, _ = _fractions(prev, now)
            dt = now.mono - prev.mono
            s = Sample(round(now.mono - self._before.mono, 3), now.load[0], busy, steal,
                       (now.own_cpu - prev.own_cpu) / dt if dt > 0 else 0.0, now.own_tasks)
            with self._lock:
                self._samples.append(s)
                if len(self._samples) >= self.max_samples:
                    self._samples = self._samples[1::2]
                    interval *= 2
            prev = now

    def stop(self) -> Conditions:
        """End the span (joins the sampler, at most one interval) and return its :class:`Conditions`."""
        if self._before is None:
            raise RuntimeError("Recorder.stop() before start()")
        if self.conditions is not None:
            return self.conditions
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        after, before = _raw(self._root), self._before
        with self._lock:
            during = tuple(self._samples)
        wall = max(after.mono - before.mono, 1e-9)
        cpu = max(0.0, after.own_cpu - before.own_cpu)  # < 0 only where a member left the tree unreaped
        busy, steal, busy_j = _fractions(before, after)
        others = None if busy_j is None else max(0.0, busy_j / CLOCK_HZ - cpu) / wall
        cores = os.cpu_count() or 1
        loads = [before.load[0], *(s.load1 for s in during), after.load[0]]
        mean = sum(loads) / len(loads)
        tasks = [before.own_tasks, *(s.own_tasks for s in during), after.own_tasks]
        own_tasks = sum(tasks) / len(tasks)
        why = verdict(cores, others, steal, mean, cpu / wall, own_tasks, wall)
        self.conditions = Conditions(
            host=socket.gethostname(), cores=cores, date=self._date, wall_s=wall, cpu_s=cpu,
            load_before=before.load, load_after=after.load, load1_max=max(loads), load1_mean=mean,
            cpu_busy=busy, steal=steal, others_cores=others, during=during, busy=bool(why), reasons=why,
            tree=f"{'workflow' if self._root != os.getpid() else 'process'} {self._root}", own_tasks_mean=own_tasks)
        return self.conditions

    def __enter__(self) -> Recorder:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def record(interval_s: float = 1.0, max_samples: int = 256, max_s: float = 48 * 3600) -> Recorder:
    """A :class:`Recorder` (not started: use it as a context manager or call ``.start()``)."""
    return Recorder(interval_s, max_samples, max_s)


def describe(c: Conditions | dict[str, Any]) -> str:
    """One line: ``load 0.4/1.9/0.5 (before/max/after) on 2 cores, others 0.1 cores, steal 0.0%``."""
    d = c.to_json(samples=False) if isinstance(c, Conditions) else c
    steal = "n/a" if d.get("steal") is None else f"{100 * d['steal']:.1f}%"
    others = "n/a" if d.get("others_cores") is None else f"{d['others_cores']:.2f}"
    return (f"load {d['load_before'][0]:.1f}/{d['load1_max']:.1f}/{d['load_after'][0]:.1f} "
            f"(before/max/after) on {d['cores']} cores, others {others} cores, steal {steal}")


def is_busy(d: dict[str, Any] | None) -> bool:
    """Whether a recorded ``conditions`` dict says busy (False where none was recorded)."""
    return bool(d and d.get("busy"))


def add_strict_flag(ap: argparse.ArgumentParser) -> None:
    """``--strict``: refuse to write the result when the machine was busy (exit 1)."""
    ap.add_argument("--strict", action="store_true",
                    help="refuse to write the result when the machine was busy while measuring (load, other "
                    "processes' CPU or steal above lowbw.measure.conditions' thresholds); exit 1")


def check(c: Conditions, what: str, out: str | os.PathLike | None = None, strict: bool = False) -> bool:
    """Warn on stderr when ``c`` was busy; returns whether the result may be written (False only with
    ``strict`` on a busy machine, after printing the one-line refusal)."""
    if not c.busy:
        return True
    why = "; ".join(c.reasons)
    if strict:
        print(f"{what}: refusing to write {out or 'the result'}: the machine was busy while measuring ({why}; "
              f"{describe(c)}) and --strict was given", file=sys.stderr)
        return False
    print(f"{what}: WARNING: the machine was busy while measuring ({why}; {describe(c)}): the timings may "
          "be slower than this machine's; rerun on an idle machine (--strict refuses to write)", file=sys.stderr)
    return True
