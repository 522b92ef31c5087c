"""E1's calibrated model of our collectives on the testbed's links: the alpha-beta model
(:func:`lowbw.net.costmodel.allreduce_time`) on a link calibrated by ping-pong and simultaneous exchanges
between two workers (:func:`calibrate`), plus three terms the testbed's links and gloo add, which only show
with link delay or many small steps:

* gloo's receiver-ready handshake (:func:`handshake_steps`): a step whose receive is posted with its send
  waits one more one-way time;
* token buckets refilled between steps (:func:`refilled_burst_bytes`): each shaped uplink's tbf bucket
  refills while the link waits for the peer, so a later step's first bytes leave at line rate; for the heap
  tree's one-chunk messages, every hop of its chain (3 -> 1 -> 0 -> 1 -> 3 at N = 4) with the buckets of both
  links it crosses (:func:`tree_chain_paced_bytes`);
* the heap tree's receive window (:func:`window_wait`), where the delay-bandwidth product exceeds it;
* each message step's software cost (:func:`software_calibration`): Python, gloo and the wake-ups between
  one step's receive and the next step's send, which the ping-pong's alpha does not contain; measured
  separately, per algorithm, as the time of a tiny call beyond the model, per latency step
  (:func:`software_steps`). It is added per step and, being idle link time, also refills the buckets;
* each call's start lag (:func:`software_start_s`): the time from the call's start to the last rank's first
  message posted (setting up the call's transport and schedule in Python), measured in the same tiny calls
  traced per message, charged once per call (before any step, so it refills no bucket: they start full)
  and taken out of the tiny calls' time before the per-step cost is derived from them.

:func:`calibrated_time` adds them up. Sizes in bytes, rates in bits/s, times in seconds.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from lowbw.comm.registry import get as collective
from lowbw.comm.tree import HEAP_TREE_MAX_CHUNK_BYTES
from lowbw.comm.tree import SPEC as HEAP_TREE
from lowbw.net.costfit import fit_alpha_beta
from lowbw.net.costmodel import LinkParams, allreduce_time

__all__ = ["FIT_MIN_BYTES", "BUCKET_FIT_FACTOR", "WINDOW", "TCP_PAYLOAD_PER_FRAME",
           "SOFTWARE_BYTES", "calibrate", "model_link", "handshake_steps", "step_messages", "refilled_burst_bytes",
           "software_steps", "software_calibration", "software_step_s", "software_start_s", "start_lag",
           "TreeChain", "tree_chain",
           "tree_chain_paced_bytes", "window_wait", "calibrated_time"]

FIT_MIN_BYTES = 256 << 10
BUCKET_FIT_FACTOR = 4  # with the shapers' bucket known, beta is fitted over messages of >= this many buckets
WINDOW = 4  # lowbw.comm's receive window (chunks in flight per stream; lowbw.comm.engine.DEFAULT_WINDOW)
TCP_PAYLOAD_PER_FRAME = 1448 / 1514  # TCP payload (MSS with timestamps) per full-size Ethernet frame
SOFTWARE_BYTES = 256  # the tiny call that measures each step's software cost (64 float32: >= 1 per ring segment)



def handshake_steps(algorithm: str, n: int) -> int | None:
    """Steps of ``algorithm``'s schedule (lowbw.comm on gloo, N = ``n``) whose receive is posted no earlier
    than the matching send, on the critical path (its ``SPEC.handshake``); None where not worked out (no
    correction applied).

    gloo's TCP pair sends an unbound buffer only once the receiver's ready notice has arrived ("sends cannot
    execute until the remote side is ready to receive", gloo/transport/tcp/pair.cc), so such a step costs
    one more one-way time than the alpha-beta model's ``alpha``. Each collective's module says which of its
    steps do (e.g. the ring's step 0: its later receives are posted a window ahead)."""
    spec = collective(algorithm)
    if n < 2:
        return 0
    return spec.handshake(n) if spec.handshake is not None else None


def calibrate(pp: list[dict], rate_bps: float, gamma_s_per_byte: float | None = None,
               bucket_bytes: float | None = None) -> dict:
    """alpha: the one-way time of the smallest message (pure latency, inside tbf's burst); beta and the
    shaper's burst: least squares over the messages far larger than the burst with alpha fixed, t = alpha +
    (m - burst) beta (each ping-pong message starts on a link that idled during the reply) -- beta once for
    ping-pong (one direction at a time) and once for the simultaneous exchange (both directions at once,
    burst as in ping-pong, intercept the exchange's own smallest time); gamma: the measured local summing
    time per byte (0 if not measured).

    ``handshake_s``: what a send waits when its receive is posted at the same moment (the exchange's
    smallest time less the ping-pong's, whose receives are posted ahead: about one one-way delay; see
    :func:`handshake_steps`). It is also why the exchange has its own intercept: fitted through the
    ping-pong's alpha, its beta would absorb the handshake (~10% at 20 ms and 10 Mbit/s).

    ``bucket_bytes``: the shapers' configured token bucket (tbf's burst, bytes on the wire), where known. The
    burst is then that bucket's TCP payload, not fitted, and beta is fitted (relative errors) over the
    messages of at least ``BUCKET_FIT_FACTOR`` buckets: with delay, the largest messages also pay a
    loss-recovery round trip once TCP's window overruns the shaper's queue, and a fitted intercept would
    absorb that as a burst several times the bucket's (it grew with the delay), overcharging every
    message of a few buckets."""
    alpha = min(p["one_way_s"] for p in pp)
    if bucket_bytes:
        burst = float(bucket_bytes) * TCP_PAYLOAD_PER_FRAME
        big = [p for p in pp if p["nbytes"] >= BUCKET_FIT_FACTOR * burst]
        fit = fit_alpha_beta([p["nbytes"] for p in big], [p["one_way_s"] for p in big], weights="relative",
                             alpha_s=alpha, burst_bytes=burst)
    else:
        big = [p for p in pp if p["nbytes"] >= FIT_MIN_BYTES]
        fit = fit_alpha_beta([p["nbytes"] for p in big], [p["one_way_s"] for p in big], weights="absolute",
                             alpha_s=alpha, fit_burst=True)
    out = {"fit": fit.to_dict(), "pingpong": pp, "nominal_rate_bps": rate_bps, "fit_min_bytes": FIT_MIN_BYTES,
           "efficiency": fit.link.bandwidth_bps / rate_bps, "gamma_s_per_byte": float(gamma_s_per_byte or 0.0),
           "handshake_s": 0.0, "shaper_burst_bytes": bucket_bytes}
    # the exchange: beta over the messages far larger than the bucket (FIT_MIN_BYTES), where a message's two
    # directions share the links' queues and ACKs steadily (of a few buckets, they collide in the queue first)
    ex = [p for p in pp if p.get("exchange_s") and p["nbytes"] >= FIT_MIN_BYTES]
    if len(ex) >= 2:
        alpha_x = min(p["exchange_s"] for p in pp if p.get("exchange_s"))
        # the same shapers, so the same burst (the exchange's own intercept is noisier: ACKs share the links)
        fx = fit_alpha_beta([p["nbytes"] for p in ex], [p["exchange_s"] for p in ex], weights="absolute",
                            alpha_s=alpha_x, burst_bytes=fit.link.burst_bytes)
        out.update(fit_duplex=fx.to_dict(), efficiency_duplex=fx.link.bandwidth_bps / rate_bps,
                   handshake_s=max(0.0, alpha_x - alpha))
    return out


def model_link(cal: dict, algorithm: str):
    """The calibrated link for ``algorithm``: the ping-pong's alpha (one-way), the beta of its traffic
    pattern and that fit's burst: the simultaneous exchange's where its busiest links carry data in both
    directions at once (``SPEC.duplex``: each direction then also carries the ACKs of the other), else the
    ping-pong's (one direction at a time)."""
    f = cal.get("fit_duplex") if collective(algorithm).duplex and cal.get("fit_duplex") else cal["fit"]
    return LinkParams(alpha_s=cal["fit"]["alpha_s"], bandwidth_bps=f["bandwidth_bps"],
                      gamma_s_per_byte=float(cal.get("gamma_s_per_byte") or 0.0),
                      burst_bytes=float(f.get("burst_bytes") or 0.0))


def software_steps(algorithm: str, n: int) -> int:
    """The latency steps of ``algorithm`` on N = ``n`` (the alpha-beta model's coefficient of alpha: ring
    2(N-1), tree 2 floor(log2 N), ps 2, butterfly 2 log2 P + 2 for a fold): the message steps each of
    which pays the software cost once on the critical path."""
    return int(round(allreduce_time(algorithm, 1.0, n, LinkParams(alpha_s=1.0, bandwidth_bps=1e30))))


def _quartiles(xs: list[float]) -> tuple[float, float, float]:
    """(q25, median, q75) of ``xs`` (inclusive quartiles; one value: itself three times)."""
    xs = sorted(xs)
    q = statistics.quantiles(xs, n=4, method="inclusive") if len(xs) > 1 else [xs[0]] * 3
    return q[0], statistics.median(xs), q[2]


def start_lag(lags: list) -> dict | None:
    """The per-call start lag from traced tiny calls: ``lags`` holds, per call, each rank's first message's
    posting time in seconds from the call's common start (None: a rank posted nothing); a call's lag is the
    latest rank's (every step's chain waits for the rank that starts last). Returns {"start_lag_s": the
    calls' median, "start_lag_q25_s", "start_lag_q75_s", "start_lag_calls"} or None without data."""
    per_call = [max(x for x in c if x is not None) for c in lags or [] if any(x is not None for x in c)]
    if not per_call:
        return None
    q25, med, q75 = _quartiles(per_call)
    return {"start_lag_s": med, "start_lag_q25_s": q25, "start_lag_q75_s": q75, "start_lag_calls": len(per_call)}


def software_calibration(cal: dict, tiny: dict, n: int) -> dict:
    """Each algorithm's software cost per call and per latency step, from its tiny calls ``tiny`` (algorithm
    -> {"nbytes", "times_s": the slowest rank's time of each timed call, as for the grid; "start_lags_s":
    the same calls traced, see :func:`start_lag`}) on the testbed ``cal`` calibrates: the start lag L
    (:func:`start_lag`, 0 where not traced; charged at most t - T) and s = (t - T - L) / k, with t the
    calls' median, T the
    calibrated model's time of that call without software cost (:func:`calibrated_time` on ``cal`` without
    its ``software``) and k :func:`software_steps`; their spread from the calls' quartiles
    (``per_step_q25_s``, ``per_step_q75_s``, ``start_lag_q25_s``, ``start_lag_q75_s``). A tiny call has
    no bytes to speak of, so this is a separate measurement from every grid setting.
    Returns algorithm -> the entry (the input's fields kept)."""
    base = {k: v for k, v in cal.items() if k != "software"}
    out = {}
    for alg, e in tiny.items():
        times = [float(x) for x in e.get("times_s") or []]
        if not times:
            continue
        k = software_steps(alg, n)
        model = calibrated_time(base, alg, float(e["nbytes"]), n)
        lag = start_lag(e.get("start_lags_s"))
        q25, med, q75 = _quartiles(times)
        # charged: at most the tiny call's whole cost beyond the model (a lag traced in another session than
        # the tiny calls' times can exceed it; the per-step cost is then 0, not negative)
        lag_s = min(lag["start_lag_s"], max(0.0, med - model)) if lag else 0.0
        out[alg] = {**e, **(lag or {}), **({"start_lag_charged_s": lag_s} if lag else {}),
                    "time_s": med, "model_s": model, "steps": k,
                    "per_step_s": (med - model - lag_s) / k,
                    "per_step_q25_s": (q25 - model - lag_s) / k, "per_step_q75_s": (q75 - model - lag_s) / k}
    return out


def software_step_s(cal: dict, algorithm: str) -> float:
    """The software cost per latency step the model charges ``algorithm`` on testbed ``cal`` (seconds;
    0 where not measured; a negative measured value, a tiny call faster than the model, counts as 0)."""
    e = (cal.get("software") or {}).get(algorithm)
    return max(0.0, float(e["per_step_s"])) if e else 0.0


def software_start_s(cal: dict, algorithm: str) -> float:
    """The start lag the model charges ``algorithm``'s call once on testbed ``cal`` (seconds; 0 where not
    measured or negative): the measured one, capped at the tiny call's cost beyond the model
    (``start_lag_charged_s``, :func:`software_calibration`)."""
    e = (cal.get("software") or {}).get(algorithm)
    return max(0.0, float(e.get("start_lag_charged_s", e.get("start_lag_s")) or 0.0)) if e else 0.0


def step_messages(algorithm: str, nbytes: float, n: int, chunk_bytes: float | None = None
                  ) -> list[tuple[float, str]] | None:
    """(bytes, link) a rank sends in each step of ``algorithm``'s schedule on the critical path, in order,
    where steps are separated by a wait for the peer's data (each step's send waits for the previous step's
    receive); ``link`` names the shaped uplink it leaves by (steps on one link share its token bucket): the
    collective's ``SPEC.step_messages`` (chunk: 4 MiB by default). None where the links stream without such
    gaps (``ps``: two phases, already the model's idle starts; the heap tree: its hops cross two buckets
    each, see :func:`tree_chain_paced_bytes`) or where a ring segment spans several chunks (then the window
    keeps the link busy)."""
    spec = collective(algorithm)
    if n < 2 or spec.step_messages is None:
        return None
    return spec.step_messages(nbytes, n, float(chunk_bytes or 4 << 20))


def refilled_burst_bytes(cal: dict, algorithm: str, nbytes: float, n: int, chunk_bytes: float | None = None) -> float:
    """Bytes that go at line rate beyond the one idle start :func:`lowbw.net.costmodel.allreduce_time` counts
    for ``ring`` and ``butterfly``, from a token bucket per shaped link (:func:`step_messages`): a link starts
    the call with a full bucket, each step's first bytes spend what is in it, and between steps it refills at
    the shaper's rate while the link waits for the peer's data (one one-way time; in a butterfly exchange
    also gloo's handshake; and the step's software cost, :func:`software_step_s`), up to the bucket.
    Negligible for the ring without delay (~12 ms refill at 10
    Mbit/s under tbf's 10-frame minimum burst); with added delay most of a small step goes free, and a
    butterfly that folds starts its exchanges on links with full buckets. The bucket is the shapers'
    configured burst (``shaper_burst_bytes``, in TCP payload; refilled in payload bytes too), not a fitted
    one. Negative where the model's one idle start frees more than the links can. ``tree``: the bytes
    :func:`lowbw.net.costmodel.allreduce_time` charges at the shaped rate less those of
    :func:`tree_chain_paced_bytes` (0 where that does not apply)."""
    if collective(algorithm).heap_chain:
        return _tree_refilled_bytes(cal, algorithm, nbytes, n, chunk_bytes)
    steps = step_messages(algorithm, nbytes, n, chunk_bytes)
    wire = float(cal.get("shaper_burst_bytes") or 0.0)  # the bucket's size (tbf's burst, wire bytes)
    if not steps or len(steps) < 2 or not wire:
        return 0.0
    bucket = wire * TCP_PAYLOAD_PER_FRAME
    first = float(model_link(cal, algorithm).burst_bytes)  # the model's one idle start
    every = collective(algorithm).handshake_every_step  # e.g. the butterfly's exchanges
    gap = cal["fit"]["alpha_s"] + (float(cal.get("handshake_s") or 0.0) if every else 0.0)
    gap += software_step_s(cal, algorithm)  # the receiver's software before it sends on
    refill = gap * float(cal["nominal_rate_bps"]) / 8 * TCP_PAYLOAD_PER_FRAME  # payload bytes, as the bucket
    tokens: dict[str, float] = {}
    paced = 0.0
    for m, link in steps:
        tokens[link] = bucket if link not in tokens else min(bucket, tokens[link] + refill)
        free = min(tokens[link], m)
        tokens[link] -= free
        paced += m - free
    total = sum(m for m, _ in steps)
    return (total - min(first, total)) - paced


@dataclass(frozen=True)
class TreeChain:
    """The heap tree's one-chunk chain at N = 4 (:func:`tree_chain`): the bytes each hop sends free out of
    the buckets (``free``: 3 -> 1, 1 -> 0, 0 -> 1, 1 -> 3) and when each message has arrived, in seconds
    from the call's start (``arrive``: those hops and the root's second stream 0 -> 2; the first hops
    include gloo's handshake); ``paced`` the critical path's bytes at the shaped rate (the longer of the
    paths to leaves 3 and 2, counted as bytes beyond 4 alpha + 3 s)."""

    free: dict
    arrive: dict
    paced: float


def tree_chain(cal: dict, nbytes: float, n: int, chunk_bytes: float | None = None,
               algorithm: str = HEAP_TREE.name) -> TreeChain | None:
    """Bytes the heap tree's critical path sends at the shaped rate (the rest leaves at line rate out of the
    links' tbf buckets), for a message of one chunk (``nbytes`` <= min(chunk, 256 KiB)) on N = ``n`` <= 4;
    None otherwise (the chunks then stream and the model's two idle starts stand). ``algorithm``: the
    heap-chain collective (``SPEC.heap_chain``) whose calibrated link and software cost it takes.

    Every message crosses two shapers, its sender's uplink and its receiver's downlink, each with a bucket
    of b (``shaper_burst_bytes`` in TCP payload), full at the call's start. A flow of m bytes through buckets
    holding T_up and T_down sends f = min(T_up, T_down, m) free and the rest paced: it lasts alpha + (m - f)
    beta, and leaves both buckets at max(0, T - m). A bucket refills at the shaper's rate r (payload bytes/s)
    up to b, from its last flow's end to its next flow's start, both taken at the link: g = (next send's
    start) - (last receive's end) + alpha (the one-way time is split between the two sides of the bridge;
    either split gives this gap); a node sends on one software step s (:func:`software_step_s`) after its
    receive ends. The schedule (lowbw.comm.tree, leaves' sends first, a node sends up once
    all its children's chunks are in, the root and node 1 forward down as soon as theirs is, children in
    order [2v+1, 2v+2]):

    * N = 2: 1 -> 0, then 0 -> 1: paced (m - f1) + (m - f2);
    * N = 3: 1, 2 -> 0 into 0's downlink together, then 0 -> 1, 2 out of 0's uplink, each phase's shared
      bucket full (f = min(b, 2m)): paced 2 (2m - f);
    * N = 4: 3 -> 1 (while 2 -> 0 drains 0's downlink), 1 -> 0 (0's downlink refilled for g = alpha + s), 0 -> 1
      and 0 -> 2 out of 0's uplink: the first posted stream (to 1) takes the burst f3 and then shares the
      uplink round robin with the stream to 2, so its rest (m - f3) takes 2 (m - f3) beta; then 1 -> 3 (1's
      uplink refilled since its send to 0 ended): paced (m - f1) + (m - f2) + 2 (m - f3) + (m - f4). The
      root's second stream (to 2) is done when the root's uplink has carried both, 2m - min(b, 2m) of them
      paced, whatever way TCP shares it: a path one hop shorter that ends last where the hop 1 -> 3 is
      mostly free (small m, short delay). ``paced`` is the longer path, as bytes beyond the chain's four
      one-way times and three software steps.

    All buckets full (N = 2, 3, or long gaps), this is the model's 2 idle starts for N = 2 and 3; for N = 4
    the chain frees up to 5 buckets where :func:`lowbw.net.costmodel.allreduce_time` credits 3 (its two
    idle starts and the fill chunk's)."""
    wire = float(cal.get("shaper_burst_bytes") or 0.0)
    m = float(nbytes)
    c = min(float(chunk_bytes or 4 << 20), float(HEAP_TREE_MAX_CHUNK_BYTES))
    if not wire or not 2 <= n <= 4 or m <= 0 or m > c:
        return None
    b = wire * TCP_PAYLOAD_PER_FRAME
    a = float(cal["fit"]["alpha_s"])
    s = software_step_s(cal, algorithm)
    beta = model_link(cal, algorithm).beta
    rate = float(cal["nominal_rate_bps"]) / 8 * TCP_PAYLOAD_PER_FRAME  # refill, payload bytes/s

    def refilled(left: float, gap: float) -> float:
        return min(b, left + max(0.0, gap) * rate)

    if n < 4:  # each phase's shared link (0's downlink, then 0's uplink) has not carried data before it
        return TreeChain({}, {}, 2 * (n - 1) * m - 2 * min(b, (n - 1) * m))
    left = max(0.0, b - m)  # what a full bucket keeps after one flow of m
    f1 = min(b, m)  # 3 -> 1 (and 2 -> 0, the same size at the same time; both end at their receivers at t1)
    t1 = a + (m - f1) * beta
    f2 = min(refilled(left, a + s), m)  # 1 -> 0 at t1 + s: 1's uplink full, 0's downlink refilled since t1
    t2 = t1 + s + a + (m - f2) * beta
    f3 = min(refilled(left, t2 + s - t1 + a), m)  # 0 -> 1 first at t2 + s: 0's uplink full, 1's downlink since t1
    t3 = t2 + s + a + 2 * (m - f3) * beta
    f4 = min(refilled(left, t3 + s - t2 + a), m)  # 1 -> 3 at t3 + s: 3's downlink full, 1's uplink since t2
    t4 = t3 + s + a + (m - f4) * beta
    up0 = 2 * m - min(b, 2 * m)  # the root's uplink: both streams, its full bucket free, however TCP shares it
    t5 = t2 + s + a + up0 * beta  # 0 -> 2, the root's second stream, done when the uplink is
    hs = float(cal.get("handshake_s") or 0.0) + software_start_s(cal, algorithm)  # both before the first hop
    arrive = {"3->1": hs + t1, "1->0": hs + t2, "0->1": hs + t3, "0->2": hs + t5, "1->3": hs + t4}
    chain = (m - f1) + (m - f2) + 2 * (m - f3) + (m - f4)  # t4 = 4 a + 3 s + chain beta
    second = (m - f1) + (m - f2) + up0 - (a + s) / beta  # t5 = 4 a + 3 s + second beta (one hop less)
    return TreeChain({"3->1": f1, "1->0": f2, "0->1": f3, "1->3": f4}, arrive, max(chain, second))


def tree_chain_paced_bytes(cal: dict, nbytes: float, n: int, chunk_bytes: float | None = None,
                           algorithm: str = HEAP_TREE.name) -> float | None:
    """Bytes the heap tree's critical path sends at the shaped rate (:func:`tree_chain`'s ``paced``); None
    where the chain does not apply."""
    chain = tree_chain(cal, nbytes, n, chunk_bytes, algorithm)
    return None if chain is None else chain.paced


def _tree_refilled_bytes(cal: dict, algorithm: str, nbytes: float, n: int, chunk_bytes: float | None) -> float:
    """The bytes :func:`lowbw.net.costmodel.allreduce_time` charges the heap tree ``algorithm`` at the shaped
    rate (its byte and fill terms, with the calibrated burst) less :func:`tree_chain_paced_bytes`; 0 where
    that is None."""
    paced = tree_chain_paced_bytes(cal, nbytes, n, chunk_bytes, algorithm)
    if paced is None:
        return 0.0
    link = model_link(cal, algorithm)
    bytes_only = LinkParams(alpha_s=0.0, bandwidth_bps=link.bandwidth_bps, burst_bytes=link.burst_bytes)
    return allreduce_time(algorithm, nbytes, n, bytes_only, chunk_bytes) / link.beta - paced


def window_wait(cal: dict, algorithm: str, nbytes: float, n: int, chunk_bytes: float | None = None) -> float:
    """Seconds the heap tree's two phases last beyond their link time because its receive window, not the link,
    paces them: each stream has ``WINDOW`` chunks of c = min(chunk, 256 KiB) posted ahead, and a chunk leaves
    only after its receiver's ready notice, so a stream moves at most w c per cycle of alpha + handshake +
    c beta: a phase of k chunks takes max(kids M beta, (ceil(k / w) - 1) cycle + (the last window's chunks)
    c beta). It matters where the delay-bandwidth product
    exceeds the window (100 Mbit/s and 50 ms: ~1.3 MB against 1 MiB); the parameter server's chunks (4 MiB)
    and the ring's never reach it on this grid. 0 for a collective that is no heap chain (``SPEC.heap_chain``)."""
    if not collective(algorithm).heap_chain or n < 2 or nbytes <= 0:
        return 0.0
    link = model_link(cal, algorithm)
    c = min(float(chunk_bytes or 4 << 20), float(HEAP_TREE_MAX_CHUNK_BYTES), float(nbytes))
    cycle = link.alpha_s + float(cal.get("handshake_s") or 0.0) + c * link.beta
    kids = min(2, n - 1)  # the busiest link's streams per phase (the root's children in a binary heap tree)
    chunks = math.ceil(nbytes / c)
    windows = math.ceil(chunks / WINDOW)  # the first window's chunks leave at once; each later one waits a cycle
    paced = (windows - 1) * cycle + (chunks - (windows - 1) * WINDOW) * c * link.beta
    return 2 * max(0.0, paced - kids * nbytes * link.beta)


def calibrated_time(cal: dict, algorithm: str, nbytes: float, n: int, chunk_bytes: float | None = None) -> float:
    """The calibrated model's time: :func:`lowbw.net.costmodel.allreduce_time` on :func:`model_link`, plus
    gloo's handshakes (:func:`handshake_steps` x ``handshake_s``), less the bursts the shapers' buckets
    refill between steps (:func:`refilled_burst_bytes` x beta), plus the tree's window waits
    (:func:`window_wait`), the software cost of every latency step (:func:`software_steps` x
    :func:`software_step_s`) and the call's start lag once (:func:`software_start_s`), where ``cal`` has
    them."""
    link = model_link(cal, algorithm)
    t = allreduce_time(algorithm, nbytes, n, link, chunk_bytes)
    t += (handshake_steps(algorithm, n) or 0) * float(cal.get("handshake_s") or 0.0)
    t += window_wait(cal, algorithm, nbytes, n, chunk_bytes)
    t += software_steps(algorithm, n) * software_step_s(cal, algorithm) + software_start_s(cal, algorithm)
    return t - refilled_burst_bytes(cal, algorithm, nbytes, n, chunk_bytes) * link.beta
