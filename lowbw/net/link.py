"""One worker's link as the testbed builds it (:class:`LinkSpec`), and the parsers of its values.

A link is full duplex: the *uplink* carries what the worker sends (worker -> switch), the *downlink* what it
receives (switch -> worker). Each direction is shaped by its own token bucket (tc ``tbf``) and may add a
one-way delay; jitter and loss apply to the uplink. Two workers ``i -> j`` therefore see a one-way latency
of ``up_delay(i) + down_delay(j)`` and a bottleneck of ``min(up(i), down(j))``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

from lowbw.net.units import parse_delay, parse_rate, parse_seconds

__all__ = ["LinkSpec", "DEFAULT_QUEUE_S", "MIN_QUEUE_BYTES", "FRAME_BYTES", "parse_loss", "parse_schedule",
           "per_worker", "links_from_values"]

DEFAULT_QUEUE_S = 0.1  # seconds of data each shaper queues at its rate (the usual emulation choice)
FRAME_BYTES = 1514  # a full-size Ethernet frame (MTU 1500 + 14 bytes of header)
#: Every shaper queues at least 256 full-size frames (387 KB, 310 ms at 10 Mbit/s): the new flows of the
#: pairwise-round algorithms (butterfly, roundrobin, alltoall) start with TCP's burst of a whole window per
#: peer, and a queue shorter than that drops at every flow start.
MIN_QUEUE_BYTES = 256 * FRAME_BYTES
MIN_BURST_BYTES = 10 * FRAME_BYTES  # tbf's burst: at least ten full-size frames ...
BURST_S = 0.001  # ... or 1 ms of the rate, whichever is larger


@dataclass(frozen=True)
class LinkSpec:
    """What one worker's link does to its traffic. Units: bits/s, seconds, fractions, bytes."""

    up_bps: float | None = None  # uplink rate (worker -> switch), bits/s; None = not shaped
    down_bps: float | None = None  # downlink rate (switch -> worker), bits/s; None = not shaped
    delay_s: float = 0.0  # one-way delay added to the uplink, seconds
    down_delay_s: float = 0.0  # one-way delay added to the downlink, seconds
    jitter_s: float = 0.0  # standard deviation of the uplink delay (normal, truncated at 0), seconds
    loss: float = 0.0  # fraction of uplink packets dropped at random, in [0, 1)
    queue_s: float = DEFAULT_QUEUE_S  # each shaper's queue, in seconds of data at its rate
    burst_bytes: int | None = None  # tbf burst override (bytes sent at line rate after idling); None = rule
    limit_bytes: int | None = None  # tbf queue-size override in bytes; None = rule (queue_s, floors)

    def __post_init__(self) -> None:
        for name in ("up_bps", "down_bps"):
            v = getattr(self, name)
            if v is not None and not v > 0:
                raise ValueError(f"{name} must be > 0 bits/s or None, got {v!r}")
        for name in ("delay_s", "down_delay_s", "jitter_s"):
            if not getattr(self, name) >= 0:
                raise ValueError(f"{name} must be >= 0 seconds, got {getattr(self, name)!r}")
        if not 0 <= self.loss < 1:
            raise ValueError(f"loss must be in [0, 1) (or a percentage like 0.1%), got {self.loss!r}")
        if not self.queue_s > 0:
            raise ValueError(f"queue must be > 0 seconds, got {self.queue_s!r}")

    @classmethod
    def parse(cls, rate: str | float | None = None, delay: str | float | None = None,
              jitter: str | float | None = None, loss: str | float | None = None,
              queue: str | float | None = DEFAULT_QUEUE_S, burst: int | None = None, limit: int | None = None,
              up: str | float | None = None, down: str | float | None = None,
              down_delay: str | float | None = None, flags: bool = False) -> LinkSpec:
        """A link from user-facing values (``"100mbit"``, ``"5ms"``, ``"0.1%"``; text needs a unit, numbers
        are bits/s and seconds: :mod:`lowbw.net.units`); ``rate`` sets both directions, ``up``/``down``
        override one. Raises a one-line ValueError naming the bad value (as the testbed's flag if ``flags``)."""
        def name(n: str) -> str:
            return f"--{n.replace('_', '-')}" if flags else n

        both = None if rate is None else parse_rate(rate, name("rate"))
        return cls(up_bps=both if up is None else parse_rate(up, name("up")),
                   down_bps=both if down is None else parse_rate(down, name("down")),
                   delay_s=parse_delay(delay, name("delay")), down_delay_s=parse_delay(down_delay, name("down_delay")),
                   jitter_s=parse_delay(jitter, name("jitter")), loss=parse_loss(loss),
                   queue_s=DEFAULT_QUEUE_S if queue is None else parse_delay(queue, name("queue")),
                   burst_bytes=burst, limit_bytes=limit)

    @property
    def shaped(self) -> bool:
        return self.up_bps is not None or self.down_bps is not None

    @property
    def impaired(self) -> bool:
        """Whether anything beyond rate shaping is asked for (delay, jitter or loss)."""
        return bool(self.delay_s or self.down_delay_s or self.jitter_s or self.loss)

    @property
    def delayed(self) -> bool:
        return bool(self.delay_s or self.down_delay_s or self.jitter_s)

    def with_rate(self, bps: float, up: bool = True, down: bool = True) -> LinkSpec:
        """This link with the rate of one or both directions replaced."""
        return dataclasses.replace(self, up_bps=bps if up else self.up_bps, down_bps=bps if down else self.down_bps)

    def tbf_params(self, bps: float) -> dict[str, int]:
        """tbf's ``burst`` (bytes let through at line rate: ``BURST_S`` of the rate, at least
        ``MIN_BURST_BYTES``) and ``limit`` (queue bytes: ``queue_s`` of the rate, at least
        ``MIN_QUEUE_BYTES`` and two bursts) for a shaper at ``bps`` bits/s."""
        byte_rate = bps / 8.0
        burst = self.burst_bytes or max(MIN_BURST_BYTES, int(byte_rate * BURST_S))
        limit = self.limit_bytes or max(int(byte_rate * self.queue_s), MIN_QUEUE_BYTES, 2 * burst)
        return {"burst": burst, "limit": limit}


