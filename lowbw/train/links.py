"""The virtual clock's links: what each synchronisation level's link is at a virtual time (one link, or
every worker's own uplink and downlink under the per-worker keys and a bandwidth trace, with the testbed's
token bucket where ``clock_shaper_burst_bytes`` says, and TCP's loss recovery where ``link_loss`` says:
:func:`lossy`) and the modelled time of an exchange's call records on it (:func:`comm_cost`; groups at one
level run in parallel, the slowest counts). Used by :mod:`lowbw.train.world` and the parameter server."""

from __future__ import annotations

from dataclasses import dataclass

from lowbw.net import costlinks, tcploss
from lowbw.net.costlinks import WorkerLink
from lowbw.net.costmodel import LinkParams, calls_time
from lowbw.net.trace import Trace, rates_at, resolve_trace

__all__ = ["WorkerLinks", "ShapedLink", "LossyLink", "link_for", "links_for", "worker_links", "has_worker_links",
           "bandwidth_at", "comm_cost", "level_cost", "lossy", "message_link", "message_stall"]


def lossy(cfg, alpha_s: float, bandwidth_bps: float, latency_ms: float, concurrent: int) -> tuple[float, float]:
    """(alpha s, payload bits/s) of a link of one-way latency ``latency_ms`` under ``cfg.link_loss``: TCP's
    expected loss recovery (:func:`lowbw.net.tcploss.lossy_alpha_beta` under ``cfg.tcp_congestion``; the round
    trip = 2 x latency + one segment's transmission) with ``concurrent`` messages in flight per latency step
    (a collective's step: one per worker; a message to a server alone: 1). Unchanged without loss."""
    loss = getattr(cfg, "link_loss", 0.0)
    if not loss:
        return alpha_s, bandwidth_bps
    rtt = 2 * latency_ms / 1e3 + tcploss.MSS * 8 / bandwidth_bps
    return tcploss.lossy_alpha_beta(alpha_s, bandwidth_bps, loss, rtt, cfg.tcp_congestion, concurrent)


def message_link(cfg, alpha_s: float, bandwidth_bps: float, latency_ms: float) -> LinkParams:
    """A server's port under ``cfg.link_loss``: a :class:`LossyLink` whose messages travel alone (each pays
    :meth:`LossyLink.call_stall_s` for its own bytes, added by the port), else the plain link."""
    loss = getattr(cfg, "link_loss", 0.0)
    if not loss:
        return LinkParams(alpha_s=alpha_s, bandwidth_bps=bandwidth_bps)
    r = tcploss.recovery(loss, 2 * latency_ms / 1e3 + tcploss.MSS * 8 / bandwidth_bps, bandwidth_bps,
                         cfg.tcp_congestion)
    return LossyLink(alpha_s=alpha_s, bandwidth_bps=bandwidth_bps / r.beta_factor, loss=loss, rto_s=r.rto_s)


def message_stall(link: LinkParams, nbytes: float) -> float:
    """What a message of ``nbytes`` alone waits for lost tails on ``link`` (0 on a link without loss)."""
    return link.call_stall_s(nbytes) if isinstance(link, LossyLink) else 0.0


def has_worker_links(cfg) -> bool:
    """Whether the virtual clock times the world on per-worker links (a per-worker key or a trace is set)."""
    return bool(cfg.worker_bandwidth_mbit or cfg.worker_uplink_mbit or cfg.worker_latency_ms
                or cfg.bandwidth_trace)


_TRACES: dict[tuple[str, int], Trace] = {}


def _trace(cfg) -> Trace:
    key = (cfg.bandwidth_trace, cfg.workers)
    if key not in _TRACES:
        try:
            _TRACES[key] = resolve_trace(cfg.bandwidth_trace, cfg.workers)
        except ValueError as e:
            raise ValueError(f"bandwidth_trace={cfg.bandwidth_trace!r}: {e}") from None
    return _TRACES[key]


