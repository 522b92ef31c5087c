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
3. Tail: a loss that no later delivery reveals waits for a timer. RACK (RFC 8985) finds a lost segment, a lost
   retransmission too, once a segment *sent after it* is delivered, so a loss while the message's data keeps
   flowing costs no wait; but every round of repairs ends with a last transmission, and a loss of that one
   nothing reveals. The tail loss probe fires only in TCP's Open state (RFC 8985 Sec. 7.2; Linux's
   ``tcp_schedule_loss_probe``), after 2 SRTT plus ``tcp_rto_min`` (200 ms) when one segment is outstanding,
   capped at the retransmission timer; inside a recovery only the retransmission timer of RFC 6298 is left,
   which Linux floors at SRTT + 200 ms. So each such wait is ``RTO = RTT + 200 ms``.
4. Rounds: the message is done when its unluckiest segment arrives: with ``n`` segments, the expected number of
   transmissions of the unluckiest is ``G(n) = sum_{k >= 0} 1 - (1 - p^k)^n`` (1 + the chance that some
   segment is lost + that some is lost twice + ...: about 1 + log(n) / log(1 / p) rounds), and each round's last
   transmission is lost with probability ``p``. A round's wait lost again doubles (RFC 6298's backoff): a wait
   costs ``RTO (1 + 2p + 4p^2 + ...) = RTO / (1 - 2p)`` on average.

Expected time of one message (``alpha`` its latency, ``beta`` seconds per payload byte)::

    t(m) = alpha + p G(ceil(m / MSS)) RTO / (1 - 2p) + m beta_loss

A step of a collective with ``k`` messages in flight at once of ``n`` segments each ends with the unluckiest of
its ``k n`` segments: its stall is ``p G(k n) RTO / (1 - 2p)``, never the sum over messages; a call's messages
carry its critical path's bytes (:class:`lowbw.train.links.LossyLink`), a message to a server is one message.

What the model leaves out: lost ACKs (cumulative ACKs cover them; the receiver has the data), the slow start
after a timeout, a probe that fires sooner (two or more segments outstanding: 2 SRTT + two ticks), and BBR's
bandwidth filter after a timer wait: on a connection whose sender waits for an answer between messages (an
application-limited flow) the interval of the wait can become BBR's only bandwidth sample (one segment per
RTO), and a later message's first segments then leave about one per RTO (Linux's BBR paces at the windowed
maximum of its delivery-rate samples, Cardwell et al., "BBR: Congestion-Based Congestion Control", ACM Queue
2016): small messages at low loss pay a tail loss more than once. :mod:`lowbw.bench.loss` measures one message
at a time on the testbed against :func:`message_time`; :mod:`lowbw.bench.loss_train` a training run against the
clock.
Torch-free, pure.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["MSS", "RTO_MIN_S", "LossRecovery", "recovery", "repair_rounds", "segments", "stall", "message_time",
           "extra_time", "lossy_alpha_beta", "LOSS_BASED"]

MSS = 1448  # payload bytes per segment: TCP/IPv4 with timestamps over Ethernet (MTU 1500)
RTO_MIN_S = 0.200  # Linux's floor of the retransmission timeout (TCP_RTO_MIN, net.ipv4.tcp_rto_min_us)
LOSS_BASED = ("reno", "cubic")  # congestion controls whose window random loss shrinks (Mathis et al. 1997)


@dataclass(frozen=True)
class LossRecovery:
    """What packet loss adds to a message of a link (the module docstring's terms)."""

    loss: float  # p: fraction of packets dropped at random, in [0, 0.5)
    rtt_s: float  # the round trip the timers see (s)
    rto_s: float  # what a lost tail waits: the retransmission timeout before backoff, RTT + RTO_min (s)
    stall_s: float  # expected stall of a step: p G(k n) RTO / (1 - 2p) for its k messages of n segments (s)
    beta_factor: float  # the link's seconds per byte under loss / without (>= 1)


def segments(nbytes: float) -> int:
    """TCP segments of a message of ``nbytes`` payload bytes (at least one)."""
    return max(1, math.ceil(nbytes / MSS))


