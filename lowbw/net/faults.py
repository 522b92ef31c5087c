"""Faults the testbed injects into a running job: a straggler, a worker that dies, a partitioned link.

* ``--straggle RANK:FACTOR`` -- worker ``RANK`` runs ``FACTOR`` times slower: its process group is stopped
  (SIGSTOP) for ``1 - 1/FACTOR`` of every ``STRAGGLE_PERIOD_S`` and continued (SIGCONT) for the rest, so
  it computes (and sends) at ``1/FACTOR`` of its speed, averaged over a period;
* ``--fail RANK@SECONDS`` -- worker ``RANK``'s process group is killed (SIGKILL) ``SECONDS`` after launch;
* ``--partition RANK@SECONDS:DURATION`` -- worker ``RANK``'s link goes down for ``DURATION`` seconds from
  ``SECONDS`` after launch: its bridge port is set down, so every packet to or from it is dropped (TCP
  retransmits; connections survive a partition shorter than their timeouts).

Times are seconds after the job's launch. :func:`timeline` turns a plan into ``(seconds, Action)`` in time
order (a straggler's is endless); the testbed's scheduler thread carries them out.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import re
import signal
import subprocess
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

from lowbw.net.runner import RateScheduler, kill_groups
from lowbw.net.units import parse_seconds

__all__ = ["Straggle", "Fail", "Partition", "Action", "parse_straggle", "parse_fail", "parse_partition",
           "timeline", "FaultInjector", "STRAGGLE_PERIOD_S"]

STRAGGLE_PERIOD_S = 0.1  # one stop/continue cycle of a straggler (seconds)


@dataclass(frozen=True)
class Straggle:
    rank: int
    factor: float  # > 1: how many times slower


@dataclass(frozen=True)
class Fail:
    rank: int
    at_s: float  # seconds after launch


@dataclass(frozen=True)
class Partition:
    rank: int
    at_s: float  # seconds after launch
    duration_s: float


@dataclass(frozen=True)
class Action:
    """One thing to do to worker ``rank``: ``"stop"``, ``"cont"``, ``"kill"``, ``"link_down"``, ``"link_up"``."""

    kind: str
    rank: int


def _rank(text: str, workers: int, flag: str, value: str) -> int:
    if not text.isdigit() or int(text) >= workers:
        raise ValueError(f"{flag} {value!r}: {text!r} is not a rank below {workers}")
    return int(text)


def parse_straggle(value: str, workers: int) -> Straggle:
    """``RANK:FACTOR``, e.g. ``2:3`` (rank 2 three times slower)."""
    m = re.fullmatch(r"\s*(\w+)\s*:\s*(\S+)\s*", value)
    if not m:
        raise ValueError(f"--straggle {value!r} is not RANK:FACTOR (e.g. 2:3)")
    try:
        factor = float(m.group(2))
    except ValueError:
        factor = 0.0
    if not factor > 1:
        raise ValueError(f"--straggle {value!r}: the factor must be a number > 1")
    return Straggle(_rank(m.group(1), workers, "--straggle", value), factor)


def parse_fail(value: str, workers: int) -> Fail:
    """``RANK@SECONDS``, e.g. ``1@30`` or ``1@500ms``."""
    m = re.fullmatch(r"\s*(\w+)\s*@\s*(\S+)\s*", value)
    if not m:
        raise ValueError(f"--fail {value!r} is not RANK@SECONDS (e.g. 1@30)")
    return Fail(_rank(m.group(1), workers, "--fail", value), _time(m.group(2), "--fail", value))


def parse_partition(value: str, workers: int) -> Partition:
    """``RANK@SECONDS:DURATION``, e.g. ``0@10:5``."""
    m = re.fullmatch(r"\s*(\w+)\s*@\s*([^:\s]+)\s*:\s*(\S+)\s*", value)
    if not m:
        raise ValueError(f"--partition {value!r} is not RANK@SECONDS:DURATION (e.g. 0@10:5)")
    dur = _time(m.group(3), "--partition", value)
    if dur <= 0:
        raise ValueError(f"--partition {value!r}: the duration must be > 0")
    return Partition(_rank(m.group(1), workers, "--partition", value), _time(m.group(2), "--partition", value), dur)


def _time(text: str, flag: str, value: str) -> float:
    try:
        t = parse_seconds(text)
    except ValueError:
        raise ValueError(f"{flag} {value!r}: {text!r} is not a time (e.g. 30, 500ms)") from None
    if t < 0:
        raise ValueError(f"{flag} {value!r}: times must be >= 0")
    return t


def _straggler(s: Straggle) -> Iterator[tuple[float, Action]]:
    run = STRAGGLE_PERIOD_S / s.factor
    for k in itertools.count():
        yield k * STRAGGLE_PERIOD_S + run, Action("stop", s.rank)
        yield (k + 1) * STRAGGLE_PERIOD_S, Action("cont", s.rank)


def timeline(faults: Sequence[Straggle | Fail | Partition]) -> Iterable[tuple[float, Action]]:
    """Every action of ``faults`` in time order (endless if there is a straggler)."""
    streams: list[Iterable[tuple[float, Action]]] = []
    for f in faults:
        if isinstance(f, Straggle):
            streams.append(_straggler(f))
        elif isinstance(f, Fail):
            streams.append([(f.at_s, Action("kill", f.rank))])
        else:
            streams.append([(f.at_s, Action("link_down", f.rank)),
                            (f.at_s + f.duration_s, Action("link_up", f.rank))])
    return heapq.merge(*streams, key=lambda e: e[0])


class FaultInjector:
    """Carries out a fault plan on one job: processes by rank, links through ``set_link(rank, up)``.
    ``log`` lists what was done, ``(seconds after launch, kind, rank)`` (a straggler's cycles once, as
    ``"straggle"``)."""

    def __init__(self, faults: Sequence[Straggle | Fail | Partition], name: str):
        self.faults = tuple(faults)
        self.log: list[tuple[float, str, int]] = []
        self._scheduler = RateScheduler(name)
        self._procs: list[subprocess.Popen] = []
        self._set_link: Callable[[int, bool], None] | None = None
        self._t0 = 0.0

    def start(self, procs: Sequence[subprocess.Popen], t0: float, set_link: Callable[[int, bool], None]) -> None:
        if not self.faults:
            return
        self._procs, self._t0, self._set_link, self.log = list(procs), t0, set_link, []
        self.log += [(0.0, "straggle", f.rank) for f in self.faults if isinstance(f, Straggle)]
        self._scheduler.start(timeline(self.faults), t0, self._apply)

    def _apply(self, action: Action) -> None:
        if action.kind in ("link_down", "link_up"):
            assert self._set_link is not None
            self._set_link(action.rank, action.kind == "link_up")
        else:
            kill_groups([self._procs[action.rank]], _SIGNALS[action.kind])
        if action.kind not in ("stop", "cont"):
            self.log.append((round(time.time() - self._t0, 3), action.kind, action.rank))

    def stop(self) -> None:
        """End the plan: no more actions; stopped stragglers continue (so they can exit or be terminated)
        and partitioned links come back."""
        self._scheduler.stop(join=True)
        for f in self.faults:
            if isinstance(f, Straggle) and f.rank < len(self._procs):
                kill_groups([self._procs[f.rank]], signal.SIGCONT)
            elif isinstance(f, Partition) and self._set_link is not None:
                with contextlib.suppress(Exception):
                    self._set_link(f.rank, True)


_SIGNALS = {"stop": signal.SIGSTOP, "cont": signal.SIGCONT, "kill": signal.SIGKILL}
