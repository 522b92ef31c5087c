"""Bandwidth (and delay) traces the testbed replays over time: ``--trace FILE``.

Two formats:

* CSV ``t_s,worker,mbit[,delay_ms]`` (a header line is allowed; ``worker`` ``*`` = every worker): from
  ``t_s`` seconds after launch, worker ``worker``'s link runs at ``mbit`` Mbit/s each way (and its uplink
  delay becomes ``delay_ms``). The trace is played once; the last values stay.
* Mahimahi's packet-delivery traces (one integer per line: the millisecond at which one MTU-sized packet,
  1500 bytes, may be delivered; the file repeats when it ends): turned into a rate per ``bin_s`` window,
  ``count x 1500 x 8 / bin_s`` bits/s, applied to every worker and looped over the trace's length.

A window with no delivery opportunity has rate 0, which a token bucket cannot take: it becomes
``MIN_BPS`` (a link that is nearly stalled).
"""

from __future__ import annotations

import csv
import dataclasses
import io
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from lowbw.net.link import LinkSpec
from lowbw.net.units import keyed_number

__all__ = ["TraceStep", "Trace", "load_trace", "resolve_trace", "rates_at", "parse_csv", "parse_mahimahi", "expand",
           "peak_links", "MAHIMAHI_PACKET_BYTES", "MIN_BPS", "PACKAGED", "SYNTHETIC", "TRAINING"]

MAHIMAHI_PACKET_BYTES = 1500
MIN_BPS = 8_000.0  # the rate of a window without delivery opportunities (1 KB/s)
DEFAULT_BIN_S = 0.1  # Mahimahi traces are averaged over windows of this many seconds


@dataclass(frozen=True)
class TraceStep:
    """From ``t_s`` on, worker ``rank``'s link (every worker's if None) runs at ``bps`` bits/s each way,
    and its uplink delay is ``delay_s`` (unchanged if None)."""

    t_s: float
    rank: int | None
    bps: float
    delay_s: float | None = None


@dataclass(frozen=True)
class Trace:
    """Steps in time order; ``period_s``: the steps repeat every ``period_s`` seconds (None: played once)."""

    steps: tuple[TraceStep, ...]
    period_s: float | None = None
    source: str = ""

    @property
    def changes_delay(self) -> bool:
        return any(s.delay_s is not None for s in self.steps)

    def peak_bps(self, rank: int) -> float | None:
        """The highest rate the trace gives worker ``rank`` (None if it sets none)."""
        rates = [s.bps for s in self.steps if s.rank in (None, rank)]
        return max(rates) if rates else None

    def first_rate(self, rank: int) -> float | None:
        """The rate worker ``rank`` starts at (the steps at t = 0), or None if the trace sets none then."""
        rate = None
        for s in self.steps:
            if s.t_s > 0:
                break
            if s.rank in (None, rank):
                rate = s.bps
        return rate


def _number(value: str, what: str, line: int) -> float:
    """A number of column ``what``; for ``mbit`` and ``delay_ms`` also a string in that unit (``10mbit``),
    and a unit that contradicts the column's or is ambiguous (``10mbps``) is refused (lowbw.net.units)."""
    value = keyed_number(what, value, f"trace line {line}: {what}")
    try:
        v = float(value)
    except ValueError:
        raise ValueError(f"trace line {line}: {what} {value!r} is not a number") from None
    if not math.isfinite(v) or v < 0:
        raise ValueError(f"trace line {line}: {what} {value!r} must be >= 0")
    return v


def parse_csv(text: str, workers: int) -> Trace:
    """``t_s,worker,mbit[,delay_ms]`` rows (see the module docstring); ValueError names the bad line."""
    steps = []
    for line, row in enumerate(csv.reader(io.StringIO(text)), start=1):
        row = [c.strip() for c in row]
        if line == 1 and row and row[0].lower() in ("t_s", "t"):
            _check_header(row)
            continue
        if not row or not row[0] or row[0].startswith("#"):
            continue
        if len(row) not in (3, 4):
            raise ValueError(f"trace line {line}: {','.join(row)!r} is not t_s,worker,mbit[,delay_ms]")
        t = _number(row[0], "time", line)
        if row[1] == "*":
            rank = None
        elif row[1].isdigit() and int(row[1]) < workers:
            rank = int(row[1])
        else:
            raise ValueError(f"trace line {line}: worker {row[1]!r} is not * or a rank below {workers}")
        mbit = _number(row[2], "mbit", line)
        delay = _number(row[3], "delay_ms", line) / 1e3 if len(row) == 4 and row[3] else None
        steps.append(TraceStep(t, rank, max(mbit * 1e6, MIN_BPS), delay))
    if not steps:
        raise ValueError("the trace has no rows (t_s,worker,mbit[,delay_ms])")
    return Trace(tuple(sorted(steps, key=lambda s: s.t_s)))


