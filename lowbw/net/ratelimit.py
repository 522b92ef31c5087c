"""In-process link emulation for the ``loopback-ratelimit`` fallback (no root, no ``tc``).

Every worker process has one emulated full-duplex link of ``rate`` bits/s:

* **uplink** (its own sends): a zero-burst token bucket (a virtual clock) -- before a send of ``m`` bytes is
  posted the caller sleeps until the link would have finished sending it;
* **downlink** (its own receives): when a receive of ``m`` bytes completes at ``t``, the message is taken to
  have streamed during ``[t - m b, t]`` unless the downlink was still busy, in which case the receiver
  sleeps until it would have drained (this is what makes fan-in -- a parameter server -- cost
  ``(N-1) M b`` at the root); then ``delay`` is added once per message.

:func:`install` wraps ``torch.distributed``'s ``isend``/``irecv`` (hence ``send``/``recv``, which torch
implements with them, and ``batch_isend_irecv``) consistently in ``torch.distributed`` and
``torch.distributed.distributed_c10d``, so code written against ``dist.isend`` is limited unchanged.
Collectives implemented inside the backend (``all_reduce``, ``broadcast``, ``all_gather``, ``barrier``
excluded) cannot be observed per message: they are padded to the cost model's time (gloo's ring) and are
therefore *modelled, not measured* in this mode. Results must carry ``emulation: loopback-ratelimit``.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Sequence
from typing import Any

import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d

from lowbw.net.costmodel import LinkParams, allgather_time, allreduce_time, broadcast_time

__all__ = ["LinkLimiter", "install", "install_from_env", "uninstall", "current", "emulation_from_env"]


class LinkLimiter:
    """Virtual-clock pacing of one worker's uplink and downlink (optionally with a rate schedule)."""

    def __init__(self, rate_bps: float, delay_s: float = 0.0, schedule: Sequence[tuple[float, float]] = (),
                 t0: float | None = None, sleep: Any = time.sleep, clock: Any = time.monotonic):
        if rate_bps <= 0:
            raise ValueError("rate must be positive")
        self.rate_bps = float(rate_bps)
        self.delay_s = float(delay_s)
        self.schedule = sorted((float(t), float(r)) for t, r in schedule)
        self._sleep, self._clock = sleep, clock
        # schedule times are relative to the testbed's launch (wall clock); map them onto our clock
        wall0 = time.time() if t0 is None else float(t0)
        self._clock0 = self._clock() - (time.time() - wall0)
        self._up = 0.0
        self._down = 0.0
        self._lock = threading.Lock()
        self.sent_bytes = 0
        self.recv_bytes = 0

    def rate_at(self, now: float | None = None) -> float:
        t = (self._clock() if now is None else now) - self._clock0
        rate = self.rate_bps
        for ts, r in self.schedule:
            if t >= ts:
                rate = r
        return rate

    def _wait_until(self, t: float) -> None:
        d = t - self._clock()
        if d > 0:
            self._sleep(d)

    def before_send(self, nbytes: int) -> None:
        """Block until the uplink has 'sent' ``nbytes``; call before posting the send."""
        with self._lock:
            now = self._clock()
            self._up = max(self._up, now) + nbytes * 8.0 / self.rate_at(now)
            until = self._up
            self.sent_bytes += nbytes
        self._wait_until(until)

    def after_recv(self, nbytes: int) -> None:
        """Call when a receive of ``nbytes`` has completed: wait for the downlink to drain, plus delay."""
        with self._lock:
            now = self._clock()
            dur = nbytes * 8.0 / self.rate_at(now)
            self._down = max(self._down, now - dur) + dur
            until = self._down + self.delay_s
            self.recv_bytes += nbytes
        self._wait_until(until)

    def pad_collective(self, started: float, seconds: float) -> None:
        """Pad a backend-internal collective that started at ``started`` (clock) to ``seconds``."""
        self._wait_until(started + seconds)


def emulation_from_env() -> dict[str, Any]:
    """The link the testbed gave this worker (LOWBW_* variables), or {} outside a testbed."""
    mode = os.environ.get("LOWBW_EMULATION")
    if not mode:
        return {}
    rate = os.environ.get("LOWBW_LINK_RATE_BPS")
    return {
        "emulation": mode,
        "rate_bps": float(rate) if rate else None,
        "delay_s": float(os.environ.get("LOWBW_LINK_DELAY_S", "0") or 0),
        "schedule": [tuple(x) for x in json.loads(os.environ.get("LOWBW_RATE_SCHEDULE", "[]"))],
        "t0": float(os.environ["LOWBW_T0"]) if os.environ.get("LOWBW_T0") else None,
    }


