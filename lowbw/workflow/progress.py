"""The workflow's progress line: jobs done, jobs left, and an estimate of the time left from like jobs.

Snakemake's own counter says how many jobs are done, not how long the rest will take. This module keeps the
measured wall time of every finished job under its *key*, the rule and the experiment it belongs to (its
``exp`` wildcard: a training run of the language model takes far longer than one of E4's MLPs), in a small JSON
file that outlives the run (``runs/.progress/durations.json``), so that a rerun's first estimate already rests
on measurements. A pending job is expected to take the mean of its key's durations, else the mean of its rule's,
else it is counted as not timed yet; a rule's jobs share the machine ``cores // threads`` at a time (one at a
time for a job that holds all of the ``machine`` resource, as the measuring benchmarks do). The estimate is the
sum over rules of that work divided by that parallelism: rules are assumed not to overlap, and a job's duration
as measured includes whatever else ran beside it, so the line calls it an estimate (``~``).

Snakemake's scheduler reports per rule how many jobs it will run, not which; the Snakefile names the
experiments of its pending training runs with :func:`expect` (it knows which runs lack their summary), and
:func:`split_pending` reconciles the two. The Snakemake side, which turns log events into calls of
:class:`Progress`, is the logger plugin ``lowbw/snakemake_logger/snakemake_logger_plugin_lowbw``
(``snakemake --logger lowbw``, as the Makefile runs it).
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from pathlib import Path

__all__ = ["Key", "Durations", "Progress", "estimate", "split_pending", "format_seconds", "expect", "expected",
           "key_of", "HISTORY", "LAST_RUN", "KEEP"]

#: (rule, group): group is the job's ``exp`` wildcard, "" for a rule without one
Key = tuple[str, str]
HISTORY = "runs/.progress/durations.json"
#: the last workflow run that had jobs to do (its record, :meth:`Progress.record`), beside the durations
LAST_RUN = "last_run.json"
#: durations kept per key (the newest)
KEEP = 50

_EXPECTED: dict[str, Counter] = {}


def expect(rule: str, groups: Iterable[str]) -> None:
    """Declare the groups (experiments) of ``rule``'s pending jobs, one entry per job (the Snakefile calls it)."""
    _EXPECTED[rule] = Counter(groups)


def expected() -> dict[str, Counter]:
    """What :func:`expect` declared in this process."""
    return {r: Counter(c) for r, c in _EXPECTED.items()}


def key_of(rule: str, wildcards: Mapping[str, str] | None) -> Key:
    return rule, str((wildcards or {}).get("exp", ""))


def _name(key: Key) -> str:
    return f"{key[0]}/{key[1]}" if key[1] else key[0]


def _unname(name: str) -> Key:
    rule, _, group = name.partition("/")
    return rule, group


class Durations:
    """Measured seconds per key and each rule's demand (threads, share of ``machine``), kept in a JSON file."""

    def __init__(self, path: str | Path | None = HISTORY):
        self.path = Path(path) if path else None
        self.seconds: dict[Key, list[float]] = {}
        self.demand: dict[str, dict[str, int]] = {}
        if self.path and self.path.is_file():
            try:
                data = json.loads(self.path.read_text())
                self.seconds = {_unname(k): [float(x) for x in v] for k, v in data.get("seconds", {}).items()}
                self.demand = {r: {k: int(v) for k, v in d.items()} for r, d in data.get("demand", {}).items()}
            except (ValueError, TypeError, AttributeError):
                self.seconds, self.demand = {}, {}  # an unreadable history only costs the first estimate

    def add(self, key: Key, seconds: float) -> None:
        self.seconds[key] = (self.seconds.get(key, []) + [round(float(seconds), 3)])[-KEEP:]

    def per_job(self, key: Key) -> float | None:
        """Expected seconds of one job of ``key``: the mean of its key, else of its rule, else None."""
        own = self.seconds.get(key)
        if own:
            return sum(own) / len(own)
        rule = [s for (r, _), v in self.seconds.items() if r == key[0] for s in v]
        return sum(rule) / len(rule) if rule else None

    def save(self) -> None:
        if not self.path:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}")
        tmp.write_text(json.dumps({"seconds": {_name(k): v for k, v in sorted(self.seconds.items())},
                                   "demand": self.demand}, indent=1, sort_keys=True))
        os.replace(tmp, self.path)