def _check_header(row: list[str]) -> None:
    """The header's rate and delay columns must name the units the values are read in (``mbit``,
    ``delay_ms``): a header saying ``mbps`` or ``rate`` would have the values misread without a word."""
    names = [c.lower() for c in row]
    if len(names) in (3, 4) and names[2] == "mbit" and (len(names) == 3 or names[3] == "delay_ms"):
        return
    if len(names) >= 3 and names[2] in ("mbps", "mb/s", "bps", "kbps", "gbps"):
        raise ValueError(f"trace line 1: column {row[2]!r} is ambiguous (tc reads mbps as megabytes per second): "
                         "name it mbit and give the values in Mbit/s")
    raise ValueError(f"trace line 1: header {','.join(row)!r} is not t_s,worker,mbit[,delay_ms] (the values are "
                     "read in those units)")


def parse_mahimahi(text: str, bin_s: float = DEFAULT_BIN_S) -> Trace:
    """A Mahimahi packet-delivery trace as a rate per ``bin_s`` window for every worker, looped over its
    length (the last timestamp, rounded up to whole windows)."""
    stamps = []
    for line, value in enumerate(text.split(), start=1):
        if not value.isdigit():
            raise ValueError(f"Mahimahi trace line {line}: {value!r} is not a millisecond timestamp")
        stamps.append(int(value) / 1e3)
    if not stamps or stamps[-1] <= 0:
        raise ValueError("the Mahimahi trace has no timestamp after 0 ms")
    if any(b < a for a, b in zip(stamps, stamps[1:])):
        raise ValueError("the Mahimahi trace's timestamps must not decrease")
    bins = max(1, math.ceil(stamps[-1] / bin_s - 1e-9))
    counts = [0] * bins
    for s in stamps:
        counts[min(bins - 1, int(s / bin_s))] += 1
    steps = tuple(TraceStep(i * bin_s, None, max(c * MAHIMAHI_PACKET_BYTES * 8 / bin_s, MIN_BPS))
                  for i, c in enumerate(counts))
    return Trace(steps, period_s=bins * bin_s)


def load_trace(path: str | Path, workers: int) -> Trace:
    """A CSV or Mahimahi trace file (Mahimahi: every line a bare integer)."""
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as e:
        raise ValueError(f"--trace {str(path)!r}: {e.strerror}") from None
    lines = [ln for ln in text.split() if ln]
    trace = parse_mahimahi(text) if lines and all(ln.isdigit() for ln in lines) else parse_csv(text, workers)
    return Trace(trace.steps, trace.period_s, str(p))


#: the traces shipped with the package (lowbw/net/traces/<name>.csv, drawn by :func:`synthetic_csv`)
PACKAGED = Path(__file__).with_name("traces")


def resolve_trace(name_or_path: str | Path, workers: int) -> Trace:
    """A packaged trace by name (``wifi``, ``lte``: :data:`SYNTHETIC`; ``wifi10``: :data:`TRAINING`) or a trace
    file (:func:`load_trace`)."""
    name = str(name_or_path)
    if (name in SYNTHETIC or name in TRAINING) and not Path(name).exists():
        return load_trace(PACKAGED / f"{name}.csv", workers)
    return load_trace(name, workers)


def rates_at(trace: Trace, t_s: float, workers: int) -> list[tuple[float | None, float | None]]:
    """Per worker ``(bits/s, uplink delay s)`` that ``trace`` sets at ``t_s`` seconds (None: not set yet,
    the link keeps its own value): the last step at or before ``t_s`` for that worker (or for every worker),
    the trace's values at its end after a trace played once, and ``t_s`` modulo the period in a looping one."""
    if t_s < 0:
        raise ValueError(f"t_s must be >= 0, got {t_s}")
    out: list[list] = [[None, None] for _ in range(workers)]

    def apply(until: float) -> None:
        for s in trace.steps:
            if s.t_s > until:
                break
            for r in range(workers) if s.rank is None else [s.rank]:
                if r < workers:
                    out[r][0] = s.bps
                    if s.delay_s is not None:
                        out[r][1] = s.delay_s

    if trace.period_s:
        if t_s >= trace.period_s:  # a later loop starts from the values the previous one ended with
            apply(math.inf)
        t_s = math.fmod(t_s, trace.period_s)
    apply(t_s)
    return [(b, d) for b, d in out]


