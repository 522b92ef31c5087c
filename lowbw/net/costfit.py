"""Fitting the alpha-beta model to measured times (E1's calibration): :func:`fit_alpha_beta` returns a
:class:`Fit`, the fitted :class:`lowbw.net.costmodel.LinkParams` with its residuals. Sizes in bytes, times
in seconds."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from lowbw.net.costmodel import LinkParams

__all__ = ["Fit", "fit_alpha_beta"]


@dataclass
class Fit:
    """Least-squares alpha-beta fit ``t = alpha + m beta`` (+ ``gamma`` if fitted)."""

    link: LinkParams
    residuals: list[float] = field(default_factory=list)
    r2: float = float("nan")
    max_rel_err: float = float("nan")
    n: int = 0

    def to_dict(self) -> dict:
        return {"alpha_s": self.link.alpha_s, "bandwidth_bps": self.link.bandwidth_bps,
                "beta_s_per_byte": self.link.beta, "gamma_s_per_byte": self.link.gamma_s_per_byte,
                "burst_bytes": self.link.burst_bytes, "r2": self.r2, "max_rel_err": self.max_rel_err, "n": self.n}


def fit_alpha_beta(nbytes: Sequence[float], times: Sequence[float], *, weights: str = "relative",
                   latency_steps: Sequence[float] | None = None, byte_factors: Sequence[float] | None = None,
                   alpha_s: float | None = None, fit_burst: bool = False, burst_bytes: float = 0.0) -> Fit:
    """Fit alpha and beta by (weighted) least squares.

    Ping-pong: ``times[i]`` is the one-way time of a message of ``nbytes[i]`` (t = alpha + m beta).
    All-reduce: pass each measurement's ``latency_steps`` A and ``byte_factors`` B (from the algorithm's
    formula) so that t = A alpha + B m beta. ``weights="relative"`` minimises relative errors (every size
    counts, not just the largest); ``"absolute"`` is ordinary least squares. alpha is clamped at >= 0;
    ``alpha_s`` fixes it (e.g. measured separately with tiny messages) and only beta is fitted.

    ``fit_burst`` (ping-pong form, with ``alpha_s``): also fit a token-bucket burst, t = alpha + (m - burst) b
    for messages larger than the burst (each ping-pong message starts on a link that idled during the
    reply): the line's intercept below alpha is burst b. Clamped at 0. ``burst_bytes`` instead fixes the
    burst (e.g. from a ping-pong fit, for another traffic pattern on the same shaper).
    """
    import numpy as np

    m = np.asarray(nbytes, dtype=float)
    t = np.asarray(times, dtype=float)
    if m.shape != t.shape or m.size < 2:
        raise ValueError("need at least two (nbytes, time) pairs of equal length")
    A = np.ones_like(m) if latency_steps is None else np.asarray(latency_steps, dtype=float)
    B = np.ones_like(m) if byte_factors is None else np.asarray(byte_factors, dtype=float)
    X = np.stack([A, B * m], axis=1)
    w = 1.0 / t if weights == "relative" else np.ones_like(t)
    if burst_bytes < 0:
        raise ValueError(f"burst_bytes must be >= 0, got {burst_bytes}")
    burst = float(burst_bytes)
    if fit_burst:
        if alpha_s is None or latency_steps is not None or byte_factors is not None:
            raise ValueError("fit_burst needs the ping-pong form with alpha_s fixed")
        p, q = np.polyfit(m, t - float(alpha_s), 1, w=w)
        if p > 0 and q < 0:
            burst = float(-q / p)
    if alpha_s is not None:
        alpha = float(alpha_s)
    else:
        coef, *_ = np.linalg.lstsq(X * w[:, None], t * w, rcond=None)
        alpha = float(coef[0])
    if alpha < 0 or alpha_s is not None:  # (re)fit beta alone with alpha fixed (at 0 if it came out negative)
        alpha = max(alpha, 0.0)
        y = t - alpha * A
        x = X[:, 1] - burst  # burst is 0 unless fitted (then B = 1)
        beta = float(np.sum(w * w * x * y) / np.sum(w * w * x**2))
    else:
        beta = float(coef[1])
    if beta <= 0:
        raise ValueError("fitted a non-positive beta: the measurements do not grow with size")
    pred = alpha * A + beta * np.maximum(B * m - burst, 0.0)
    res = t - pred
    ss_tot = float(np.sum((t - t.mean()) ** 2))
    r2 = 1.0 - float(np.sum(res**2)) / ss_tot if ss_tot > 0 else float("nan")
    return Fit(LinkParams(alpha_s=alpha, bandwidth_bps=8.0 / beta, burst_bytes=burst), res.tolist(), r2,
               float(np.max(np.abs(res) / t)), int(m.size))
