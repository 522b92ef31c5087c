"""TCP's loss recovery in the alpha-beta model: the expected time of a message on a link that drops packets at
random (the testbed's ``loss``; ``link_loss`` of a training run).

A message of ``m`` payload bytes is ``n = ceil(m / MSS)`` segments; every segment is lost independently with
probability ``p`` (the testbed drops packets at random on every uplink). TCP delivers every byte, so loss
costs time, never data. The model follows the decomposition of Padhye, Firoiu, Towsley and Kurose, "Modeling
TCP Throughput: A Simple Model and its Empirical Validation" (SIGCOMM 1998): losses repaired while data keeps
flowing cost their retransmitted bytes, losses that nothing after them reveals cost a timeout, and a timeout
lost again doubles. It replaces Reno's triple-duplicate-ACK analysis by the recovery of the Linux stack the
testbed runs (SACK, RACK-TLP of RFC 8985, the retransmission timer of RFC 6298 with Linux's 200 ms floor):

1. Resent bytes: a segment is sent until it arrives, ``1 / (1 - p)`` times on average, so the message's bytes
   take ``m beta / (1 - p)``. A loss followed by later segments of the message is found by SACK (RACK: a
   segment sent after it was delivered) and resent while the later ones keep the link busy: no stall.
2. Window: a loss-based congestion control (Reno, CUBIC) keeps about ``W = sqrt(3 / (2 p))`` segments in flight
   (Mathis, Semke, Mahdavi and Ott, "The Macroscopic Behavior of the TCP Congestion Avoidance Algorithm", CCR
   1997), at most ``W MSS`` bytes per round trip: ``beta_loss = max(beta / (1 - p), RTT / (W MSS))``. BBR
   (the testbed's default where the kernel's is BBR) paces at the bottleneck rate whatever the random loss
   (below its ~20% tolerance): no window term.
3. Tail: a loss of the message's last segment (probability ``p``) is revealed by nothing after it. Linux's
   tail loss probe (``tcp_schedule_loss_probe``) waits 2 SRTT plus the delayed-ACK allowance ``RTO_min``
   while one segment is outstanding -- which the lost last one is, once the earlier ones are acknowledged --
   capped at the retransmission timer: the tail waits ``RTO = RTT + 200 ms`` (Linux: SRTT + an RTTVAR floored
   at ``tcp_rto_min``).
4. Backoff: a probe or retransmission lost again waits twice as long (RFC 6298), so the expected wait of a
   tail loss is ``RTO (1 + 2p + 4p^2 + ...) = RTO / (1 - 2p)``.

Expected time of one message (``alpha`` its latency, ``beta`` seconds per payload byte)::

    t(m) = alpha + p RTO / (1 - 2p) + m beta_loss

A step of a collective with ``k`` messages in flight at once ends with its last: its stall is charged with the
probability that any of the ``k`` loses its tail (``1 - (1 - p)^k``), never the mean of one. In a pipelined
collective (a ring) the next step's data on the same connection reveals an earlier step's lost tail (RACK
resends it at once), so only the last step's tails wait for the timer: the virtual clock charges the stall
once per call (:class:`lowbw.train.links.LossyLink`), a message to a server once per message. What the model
leaves out: lost ACKs (cumulative ACKs cover them; the receiver has the data), the slow start after a timeout,
and two or more tail segments lost at once (the probe then waits ``2 SRTT`` + a few ms: a shorter stall).
:mod:`lowbw.bench.loss` measures one message at a time on the testbed against :func:`message_time`.
Torch-free, pure.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["MSS", "RTO_MIN_S", "LossRecovery", "recovery", "message_time", "extra_time", "lossy_alpha_beta",
           "LOSS_BASED"]

MSS = 1448  # payload bytes per segment: TCP/IPv4 with timestamps over Ethernet (MTU 1500)
RTO_MIN_S = 0.200  # Linux's floor of the retransmission timeout (TCP_RTO_MIN, net.ipv4.tcp_rto_min_us)
LOSS_BASED = ("reno", "cubic")  # congestion controls whose window random loss shrinks (Mathis et al. 1997)


@dataclass(frozen=True)
class LossRecovery:
    """What packet loss adds to a message of a link (the module docstring's terms)."""

    loss: float  # p: fraction of packets dropped at random, in [0, 0.5)
    rtt_s: float  # the round trip the timers see (s)
    rto_s: float  # what a lost tail waits: the retransmission timeout before backoff, RTT + RTO_min (s)
    stall_s: float  # expected stall of a step: P(some message's tail lost) x RTO / (1 - 2p) (s)
    beta_factor: float  # the link's seconds per byte under loss / without (>= 1)


def _check(loss: float, rtt_s: float, bandwidth_bps: float, concurrent: int) -> None:
    if not 0 <= loss < 0.5:
        raise ValueError(f"loss {loss!r}: the recovery model needs a fraction in [0, 0.5)")
    if rtt_s < 0 or bandwidth_bps <= 0 or concurrent < 1:
        raise ValueError(f"rtt_s={rtt_s!r} (>= 0), bandwidth_bps={bandwidth_bps!r} (> 0), concurrent={concurrent!r} "
                         "(>= 1)")


def recovery(loss: float, rtt_s: float, bandwidth_bps: float, congestion: str = "bbr",
             concurrent: int = 1) -> LossRecovery:
    """The terms of the model for a link of ``bandwidth_bps`` (payload bits/s) and round trip ``rtt_s`` with
    random loss ``loss`` under ``congestion`` (a name in :data:`LOSS_BASED` gets the window term); the stall is
    that of the slowest of ``concurrent`` messages in flight at once."""
    _check(loss, rtt_s, bandwidth_bps, concurrent)
    rto = rtt_s + RTO_MIN_S
    if loss == 0:
        return LossRecovery(0.0, rtt_s, rto, 0.0, 1.0)
    p_tail = 1 - (1 - loss) ** concurrent  # some message of the step lost its last segment
    stall = p_tail * rto / (1 - 2 * loss)
    beta = 8.0 / bandwidth_bps
    per_byte = beta / (1 - loss)
    if congestion in LOSS_BASED and rtt_s > 0:
        window = math.sqrt(3 / (2 * loss))  # segments per round trip (Mathis et al.'s C = sqrt(3/2))
        per_byte = max(per_byte, rtt_s / (window * MSS))
    return LossRecovery(loss, rtt_s, rto, stall, per_byte / beta)


def message_time(nbytes: float, alpha_s: float, bandwidth_bps: float, loss: float, rtt_s: float,
                 congestion: str = "bbr") -> float:
    """Expected seconds of one message of ``nbytes`` payload bytes alone on the link (the module's ``t(m)``)."""
    if nbytes < 0:
        raise ValueError(f"nbytes must be >= 0, got {nbytes!r}")
    r = recovery(loss, rtt_s, bandwidth_bps, congestion, 1)
    return alpha_s + r.stall_s + nbytes * 8.0 / bandwidth_bps * r.beta_factor


def extra_time(nbytes: float, alpha_s: float, bandwidth_bps: float, loss: float, rtt_s: float,
               congestion: str = "bbr") -> float:
    """What loss adds to one message: ``message_time`` at ``loss`` less at no loss (s)."""
    return (message_time(nbytes, alpha_s, bandwidth_bps, loss, rtt_s, congestion)
            - message_time(nbytes, alpha_s, bandwidth_bps, 0.0, rtt_s, congestion))


def lossy_alpha_beta(alpha_s: float, bandwidth_bps: float, loss: float, rtt_s: float, congestion: str = "bbr",
                     concurrent: int = 1) -> tuple[float, float]:
    """(alpha, bandwidth in bits/s) of the alpha-beta link that charges the model: every latency step (a
    message, or ``concurrent`` at once) pays the expected stall, every byte ``beta_factor`` times its time."""
    r = recovery(loss, rtt_s, bandwidth_bps, congestion, concurrent)
    return alpha_s + r.stall_s, bandwidth_bps / r.beta_factor