def _worker_mbit_ms(cfg, t_virtual: float) -> list[tuple[float, float, float]]:
    """Per worker (uplink Mbit/s, downlink Mbit/s, one-way latency ms) at virtual time ``t_virtual``: the
    per-worker keys (else ``bandwidth_mbit`` under ``bandwidth_schedule``, ``latency_ms``); a trace then sets
    the rate of both directions (as the testbed's trace does) and, where it has one, the latency. The loop
    sets the time once per step: an exchange runs at the rates of its step's start, even if the trace changes
    before it ends."""
    M = cfg.workers
    down = list(cfg.worker_bandwidth_mbit) or [bandwidth_at(cfg, t_virtual, per_worker=False)] * M
    up = list(cfg.worker_uplink_mbit) or list(down)
    lat = list(cfg.worker_latency_ms) or [cfg.latency_ms] * M
    if cfg.bandwidth_trace:
        for i, (bps, delay_s) in enumerate(rates_at(_trace(cfg), t_virtual, M)):
            if bps is not None:
                up[i] = down[i] = bps / 1e6
            if delay_s is not None:
                lat[i] = delay_s * 1e3
    return list(zip(up, down, lat))


def worker_links(cfg, t_virtual: float = 0.0) -> list[WorkerLink]:
    """Every worker's link as the virtual clock sees it at ``t_virtual`` (see :func:`link_for`): bandwidths
    x ``link_goodput``, the latency and ``clock_overhead_ms`` on the uplink; under ``link_loss`` the uplink's
    (where the testbed drops) as :func:`lossy` charges it, one message per worker in flight."""
    g = cfg.link_goodput
    out = []
    for u, d, lat in _worker_mbit_ms(cfg, t_virtual):
        alpha, up = lossy(cfg, (lat + cfg.clock_overhead_ms) / 1e3, u * 1e6 * g, lat, cfg.workers)
        out.append(WorkerLink(up, d * 1e6 * g, alpha, 0.0))
    return out


@dataclass(frozen=True)
class WorkerLinks(LinkParams):
    """Per-worker links as one :class:`LinkParams`: the slowest link (the equal-link bound: what re-timing
    sees) that also carries every worker's link, on which :func:`comm_cost` times calls; ``bucket_bytes``: the
    shapers' token bucket (payload bytes, each shaper's; 0: none), see :func:`comm_cost`."""

    workers: tuple[WorkerLink, ...] = ()
    bucket_bytes: float = 0.0

    @classmethod
    def of(cls, links: list[WorkerLink], bucket_bytes: float = 0.0) -> WorkerLinks:
        slow = costlinks.slowest_link(links)
        return cls(alpha_s=slow.alpha_s, bandwidth_bps=slow.bandwidth_bps, workers=tuple(links),
                   bucket_bytes=float(bucket_bytes))


@dataclass(frozen=True)
class LossyLink(LinkParams):
    """A level's link under ``link_loss``: alpha as without loss, the bandwidth TCP's resends leave
    (:func:`lowbw.net.tcploss.recovery`), and the expected timer waits of a call (:meth:`call_stall_s`), which
    :func:`comm_cost` charges once per call for the bytes of its critical path: the call is done when the
    unluckiest segment of its ``concurrent`` connections arrives (:func:`lowbw.net.tcploss.stall`); a pipelined
    collective's earlier steps have their losses revealed by the next step's data on the same connection
    (RACK). Seen as a plain :class:`LinkParams` (no stall) by anything else."""

    loss: float = 0.0  # fraction of packets dropped at random on every uplink
    rto_s: float = 0.0  # what a wait for the retransmission timer costs, RTT + tcp_rto_min (s)
    concurrent: int = 1  # connections of a call in flight at once (one per worker)

    def call_stall_s(self, nbytes: float) -> float:
        """Expected timer waits (s) of a call whose critical path carries ``nbytes`` payload bytes per
        connection."""
        return tcploss.stall(self.loss, self.rto_s, self.concurrent * tcploss.segments(nbytes))