def parse_loss(loss: str | float | None) -> float:
    """``"0.1%"`` -> 0.001; a bare number is a fraction; None -> 0."""
    if loss is None or loss == "":
        return 0.0
    try:
        if isinstance(loss, str):
            s = loss.strip()
            v = float(s[:-1]) / 100 if s.endswith("%") else float(s)
        else:
            v = float(loss)
    except ValueError:
        raise ValueError(f"bad loss {loss!r}: use a fraction (0.001) or a percentage (0.1%)") from None
    if not 0 <= v < 1:
        raise ValueError(f"loss must be in [0, 1) (or a percentage like 0.1%), got {loss!r}")
    return v


def parse_schedule(schedule: str | Sequence | None) -> list[tuple[float, float]]:
    """``"0:100mbit,10:10mbit"`` (or ``[(0, "100mbit"), (10, 1e7)]``) -> [(seconds, bits/s), ...] sorted."""
    if schedule is None or schedule == "" or schedule == []:
        return []
    items: list[tuple[float, float]] = []
    if isinstance(schedule, str):
        for part in schedule.split(","):
            part = part.strip()
            if not part:
                continue
            if ":" not in part:
                raise ValueError(f"bad schedule entry {part!r}: use TIME:RATE, e.g. 0:100mbit,10:10mbit")
            t, r = part.split(":", 1)
            items.append((parse_seconds(t, "schedule time"), parse_rate(r, "schedule rate")))
    else:
        for t, r in schedule:
            items.append((parse_seconds(t, "schedule time"), parse_rate(r, "schedule rate")))
    if any(t < 0 for t, _ in items):
        raise ValueError("schedule times must be >= 0")
    return sorted(items)


def per_worker(value: str | float | None, workers: int, flag: str) -> list[str | float | None]:
    """One value per worker from ``value``: a single value (every worker) or ``workers`` comma-separated
    ones (``"1gbit,1gbit,10mbit"``). ValueError names ``flag`` when the count is wrong."""
    if value is None or not isinstance(value, str) or "," not in value:
        return [value] * workers
    parts = [p.strip() for p in value.split(",")]
    if len(parts) != workers:
        raise ValueError(f"{flag} {value!r} has {len(parts)} values for {workers} workers (give 1 or {workers})")
    return parts


def links_from_values(workers: int, rate: str | float | None = None, up: str | float | None = None,
                      down: str | float | None = None, delay: str | float | None = None,
                      down_delay: str | float | None = None, jitter: str | float | None = None,
                      loss: str | float | None = None, queue: str | float | None = DEFAULT_QUEUE_S
                      ) -> list[LinkSpec]:
    """Every worker's :class:`LinkSpec` from command-line values, each one value for all workers or a
    comma-separated value per worker: ``rate`` sets both directions, ``up``/``down`` override one;
    ``delay`` is added to the uplink, ``down_delay`` to the downlink."""
    cols = {name: per_worker(v, workers, f"--{name.replace('_', '-')}") for name, v in
            (("rate", rate), ("up", up), ("down", down), ("delay", delay), ("down_delay", down_delay),
             ("jitter", jitter), ("loss", loss))}
    return [LinkSpec.parse(cols["rate"][r], cols["delay"][r], cols["jitter"][r], cols["loss"][r], queue,
                           up=cols["up"][r], down=cols["down"][r], down_delay=cols["down_delay"][r], flags=True)
            for r in range(workers)]
