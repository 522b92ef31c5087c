"""How long any wait on a peer may take before a run fails naming the rank (launcher and workers agree)."""

from __future__ import annotations

from lowbw.net.trace import resolve_trace
from lowbw.train.config import RunConfig

__all__ = ["peer_timeout_s"]


def peer_timeout_s(cfg: RunConfig, grad_bytes: int | None = None) -> float:
    """Seconds any wait on a peer may take before the run fails naming the rank.

    ``peer_timeout_s`` when set; else 30 s plus ten times the modelled time of moving the gradient twice
    (a ring all-reduce) over the configured world link, so slow links and big models get longer."""
    t = float(getattr(cfg, "peer_timeout_s", 0.0) or 0.0)
    if t > 0:
        return t
    t = 30.0
    if grad_bytes:
        mbit, lat = _slowest_mbit_ms(cfg)
        t += 10 * 2 * grad_bytes * 8 / (max(mbit, 1e-3) * 1e6) + 10 * 2 * lat / 1e3
    return t


def _slowest_mbit_ms(cfg: RunConfig) -> tuple[float, float]:
    """The smallest rate (Mbit/s) and the largest latency (ms) any worker's link has, a trace's included."""
    rates = [cfg.bandwidth_mbit, *cfg.worker_bandwidth_mbit, *cfg.worker_uplink_mbit]
    if cfg.worker_bandwidth_mbit:
        rates = rates[1:]  # bandwidth_mbit is replaced by the per-worker rates
    lats = list(cfg.worker_latency_ms) or [cfg.latency_ms]
    if cfg.bandwidth_trace:
        tr = resolve_trace(cfg.bandwidth_trace, cfg.workers)
        rates += [s.bps / 1e6 for s in tr.steps]
        lats += [s.delay_s * 1e3 for s in tr.steps if s.delay_s is not None]
    return min(rates), max(lats)