@dataclass(frozen=True)
class ShapedLink(LinkParams):
    """A link shaped by a token bucket (``clock_shaper_burst_bytes``, the testbed's tc tbf): ``bucket_bytes``
    payload bytes leave at line rate after the link idles; :func:`comm_cost` times each exchange's calls on it
    with :func:`lowbw.net.costmodel.bucket_steps_time` (full at the exchange's start, refilled during every
    message's alpha). Seen as a plain :class:`LinkParams` (no per-call burst) by anything else."""

    bucket_bytes: float = 0.0


def links_for(cfg, level: str, t_virtual: float = 0.0) -> list[WorkerLink] | None:
    """Per-worker links of ``level`` at ``t_virtual``, or None where one :func:`link_for` times it (no
    per-worker key, or a household/neighbourhood level with its own ``household_bandwidth_mbit`` or
    ``household_latency_ms``: a LAN)."""
    if not has_worker_links(cfg) or (level != "world" and (cfg.household_bandwidth_mbit > 0
                                                            or cfg.household_latency_ms >= 0)):
        return None
    return worker_links(cfg, t_virtual)


def bandwidth_at(cfg, t_virtual: float, per_worker: bool = True) -> float:
    """World bandwidth (Mbit/s) at virtual time ``t_virtual`` under ``cfg.bandwidth_schedule``; on per-worker
    links (``per_worker``) the slowest worker's slower direction."""
    if per_worker and has_worker_links(cfg):
        return min(min(u, d) for u, d, _ in _worker_mbit_ms(cfg, t_virtual))
    mbit = cfg.bandwidth_mbit
    sched = cfg.bandwidth_schedule
    for t, b in zip(sched[0::2], sched[1::2]):
        if t_virtual >= t:
            mbit = b
        else:
            break
    return mbit


def link_for(cfg, level: str, t_virtual: float = 0.0):
    """The link of a synchronisation level as the virtual clock sees it: alpha = ``latency_ms`` +
    ``clock_overhead_ms``, bandwidth = the level's rate x ``link_goodput`` (payload bytes per second); the
    world link follows ``bandwidth_schedule`` in virtual time. On per-worker links (:func:`links_for`) the
    level's :class:`WorkerLinks`: the slowest link (the equal-link bound) carrying every worker's link, so
    that :func:`comm_cost` at it times calls on the per-worker links wherever an exchange is made."""
    links = links_for(cfg, level, t_virtual)
    burst = getattr(cfg, "clock_shaper_burst_bytes", 0.0)
    if links is not None:  # the bucket counts wire bytes (frames); the clock's bytes are payload
        return WorkerLinks.of(links, burst * cfg.link_goodput if burst > 0 else 0.0)
    if level == "world":
        lat, bw = cfg.latency_ms, bandwidth_at(cfg, t_virtual)
    else:
        bw = cfg.household_bandwidth_mbit or cfg.bandwidth_mbit
        lat = cfg.latency_ms if cfg.household_latency_ms < 0 else cfg.household_latency_ms
    # alpha = network latency + the sending/receiving software's own per-message cost; beta = 1 / goodput
    alpha, bps = (lat + cfg.clock_overhead_ms) / 1e3, bw * 1e6 * cfg.link_goodput
    if getattr(cfg, "link_loss", 0.0) and burst <= 0:  # TCP's loss recovery: resent bytes, a stall per call
        r = tcploss.recovery(cfg.link_loss, 2 * lat / 1e3 + tcploss.MSS * 8 / bps, bps, cfg.tcp_congestion,
                             cfg.workers)
        return LossyLink(alpha_s=alpha, bandwidth_bps=bps / r.beta_factor, loss=cfg.link_loss, rto_s=r.rto_s,
                         concurrent=cfg.workers)
    if burst > 0:  # with a token bucket, the loss's stall on every step (lossy)
        alpha, bps = lossy(cfg, alpha, bps, lat, cfg.workers)
    if burst > 0:  # the bucket counts wire bytes (frames); the clock's bytes are payload
        return ShapedLink(alpha_s=alpha, bandwidth_bps=bps, bucket_bytes=burst * cfg.link_goodput)
    return LinkParams(alpha_s=alpha, bandwidth_bps=bps)