def repair_rounds(loss: float, n: int) -> float:
    """``G(n)``: the expected transmissions of the unluckiest of ``n`` segments each lost with probability
    ``loss`` (``sum_{k >= 0} 1 - (1 - loss^k)^n``; 1 without loss, ``1 / (1 - loss)`` for one segment)."""
    if n < 1:
        raise ValueError(f"n={n!r}: at least one segment")
    if loss <= 0:
        return 1.0
    total, k = 1.0, 1
    while True:
        term = -math.expm1(n * math.log1p(-loss ** k))  # 1 - (1 - p^k)^n without cancellation
        total += term
        if term < 1e-12:
            return total
        k += 1


def stall(loss: float, rto_s: float, n: int) -> float:
    """Expected timer waits of ``n`` segments sent together (a message, or a step's messages): ``p G(n) RTO /
    (1 - 2p)`` seconds (the module's rounds and backoff)."""
    if loss <= 0:
        return 0.0
    return loss * repair_rounds(loss, n) * rto_s / (1 - 2 * loss)


def _check(loss: float, rtt_s: float, bandwidth_bps: float, concurrent: int) -> None:
    if not 0 <= loss < 0.5:
        raise ValueError(f"loss {loss!r}: the recovery model needs a fraction in [0, 0.5)")
    if rtt_s < 0 or bandwidth_bps <= 0 or concurrent < 1:
        raise ValueError(f"rtt_s={rtt_s!r} (>= 0), bandwidth_bps={bandwidth_bps!r} (> 0), concurrent={concurrent!r} "
                         "(>= 1)")


def recovery(loss: float, rtt_s: float, bandwidth_bps: float, congestion: str = "bbr",
             concurrent: int = 1, nbytes: float = MSS) -> LossRecovery:
    """The terms of the model for a link of ``bandwidth_bps`` (payload bits/s) and round trip ``rtt_s`` with
    random loss ``loss`` under ``congestion`` (a name in :data:`LOSS_BASED` gets the window term); the stall is
    that of ``concurrent`` messages of ``nbytes`` payload bytes each in flight at once (default: one segment)."""
    _check(loss, rtt_s, bandwidth_bps, concurrent)
    rto = rtt_s + RTO_MIN_S
    if loss == 0:
        return LossRecovery(0.0, rtt_s, rto, 0.0, 1.0)
    wait = stall(loss, rto, concurrent * segments(nbytes))
    beta = 8.0 / bandwidth_bps
    per_byte = beta / (1 - loss)
    if congestion in LOSS_BASED and rtt_s > 0:
        window = math.sqrt(3 / (2 * loss))  # segments per round trip (Mathis et al.'s C = sqrt(3/2))
        per_byte = max(per_byte, rtt_s / (window * MSS))
    return LossRecovery(loss, rtt_s, rto, wait, per_byte / beta)


def message_time(nbytes: float, alpha_s: float, bandwidth_bps: float, loss: float, rtt_s: float,
                 congestion: str = "bbr") -> float:
    """Expected seconds of one message of ``nbytes`` payload bytes alone on the link (the module's ``t(m)``)."""
    if nbytes < 0:
        raise ValueError(f"nbytes must be >= 0, got {nbytes!r}")
    r = recovery(loss, rtt_s, bandwidth_bps, congestion, 1, nbytes)
    return alpha_s + r.stall_s + nbytes * 8.0 / bandwidth_bps * r.beta_factor


def extra_time(nbytes: float, alpha_s: float, bandwidth_bps: float, loss: float, rtt_s: float,
               congestion: str = "bbr") -> float:
    """What loss adds to one message: ``message_time`` at ``loss`` less at no loss (s)."""
    return (message_time(nbytes, alpha_s, bandwidth_bps, loss, rtt_s, congestion)
            - message_time(nbytes, alpha_s, bandwidth_bps, 0.0, rtt_s, congestion))


def lossy_alpha_beta(alpha_s: float, bandwidth_bps: float, loss: float, rtt_s: float, congestion: str = "bbr",
                     concurrent: int = 1, nbytes: float = MSS) -> tuple[float, float]:
    """(alpha, bandwidth in bits/s) of the alpha-beta link that charges the model: every latency step (a
    message, or ``concurrent`` at once, of ``nbytes`` each: default one segment, where the size is not known
    when the link is made) pays the expected stall, every byte ``beta_factor`` times its time."""
    r = recovery(loss, rtt_s, bandwidth_bps, congestion, concurrent, nbytes)
    return alpha_s + r.stall_s, bandwidth_bps / r.beta_factor
