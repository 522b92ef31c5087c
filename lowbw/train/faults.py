"""Faults of a training run (``faults:`` in the run config), on the virtual clock.

One entry a string; the kinds:

* ``churn:RANK@STEP:REJOIN`` -- worker RANK leaves after metrics step STEP (its round in progress is
  dropped; a pseudo-gradient already sent still arrives) and rejoins after step REJOIN > STEP by pulling
  its server's model (its inner optimiser's state kept, a machine that comes back); ``churn:RANK@STEP``:
  it never rejoins.

Only the schemes whose workers do not wait for each other tolerate churn (``async_diloco``, ``halos``, and
``decoupled_diloco`` with a quorum the workers still present can meet); every other scheme waits for every
worker at its exchanges, and a config that combines them is refused in one line
(:mod:`lowbw.train.config_rules`). Torch-free: the config reads it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["Churn", "parse_faults", "most_absent"]

_CHURN = re.compile(r"^churn:(\d+)@(\d+)(?::(\d+))?$")


@dataclass(frozen=True)
class Churn:
    rank: int  # the worker that leaves
    leave_step: int  # it leaves after this metrics step
    rejoin_step: int | None  # and rejoins after this one (None: never)


def parse_faults(entries: list[str], workers: int) -> list[Churn]:
    """The faults of ``entries``; ValueError naming the first bad entry (one line)."""
    out = []
    for e in entries:
        m = _CHURN.match(str(e).replace(" ", ""))
        if not m:
            raise ValueError(f"{e!r}: expected churn:RANK@STEP or churn:RANK@STEP:REJOIN (steps of the run)")
        rank, leave = int(m[1]), int(m[2])
        rejoin = int(m[3]) if m[3] is not None else None
        if rank >= workers:
            raise ValueError(f"{e!r}: rank {rank} is not one of the {workers} workers")
        if leave < 1 or (rejoin is not None and rejoin <= leave):
            raise ValueError(f"{e!r}: needs 1 <= STEP < REJOIN")
        out.append(Churn(rank, leave, rejoin))
    by_rank: dict[int, list[Churn]] = {}
    for c in out:
        by_rank.setdefault(c.rank, []).append(c)
    for rank, cs in by_rank.items():
        cs.sort(key=lambda c: c.leave_step)
        for a, b in zip(cs, cs[1:]):
            if a.rejoin_step is None or a.rejoin_step >= b.leave_step:
                raise ValueError(f"worker {rank} leaves again at step {b.leave_step} before it has rejoined")
    return out


def most_absent(churn: list[Churn]) -> int:
    """The most workers away at once (a leave and a rejoin after one step: the leave counted first)."""
    events = sorted([(c.leave_step, 1) for c in churn] + [(c.rejoin_step, -1) for c in churn
                                                        if c.rejoin_step is not None], key=lambda x: (x[0], -x[1]))
    now = peak = 0
    for _, d in events:
        now += d
        peak = max(peak, now)
    return peak