_STATE: dict[str, Any] = {}


def current() -> LinkLimiter | None:
    """The installed limiter, if any."""
    return _STATE.get("limiter")


class _RecvWork:
    """A torch Work proxy that charges the downlink when the receive is waited for."""

    def __init__(self, work: Any, nbytes: int, limiter: LinkLimiter):
        self._work, self._nbytes, self._lim, self._done = work, nbytes, limiter, False

    def wait(self, *a: Any, **k: Any) -> Any:
        r = self._work.wait(*a, **k)
        if not self._done:
            self._done = True
            self._lim.after_recv(self._nbytes)
        return r

    def __getattr__(self, name: str) -> Any:
        return getattr(self._work, name)


def install(limiter: LinkLimiter, model_world_size: int | None = None) -> LinkLimiter:
    """Wrap torch.distributed's isend/irecv (and pad its built-in collectives to the cost model)."""
    uninstall()
    # send/recv are not wrapped: torch implements them with the module's isend/irecv (wrapped below)
    orig = {n: getattr(c10d, n) for n in ("isend", "irecv", "all_reduce", "broadcast", "all_gather")}

    def nb(t: Any) -> int:
        return t.numel() * t.element_size()

    def isend(tensor, *a, **k):
        limiter.before_send(nb(tensor))
        return orig["isend"](tensor, *a, **k)

    def irecv(tensor, *a, **k):
        w = orig["irecv"](tensor, *a, **k)
        return _RecvWork(w, nb(tensor), limiter) if w is not None else w

    def _link() -> LinkParams:
        return LinkParams(alpha_s=limiter.delay_s, bandwidth_bps=limiter.rate_at())

    def _ws(group: Any) -> int:
        return model_world_size or dist.get_world_size(group)

    def _padded(fn: Any, model: Any) -> Any:
        def wrapped(tensor, *a, **k):
            t = limiter._clock()
            r = fn(tensor, *a, **k)
            if k.get("async_op"):
                return r  # cannot pad asynchronously; left unpadded
            limiter.pad_collective(t, model(tensor, k.get("group")))
            return r
        wrapped.__wrapped__ = fn
        wrapped.__name__ = fn.__name__
        return wrapped

    def _ar_model(t: Any, g: Any) -> float:
        return allreduce_time("ring", nb(t), _ws(g), _link())

    def _bc_model(t: Any, g: Any) -> float:
        return broadcast_time(nb(t), _ws(g), _link(), "tree")

    def _ag_model(out: Any, g: Any) -> float:  # all_gather(tensor_list, tensor): first arg is the list
        size = nb(out[0]) if isinstance(out, list | tuple) and out else 0
        return allgather_time(size, _ws(g), _link())

    repl = {"isend": isend, "irecv": irecv,
            "all_reduce": _padded(orig["all_reduce"], _ar_model),
            "broadcast": _padded(orig["broadcast"], _bc_model),
            "all_gather": _padded(orig["all_gather"], _ag_model)}
    for name, fn in repl.items():
        if name in ("isend", "irecv"):
            fn.__name__ = orig[name].__name__
            fn.__wrapped__ = orig[name]
        setattr(c10d, name, fn)
        setattr(dist, name, fn)
    _STATE.update(limiter=limiter, orig=orig)
    return limiter


def uninstall() -> None:
    """Restore torch.distributed's functions."""
    orig = _STATE.pop("orig", None)
    _STATE.pop("limiter", None)
    if not orig:
        return
    for name, fn in orig.items():
        setattr(c10d, name, fn)
        setattr(dist, name, fn)


def install_from_env() -> LinkLimiter | None:
    """In a ``loopback-ratelimit`` testbed worker install the limiter its environment describes; elsewhere
    (netns-tc: the kernel shapes the link; outside a testbed) do nothing. Returns the limiter or None."""
    e = emulation_from_env()
    if e.get("emulation") != "loopback-ratelimit" or not e.get("rate_bps"):
        return None
    return install(LinkLimiter(e["rate_bps"], e["delay_s"], e["schedule"], e["t0"]))