def split_pending(rule_counts: Mapping[str, int], declared: Mapping[str, Mapping[str, int]]) -> Counter:
    """The pending jobs per key: ``rule_counts`` (Snakemake's plan, per rule) split into groups by ``declared``.

    A rule's declared groups are used as they are when they add up to its count; when they declare more (the
    run was asked for a subset), each group is scaled down in proportion; jobs beyond what was declared (a rule
    rerun for changed code or parameters) go to the rule's own group "" (timed by the rule's mean).
    """
    out: Counter = Counter()
    for rule, n in rule_counts.items():
        groups = {g: c for g, c in (declared.get(rule) or {}).items() if c > 0}
        total = sum(groups.values())
        if total > n:
            scaled = {g: c * n // total for g, c in groups.items()}
            for g in sorted(groups, key=lambda g: -(groups[g] * n % total))[: n - sum(scaled.values())]:
                scaled[g] += 1
            groups = scaled
        for g, c in groups.items():
            if c:
                out[(rule, g)] += c
        if n > sum(groups.values()):
            out[(rule, "")] += n - sum(groups.values())
    return out


def estimate(pending: Mapping[Key, int], running: Iterable[tuple[Key, float]],
             per_job: Callable[[Key], float | None], slots: Callable[[str], int]) -> tuple[float, int]:
    """(seconds left, jobs not timed yet) for ``pending`` jobs per key and ``running`` (key, seconds elapsed).

    A rule's work (its pending jobs' expected seconds, plus what its running jobs are expected to have left,
    at least 0) is divided by its parallelism ``slots(rule)``; rules add up.
    """
    work: Counter = Counter()
    untimed = 0
    for key, n in pending.items():
        d = per_job(key)
        if d is None:
            untimed += n
        else:
            work[key[0]] += n * d
    for key, elapsed in running:
        d = per_job(key)
        if d is None:
            untimed += 1
        else:
            work[key[0]] += max(d - elapsed, 0.0)
    return sum(w / max(1, slots(rule)) for rule, w in work.items()), untimed


def _utc(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat(timespec="seconds")


def _load() -> float | None:
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return None


def format_seconds(s: float) -> str:
    if s < 9.95:
        return f"{s:.1f} s"
    if s < 90:
        return f"{s:.0f} s"
    if s < 90 * 60:
        return f"{s / 60:.0f} min"
    return f"{s / 3600:.1f} h"


class Progress:
    """One workflow run's state, fed by the logger plugin: its plan, the jobs started and finished."""

    def __init__(self, durations: Durations, declared: Mapping[str, Mapping[str, int]] | None = None,
                 clock: Callable[[], float] = time.time):
        self.durations = durations
        self.declared = declared if declared is not None else expected()
        self.clock = clock
        self.cores: int | None = None
        self.remote: int | None = None  # jobs at once on a cluster (Snakemake's --jobs), each with its own cores
        self.machine: int | None = None
        self.total = 0
        self.done = 0
        self.left: Counter = Counter()  # pending jobs per key, not yet started
        self.running: dict[int, tuple[Key, float]] = {}
        self.last: Key | None = None
        self.t0: float | None = None
        self.started_at: str | None = None
        self.loads: list[float | None] = []

    def plan(self, stats: Mapping[str, int], cores: int | None = None, machine: int | None = None,
             at: float | None = None) -> None:
        """Snakemake's job counts per rule (its RUN_INFO stats, with ``total``) and the cores it was given.
        ``at``: when it happened on the clock (a log record's time; default now), as for the other events."""
        counts = {r: int(n) for r, n in stats.items() if r != "total"}
        self.total = int(stats.get("total", sum(counts.values())))
        self.left = split_pending(counts, self.declared)
        self.cores = cores or self.cores
        self.machine = machine or self.machine
        self.t0 = self.clock() if at is None else at
        self.started_at = _utc(time.time())
        self.loads.append(_load())

    def started(self, jobid: int, rule: str, wildcards: Mapping[str, str] | None, threads: int = 1,
                machine: int = 0, at: float | None = None) -> None:
        key = key_of(rule, wildcards)
        if jobid not in self.running:  # a retried job is not taken from the plan twice
            take = key if self.left[key] > 0 else (rule, "") if self.left[(rule, "")] > 0 else None
            if take is None:
                take = next((k for k in self.left if k[0] == rule and self.left[k] > 0), None)
            if take is not None:
                self.left[take] -= 1
        self.running[jobid] = (key, self.clock() if at is None else at)
        self.loads.append(_load())
        self.durations.demand[rule] = {"threads": max(1, int(threads)), "machine": int(machine)}
        self.last = key

    def finished(self, jobid: int, at: float | None = None) -> None:
        if jobid in self.running:
            key, t0 = self.running.pop(jobid)
            self.durations.add(key, (self.clock() if at is None else at) - t0)
            self.durations.save()
        self.done += 1
        self.loads.append(_load())

    def slots(self, rule: str) -> int:
        d = self.durations.demand.get(rule, {"threads": 1, "machine": 0})
        n = self.remote or max(1, (self.cores or 1) // max(1, d.get("threads", 1)))
        if d.get("machine") and self.machine:
            n = min(n, max(1, self.machine // d["machine"]))
        return n

    def record(self, argv: list[str]) -> dict:
        """What this run was, for ``runs/.progress/last_run.json`` (read by
        ``python -m lowbw.workflow.reference save``): the command, when it started and ended, its wall time, jobs
        planned and done, cores, and the machine's 1-minute load at its start, highest at any job's start or end,
        and at its end."""
        loads = [x for x in self.loads if x is not None]
        return {"command": list(argv), "started": self.started_at, "finished": _utc(time.time()),
                "wall_s": round(self.elapsed(), 1), "jobs": self.total, "done": self.done, "cores": self.cores,
                "load_1min": {"start": self.loads[0] if self.loads else None, "max": max(loads, default=None),
                              "end": _load()}}

    def elapsed(self) -> float:
        """Seconds since the plan (0 before it)."""
        now = self.clock()
        return now - (now if self.t0 is None else self.t0)

    def line(self) -> str:
        now = self.clock()
        left = max(self.total - self.done, 0)
        if self.total and not left:
            return f"[lowbw] {self.done}/{self.total} jobs done in {format_seconds(self.elapsed())}"
        pending = {k: n for k, n in self.left.items() if n > 0}
        seconds, untimed = estimate(pending, [(k, now - t0) for k, t0 in self.running.values()],
                                    self.durations.per_job, self.slots)
        if untimed and untimed == sum(pending.values()) + len(self.running):
            eta = "time left not known yet (no like job timed)"
        else:
            eta = f"~{format_seconds(seconds)} left"
            if untimed:
                eta += f" + {untimed} job{'s' * (untimed != 1)} not timed yet"
        out = f"[lowbw] {self.done}/{self.total} jobs done, {left} left, {eta}"
        if self.last is not None:
            per = self.durations.per_job(self.last)
            name = " ".join(x for x in self.last if x)
            out += f" ({name} ~{format_seconds(per)}/job)" if per is not None else f" ({name}: first of its kind)"
        return out