def expand(trace: Trace, until_s: float) -> Iterable[TraceStep]:
    """The steps in time order up to ``until_s``, repeated if the trace loops."""
    offset = 0.0
    while True:
        for s in trace.steps:
            t = s.t_s + offset
            if t > until_s:
                return
            yield TraceStep(t, s.rank, s.bps, s.delay_s)
        if not trace.period_s:
            return
        offset += trace.period_s


def peak_links(links: Sequence[LinkSpec], trace: Trace | None) -> list[LinkSpec]:
    """``links`` with each uplink at the highest rate ``trace`` gives it (what an emulator must carry)."""
    out = []
    for r, link in enumerate(links):
        peak = None if trace is None else trace.peak_bps(r)
        out.append(dataclasses.replace(link, up_bps=max(peak, link.up_bps))
                   if peak is not None and link.up_bps is not None else link)
    return out


#: Synthetic traces we ship (lowbw/net/traces/<kind>.csv), what they imitate and how they are drawn: the
#: rate follows an AR(1) process in log space, one value per ``step_s``, with occasional dips.
SYNTHETIC = {
    # 802.11n/ac WiFi in a busy home: 50 Mbit/s median, fast +-30% fluctuations (rho 0.8 per 0.5 s), and a
    # dip to a tenth of the rate for 0.5-1.5 s about every 10 s (interference, a microwave, roaming)
    "wifi": {"median_mbit": 50.0, "sigma": 0.3, "rho": 0.8, "dip_every_s": 10.0, "dip_factor": 0.1,
             "delay_ms": None},
    # a 4G/LTE uplink on the move: 12 Mbit/s median, slow +-60% swings (rho 0.95 per 0.5 s), rare stalls,
    # and a one-way delay of 40 ms +- 10 ms following the load
    "lte": {"median_mbit": 12.0, "sigma": 0.6, "rho": 0.95, "dip_every_s": 30.0, "dip_factor": 0.05,
            "delay_ms": (40.0, 10.0)},
}
#: Synthetic traces for training runs (the sim's virtual clock, E10): as long as a run's virtual time
TRAINING = {
    # the WiFi above at a 10 Mbit/s median for 20 minutes, comparable with a steady 10 Mbit/s link
    "wifi10": {**SYNTHETIC["wifi"], "median_mbit": 10.0, "seconds": 1200.0},
}


def synthetic_csv(kind: str, seconds: float | None = None, step_s: float = 0.5, seed: int = 0) -> str:
    """A trace of :data:`SYNTHETIC` (or :data:`TRAINING`) ``kind`` for every worker (``*``) as CSV text;
    deterministic in ``seed``; ``seconds`` long (None: the kind's ``seconds``, else 60).

    1. ``x_k = rho x_{k-1} + sqrt(1 - rho^2) N(0, 1)`` (stationary, unit variance);
    2. ``mbit_k = median exp(sigma x_k)``, times ``dip_factor`` while a dip lasts (each step starts one with
       probability ``step_s / dip_every_s``; it lasts 1-3 steps);
    3. with ``delay_ms = (mean, sd)``: ``delay_k = mean + sd x_k`` (slower link, more delay), at least 1 ms.
    """
    import random

    kinds = {**SYNTHETIC, **TRAINING}
    if kind not in kinds:
        raise ValueError(f"unknown synthetic trace {kind!r}; known: {', '.join(kinds)}")
    p = kinds[kind]
    seconds = float(p.get("seconds", 60.0)) if seconds is None else seconds
    rng = random.Random(seed)
    x, dip_left, rows = rng.gauss(0, 1), 0, ["t_s,worker,mbit" + (",delay_ms" if p["delay_ms"] else "")]
    for k in range(int(round(seconds / step_s))):
        x = p["rho"] * x + math.sqrt(1 - p["rho"] ** 2) * rng.gauss(0, 1)
        if dip_left == 0 and rng.random() < step_s / p["dip_every_s"]:
            dip_left = rng.randint(1, 3)
        mbit = p["median_mbit"] * math.exp(p["sigma"] * x) * (p["dip_factor"] if dip_left else 1.0)
        dip_left = max(0, dip_left - 1)
        row = f"{k * step_s:g},*,{mbit:.3f}"
        if p["delay_ms"]:
            mean, sd = p["delay_ms"]
            row += f",{max(1.0, mean - sd * x):.1f}"
        rows.append(row)
    return "\n".join(rows) + "\n"


if __name__ == "__main__":  # python -m lowbw.net.trace KIND > FILE: regenerate a shipped trace
    import sys

    sys.stdout.write(synthetic_csv(sys.argv[1]))