def _as_equal(links: list[WorkerLink]) -> LinkParams | None:
    """The one LinkParams of equal symmetric links (so equal per-worker links time exactly as the scalar
    keys do), else None."""
    w = links[0]
    if w.down_alpha_s == 0.0 and w.up_bps == w.down_bps and all(x == w for x in links[1:]):
        return LinkParams(alpha_s=w.up_alpha_s, bandwidth_bps=w.up_bps)
    return None


def _v_comm(per_group_calls: dict[int, list[list]], link, links: list[WorkerLink] | None = None,
            bucket_bytes: float = 0.0) -> float:
    """Slowest group's modelled time; each group's calls are the per-member lists (zipped by calls_time).
    ``links``: every worker's link (groups are contiguous rank ranges, group g of n members = ranks
    g n .. g n + n - 1); None: ``link`` for all. ``bucket_bytes``: the calls are one exchange on links with
    that token bucket: on equal links the bucket model of :func:`lowbw.net.costmodel.calls_time`; on unequal
    ones the same model on the group's slowest link where the calls' per-worker time is that link's equal-link
    time (ring, pipeline and tree patterns with alike latencies: every step waits for the slowest hop, whose
    shapers' buckets drain and refill as an equal link's at its rate), else the per-worker time without one."""
    t = 0.0
    for g, lists in per_group_calls.items():
        if not any(lists):
            continue
        if links is None:
            t = max(t, calls_time(lists, link, bucket_bytes) if bucket_bytes > 0 else calls_time(lists, link))
            continue
        n = len(lists)
        mine = links[g * n:(g + 1) * n]
        eq = _as_equal(mine)
        if eq is not None:
            t = max(t, calls_time(lists, eq, bucket_bytes) if bucket_bytes > 0 else calls_time(lists, eq))
            continue
        plain = costlinks.calls_time(lists, mine)
        if bucket_bytes > 0:
            slow = costlinks.slowest_link(mine)
            if abs(calls_time(lists, slow) - plain) <= 1e-9 * max(plain, 1e-12):
                plain = calls_time(lists, slow, bucket_bytes)
        t = max(t, plain)
    return t


# unit links that isolate the two terms of the alpha-beta time (both are linear in alpha and beta)
_ALPHA_ONLY = (1.0, 1e300)  # alpha = 1 s, beta ~ 0     -> the number of latency terms
_BETA_ONLY = (0.0, 8.0)  # alpha = 0,   beta = 1 s/byte -> the bytes on the critical path


def comm_cost(per_group_calls: dict[int, list[list]], link) -> dict[str, float]:
    """``v_comm`` at ``link`` (a :class:`WorkerLinks`: on every worker's own link, with its bucket if any; a
    :class:`ShapedLink`: the calls as one exchange on its token bucket; a :class:`LossyLink`: its stall once per
    call) plus its equal-link coefficients ``v_alpha`` and
    ``v_beta_bytes`` of the plain link (see Exchange)."""
    links = list(link.workers) if isinstance(link, WorkerLinks) else None
    bucket = link.bucket_bytes if isinstance(link, ShapedLink | WorkerLinks) else 0.0
    stall = 0.0
    if isinstance(link, LossyLink):  # once per call, for the bytes of its critical path (the slowest group's)
        calls = max((len(lst) for lists in per_group_calls.values() for lst in lists), default=0)
        for i in range(calls):
            one = {g: [lst[i:i + 1] for lst in lists] for g, lists in per_group_calls.items()}
            stall += link.call_stall_s(_v_comm(one, LinkParams(*_BETA_ONLY)))
    return {
        "v_comm": _v_comm(per_group_calls, link, links, bucket) + stall,
        "v_alpha": _v_comm(per_group_calls, LinkParams(*_ALPHA_ONLY)),
        "v_beta_bytes": _v_comm(per_group_calls, LinkParams(*_BETA_ONLY)),
    }


def level_cost(cfg, per_group: dict[int, list[list]], level: str, t_virtual: float) -> dict[str, float]:
    """:func:`comm_cost` of an exchange at ``level`` on the links the virtual clock has at ``t_virtual``."""
    return comm_cost(per_group, link_for(cfg, level, t_virtual))
