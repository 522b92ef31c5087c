"""Alpha-beta cost model of every collective, matched to the testbed's network.

Network model (what the formulas assume, and what :mod:`lowbw.net.testbed` builds): a *star* of N workers
around a non-blocking switch (a Linux bridge), each worker with its own **full-duplex** link of bandwidth
``B`` (bits/s) in each direction: its uplink (worker -> switch) and its downlink (switch -> worker) are
shaped independently to the same rate. A message of ``m`` bytes from ``i`` to ``j`` costs
``alpha + m * beta`` with ``beta = 8 / B`` seconds per byte; a link that must carry ``k`` messages at once
serialises them (``k`` times the bytes). Hence:

* parameter server: the root's downlink receives ``(N-1) M`` (gather) and its uplink sends ``(N-1) M``
  (broadcast): ``2 alpha + 2 (N-1) M beta`` -- the talk's formula;
* ring: every link carries ``2 (N-1)/N M`` in each direction, one chunk per step:
  ``2 (N-1) alpha + 2 (N-1)/N M beta`` -- the bandwidth-optimal volume;
* tree: ``log N`` rounds up and ``log N`` down, one full vector per round and link:
  ``2 alpha log N + 2 M beta log N`` (the talk's store-and-forward form, :func:`talk_allreduce_time`; our
  tree is pipelined, so its bandwidth term is the busiest node's 2 children x 2 phases, see
  :func:`allreduce_time` -- the same for N <= 4).

Sizes are in bytes, times in seconds, ``log`` is ``ceil(log2 N)``. Formulas are exact for the message
pattern of the corresponding :mod:`lowbw.comm` algorithm on that network (latency terms count sequential
message steps on the critical path) and are what the testbed calibration (:func:`fit_alpha_beta`) checks.
Unequal links (a bandwidth and latency per worker and direction): :mod:`lowbw.net.costlinks`.

Each algorithm's terms come from its module's ``SPEC`` in :mod:`lowbw.comm.registry` (:mod:`lowbw.collective.spec`:
``Cost(steps, link_bytes, reduced)``, the talk's form, the idle starts, the pipeline fill, the broadcast and
all-gather it pairs with); this module only evaluates them. The registry is read when first needed, so
importing the cost model imports no torch.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from lowbw.comm.algorithms import BROADCAST_ALIASES
from lowbw.comm.registry import COLLECTIVES
from lowbw.net import units as _units

__all__ = [
    "LinkParams",
    "parse_rate",
    "parse_time",
    "allreduce_time",
    "talk_allreduce_time",
    "allreduce_volume",
    "allgather_time",
    "broadcast_time",
    "art_topk_time",
    "compressed_allgather_time",
    "lower_bound",
    "collective_time",
    "calls_time",
    "call_steps",
    "bucket_steps_time",
    "step_time",
    "best_algorithm",
    "crossover_nbytes",
    "ranking",
    "min_training_time",
    "broadcast_pattern",
    "gather_pattern",
]


# ----------------------------------------------------------------------------------------------- units
# the one parser of rates and delays (lowbw.net.units): text needs an explicit unit ("100mbit", "5ms")
parse_rate = _units.parse_rate
parse_time = _units.parse_delay


@dataclass(frozen=True)
class LinkParams:
    """One worker's link: per-message latency ``alpha_s`` (s) and bandwidth ``bandwidth_bps`` (bits/s, each
    direction). ``gamma_s_per_byte`` optionally charges local reduction (summing) per byte reduced; the
    talk's formulas use 0. ``burst_bytes``: what a token-bucket shaper (tc tbf, a cloud NIC's rate limit)
    lets through at line rate when a transfer starts on a link that has idled (bucket full); a transfer of
    m bytes then takes ``max(0, m - burst) b``, a plain link ``m b``. 0 for a plain link (and in the talk)."""

    alpha_s: float
    bandwidth_bps: float
    gamma_s_per_byte: float = 0.0
    burst_bytes: float = 0.0

    def __post_init__(self) -> None:
        if self.alpha_s < 0 or self.bandwidth_bps <= 0 or self.gamma_s_per_byte < 0 or self.burst_bytes < 0:
            raise ValueError(f"invalid link parameters {self}")

    @property
    def beta(self) -> float:
        """Seconds per byte."""
        return 8.0 / self.bandwidth_bps

    @classmethod
    def from_spec(cls, rate: str | float, latency: str | float | None = None) -> LinkParams:
        """``LinkParams.from_spec("100mbit", "5ms")``."""
        return cls(alpha_s=parse_time(latency), bandwidth_bps=parse_rate(rate))

    def message(self, nbytes: float) -> float:
        """Time of one point-to-point message on an idle link: ``alpha + max(0, m - burst) b``."""
        return self.alpha_s + max(0.0, nbytes - self.burst_bytes) * self.beta


def _log2(n: int) -> int:
    return max(0, math.ceil(math.log2(n))) if n > 1 else 0


def _check(nbytes: float, n: int) -> None:
    if nbytes < 0:
        raise ValueError(f"nbytes must be >= 0, got {nbytes}")
    if n < 1:
        raise ValueError(f"world_size must be >= 1, got {n}")


# ------------------------------------------------------------------------------------ all-reduce
def _allreduce_terms(algorithm: str, n: int) -> tuple[float, float, float]:
    """(latency steps A, byte multiplier B, reduced-bytes multiplier G): t = A alpha + B M beta + G M gamma.

    B is the largest number of bytes (in units of M) that one link must carry in one direction on the
    critical path; G the bytes one rank sums (in units of M).
    """
    if n == 1:
        return 0.0, 0.0, 0.0
    return _spec(algorithm, "all-reduce algorithm").cost(n)


def _collectives() -> dict:
    """The registry of all-reduce algorithms (:mod:`lowbw.comm.registry`)."""
    return COLLECTIVES


def _spec(algorithm: str, what: str):
    """``algorithm``'s :class:`lowbw.collective.spec.CollectiveSpec`; a ValueError naming the known ones if none."""
    spec = _collectives().get(algorithm)
    if spec is None:
        raise ValueError(f"unknown {what} {algorithm!r}; known: {', '.join(_collectives())}")
    return spec


def gather_pattern(algorithm: str) -> str:
    """The all-gather pattern of an all-reduce algorithm's shape (its ``SPEC.gather``); ``direct`` and
    ``ring`` name themselves; anything else gathers round a ring."""
    spec = _collectives().get(algorithm)
    return spec.gather if spec is not None else ("direct" if algorithm == "direct" else "ring")


def broadcast_pattern(algorithm: str) -> str:
    """The broadcast an all-reduce algorithm pairs with (its ``SPEC.broadcast``) or a broadcast's own name
    (aliases resolved), as timed here: ``pipeline``, ``flat``, else ``tree`` (torch's ``native`` broadcast
    is gloo's binomial tree)."""
    spec = _collectives().get(algorithm)
    how = spec.broadcast if spec is not None else algorithm
    how = BROADCAST_ALIASES.get(how, how)
    return how if how in ("pipeline", "flat") else "tree"


def _idle_starts(algorithm: str) -> int:
    """Times the busiest link starts sending on the critical path after having idled (each such start gets
    the shaper's burst free): ``ps`` and ``tree`` fill the root's downlink (reduce), then its uplink
    (broadcast); every other algorithm streams on every link from the start of the call to its end
    (``SPEC.idle_starts``; 1 for a name that is no all-reduce)."""
    spec = _collectives().get(algorithm)
    return spec.idle_starts if spec is not None else 1


def allreduce_time(algorithm: str, nbytes: float, world_size: int, link: LinkParams,
                   chunk_bytes: float | None = None) -> float:
    """Time of one all-reduce of ``nbytes`` per rank with ``algorithm`` on N = ``world_size`` workers.

    ``ps``: 2a + 2(N-1) M b; ``ring``: 2(N-1) a + 2(N-1)/N M b; ``tree`` (pipelined binary heap tree):
    2a floor(log2 N) + 2 min(2, N-1) M b (= the talk's 2a logN + 2 logN M b for N <= 4);
    ``butterfly`` (N power of two): 2a logN + 2(N-1)/N M b, else 2 more steps and 2 M b more to fold the
    extra ranks in and out; ``alltoall``: (N-1) a + (N-1) M b;
    ``roundrobin``: 2(N-1) a + 2(N-1)/N M b; ``allgather``: (N-1) a + (N-1) M b; ``native`` = ring.

    ``chunk_bytes`` (the message size of a chunked, pipelined implementation, e.g. lowbw.comm's 4 MiB) adds
    the pipeline fill where it is on the critical path: the tree's broadcast reaches the deepest leaves
    (depth - 1) chunks after the root's last send, ``(floor(log2 N) - 1) min(c, 256 KiB, M) b`` (lowbw.comm's
    heap tree caps its chunks at 256 KiB).

    A link with ``burst_bytes`` (token-bucket shaper) sends the first ``burst`` bytes of each of the
    :func:`_idle_starts` phases free (e.g. 1 MB at 1 Gbit/s under tbf's 1 ms burst: ~10% faster); the
    tree's fill chunks start on idle links too.
    """
    _check(nbytes, world_size)
    A, B, G = _allreduce_terms(algorithm, world_size)
    phases = _idle_starts(algorithm)
    link_bytes = B * nbytes  # 0 for one worker
    link_bytes -= phases * min(link.burst_bytes, link_bytes / phases)
    t = A * link.alpha_s + link_bytes * link.beta + G * nbytes * link.gamma_s_per_byte
    fill = _spec(algorithm, "all-reduce algorithm").fill if world_size > 1 else None
    if chunk_bytes and fill is not None:
        count, c = fill(world_size, nbytes, chunk_bytes)
        t += count * max(0.0, c - link.burst_bytes) * link.beta
    return t


def talk_allreduce_time(algorithm: str, nbytes: float, world_size: int, link: LinkParams) -> float:
    """The talk's textbook formulas (store-and-forward, no pipelining), for reference and the paper:
    ``ps`` 2a + 2(N-1) M b; ``ring`` 2(N-1) a + 2(N-1)/N M b; ``tree`` 2a logN + 2 logN M b;
    ``butterfly`` 2a logN + 2(N-1)/N M b (logN = ceil(log2 N))."""
    _check(nbytes, world_size)
    A, B = _talk_terms(algorithm, world_size)
    return A * link.alpha_s + B * nbytes * link.beta


def _talk_terms(algorithm: str, n: int) -> tuple[float, float]:
    """(latency steps, byte multiplier) of the talk's formula: ``SPEC.talk``."""
    if n == 1:
        return 0.0, 0.0
    spec = _collectives().get(algorithm)
    if spec is None or spec.talk is None:
        given = sorted(a for a, sp in _collectives().items() if sp.talk is not None)
        raise ValueError(f"the talk gives formulas for {given}, not {algorithm!r}")
    return spec.talk(n)


def allreduce_volume(algorithm: str, nbytes: float, world_size: int) -> float:
    """Bytes the busiest link carries in one direction (what the byte meter should count at the root)."""
    _check(nbytes, world_size)
    return _allreduce_terms(algorithm, world_size)[1] * nbytes


def lower_bound(nbytes: float, world_size: int, link: LinkParams | None = None) -> float:
    """Bandwidth-optimal all-reduce lower bound ``2 (N-1)/N M beta`` (seconds; bytes if ``link`` is None).

    Every rank must send and receive at least (N-1)/N of the vector twice (once to contribute, once to
    learn the result) through its own link (Patarasuk & Yuan 2009).
    """
    _check(nbytes, world_size)
    v = 2.0 * (world_size - 1) / world_size * nbytes
    return v if link is None else v * link.beta


# ----------------------------------------------------------------------- all-gather / broadcast
def allgather_time(sizes: float | Sequence[float], world_size: int | None, link: LinkParams,
                   algorithm: str = "ring") -> float:
    """All-gather: ``sizes`` is each rank's contribution (bytes; a number = equal contributions).

    ``ring``: N-1 steps, every rank receives everybody else's bytes through its downlink:
    (N-1) a + max_i sum_{j != i} m_j b. ``direct`` (everyone sends to everyone at once): a + same bytes.
    """
    if isinstance(sizes, int | float):
        if world_size is None:
            raise ValueError("world_size is needed with a scalar size")
        sizes = [float(sizes)] * world_size
    sizes = [float(s) for s in sizes]
    n = len(sizes)
    if world_size is not None and world_size != n:
        raise ValueError(f"{n} sizes for world_size {world_size}")
    if n <= 1:
        return 0.0
    total = sum(sizes)
    recv = max(total - s for s in sizes)
    send = max(sizes) * (n - 1) if algorithm == "direct" else recv  # ring: every rank forwards N-1 chunks
    steps = {"ring": n - 1, "direct": 1}.get(algorithm)
    if steps is None:
        raise ValueError(f"unknown all-gather algorithm {algorithm!r} (ring | direct)")
    return steps * link.alpha_s + max(recv, send) * link.beta


def broadcast_time(nbytes: float, world_size: int, link: LinkParams, algorithm: str = "tree") -> float:
    """Broadcast of ``nbytes`` from one root: ``tree`` (binomial) logN (a + M b); ``flat`` (root sends N-1
    copies) a + (N-1) M b; ``pipeline`` (chunked chain, bandwidth-optimal) (N-1) a + M b."""
    _check(nbytes, world_size)
    n = world_size
    if n == 1:
        return 0.0
    if algorithm == "tree":
        return _log2(n) * (link.alpha_s + nbytes * link.beta)
    if algorithm == "flat":
        return link.alpha_s + (n - 1) * nbytes * link.beta
    if algorithm == "pipeline":
        return (n - 1) * link.alpha_s + nbytes * link.beta
    raise ValueError(f"unknown broadcast algorithm {algorithm!r} (tree | flat | pipeline)")


# ---------------------------------------------------------------------- compressed aggregation
def art_topk_time(nbytes: float, density: float, world_size: int, link: LinkParams, base: str = "ring") -> float:
    """AR-Top-k: one rank broadcasts its top-k indices (tree), then the values at those indices are
    all-reduced with ``base`` (``ring`` | ``tree``). ``nbytes`` is the dense size M, ``density`` c = k/numel,
    indices are as large as values (the talk's assumption).

    ART-ring = a [2(N-1) + logN] + M c b [2(N-1)/N + logN];  ART-tree = 3 a logN + 3 M c b logN.
    """
    _check(nbytes, world_size)
    if not 0 <= density <= 1:
        raise ValueError(f"density must be in [0, 1], got {density}")
    if base not in ("ring", "tree"):
        raise ValueError(f"AR-Top-k base must be ring or tree, got {base!r}")
    mc = nbytes * density
    return broadcast_time(mc, world_size, link, "tree") + allreduce_time(base, mc, world_size, link)


def compressed_allgather_time(payload_bytes: float | Sequence[float], world_size: int, link: LinkParams) -> float:
    """Aggregation of non-summable payloads: all-gather every rank's compressed payload (then decompress
    and sum locally): (N-1) a + (N-1) M c b for equal payloads of M c bytes."""
    return allgather_time(payload_bytes, world_size, link, "ring")


# -------------------------------------------------------------------------------- dispatcher
def collective_time(op: str, algorithm: str, nbytes: float, world_size: int, link: LinkParams,
                    **kw: Any) -> float:
    """Time of one collective ``op`` (``all_reduce`` | ``all_gather`` | ``broadcast`` | ``art_topk``).

    For all_gather ``nbytes`` is one rank's contribution (equal contributions) unless ``sizes=`` is given;
    it includes the exchange of the sizes that precedes lowbw.comm's all_gather (``exchange_sizes=False``:
    the bare all-gather). broadcast/all_gather take their own algorithm names and map all-reduce names to
    the matching pattern.
    """
    op = op.replace("-", "_").lower()
    if op in ("all_reduce", "allreduce"):
        return allreduce_time(algorithm, nbytes, world_size, link)
    if op in ("all_gather", "allgather"):
        sizes = kw.get("sizes", nbytes)
        how = gather_pattern(algorithm)
        # lowbw.comm's all_gather takes tensors of any size: it first all-gathers their sizes (one more pass
        # of the same pattern with 8-byte headers, i.e. latency only)
        header = allgather_time(0.0, world_size, link, how) if kw.get("exchange_sizes", True) else 0.0
        return header + allgather_time(sizes, world_size, link, how)
    if op == "broadcast":
        return broadcast_time(nbytes, world_size, link, broadcast_pattern(algorithm))
    if op in ("art_topk", "ar_topk"):
        return art_topk_time(nbytes, kw["density"], world_size, link, base=algorithm)
    raise ValueError(f"unknown collective op {op!r}")


def call_steps(op: str, algorithm: str, nbytes: float, world_size: int, sizes: Sequence[float] | None = None,
               exchange_sizes: bool = True) -> list[tuple[float, str]]:
    """One collective call as its sequence of message steps on the critical path, for the token bucket of
    :func:`bucket_steps_time`: ``(bytes, direction)`` per latency term of :func:`collective_time`, in order.

    The bytes of a step are the call's critical-path bytes (:func:`collective_time` on a beta-only link)
    spread evenly over its data steps; ``direction`` names the shaper they leave by: ``"both"`` where every
    link carries them in both directions at once (ring, butterfly, all-gather, broadcast: by symmetry one
    bucket state serves both), ``"down"`` then ``"up"`` for the two phases of ``ps`` and ``tree`` (the root's
    downlink fills in the reduce, its uplink in the broadcast: two buckets). lowbw.comm's all_gather first
    exchanges the sizes (N-1 latency-only steps; none with ``exchange_sizes=False``: sizes known beforehand),
    then the payload (N-1 steps)."""
    n = world_size
    opn = op.replace("-", "_").lower()
    kw: dict[str, Any] = {"sizes": list(sizes)} if sizes is not None else {}
    if opn in ("all_gather", "allgather"):
        kw["exchange_sizes"] = exchange_sizes
    terms = collective_time(opn, algorithm, nbytes, n, LinkParams(1.0, 1e300), **kw)
    nbytes_cp = collective_time(opn, algorithm, nbytes, n, LinkParams(0.0, 8.0), **kw)
    a = int(round(terms))
    if a <= 0:
        return []
    if opn in ("all_gather", "allgather"):
        header = int(round(collective_time(opn, algorithm, 0.0, n, LinkParams(1.0, 1e300), sizes=[0.0] * n)))
        header = min(header // 2, a - 1) if exchange_sizes else 0  # the sizes pass: as many steps as the payload's
        data = a - header
        return [(0.0, "both")] * header + [(nbytes_cp / data, "both")] * data
    if opn in ("all_reduce", "allreduce") and _idle_starts(algorithm) == 2 and a >= 2:
        half = a // 2
        return ([(nbytes_cp / 2 / half, "down")] * half
                + [(nbytes_cp / 2 / (a - half), "up")] * (a - half))
    return [(nbytes_cp / a, "both")] * a


def bucket_steps_time(steps: Iterable[tuple[float, str]], alpha_s: float, beta_s_per_byte: float,
                      bucket_bytes: float) -> float:
    """Time of a sequence of message steps (:func:`call_steps`, the calls of one exchange concatenated) on a
    link shaped by a token bucket of ``bucket_bytes`` (tc tbf's burst, in payload bytes) per direction.

    The exchange starts after the step's compute, on links that idled: every bucket is full (b). Before each
    message the link idles for its ``alpha`` (latency and the software's per-message cost) and its bucket
    refills at the line rate, ``1 / beta`` bytes per second, up to b; the message's first bytes then spend
    the tokens (leave at line rate, free), the rest is paced at the rate. With tokens T_k before message k of
    m_k bytes on direction d:

        T_d <- min(b, T_d + alpha / beta)    (the first message: T_d = b, already full)
        t_k  = alpha + max(0, m_k - T_d) beta,   T_d <- T_d - min(T_d, m_k)

    and the exchange takes sum_k t_k. Back-to-back calls share the buckets (each call is not given a full
    one); a ``"both"`` step draws from both directions (they carry the same bytes). ``bucket_bytes`` = 0 is
    the plain link: sum_k (alpha + m_k beta)."""
    if bucket_bytes < 0 or alpha_s < 0 or beta_s_per_byte <= 0:
        raise ValueError(f"bad bucket arguments: bucket {bucket_bytes}, alpha {alpha_s}, beta {beta_s_per_byte}")
    b = float(bucket_bytes)
    refill = alpha_s / beta_s_per_byte
    tokens = {"up": b, "down": b}
    t = 0.0
    for m, d in steps:
        dirs = ("up", "down") if d == "both" else (d,)
        for x in dirs:
            tokens[x] = min(b, tokens[x] + refill)
        avail = min(tokens[x] for x in dirs)
        free = min(avail, m)
        for x in dirs:
            tokens[x] -= free
        t += alpha_s + (m - free) * beta_s_per_byte
    return t


def calls_time(calls: Iterable[Any], link: LinkParams, bucket_bytes: float = 0.0) -> float:
    """Total modelled time of a sequence of ``lowbw.compress.protocol.CallRecord`` (one rank's calls, in
    order; the sim backend's virtual clock). A list of per-rank call lists (same length, zipped) is also
    accepted: then all_gather uses every rank's own contribution (variable sizes).

    ``bucket_bytes`` > 0: the calls are one exchange on links shaped by a token bucket of that many payload
    bytes (:func:`bucket_steps_time`: full at the start, shared by the calls, refilled during each message's
    alpha), not the plain link; ``link`` must then have no ``burst_bytes`` of its own (a per-call
    burst) and its ``gamma`` is added per call as without a bucket."""
    calls = list(calls)
    if bucket_bytes > 0:
        return _bucket_calls_time(calls, link, bucket_bytes)
    if calls and isinstance(calls[0], list | tuple) and not hasattr(calls[0], "op"):
        per_rank = calls
        total = 0.0
        for recs in zip(*per_rank):
            r = recs[0]
            if r.op.replace("-", "_") in ("all_gather", "allgather"):
                total += collective_time(r.op, r.algorithm, r.nbytes, r.world_size, link,
                                         sizes=[c.nbytes for c in recs], exchange_sizes=_exchanges_sizes(r))
            else:
                total += collective_time(r.op, r.algorithm, max(c.nbytes for c in recs), r.world_size, link)
        return total
    return sum(collective_time(c.op, c.algorithm, c.nbytes, c.world_size, link, exchange_sizes=_exchanges_sizes(c))
               for c in calls)


def _exchanges_sizes(call: Any) -> bool:
    """Whether an all-gather call exchanged its sizes first (a CallRecord's ``sizes_known`` says not)."""
    return not getattr(call, "sizes_known", False)


def _bucket_calls_time(calls: list, link: LinkParams, bucket_bytes: float) -> float:
    if link.burst_bytes:
        raise ValueError("calls_time: give a token bucket (bucket_bytes) or a per-call burst (link.burst_bytes), "
                         "not both")
    per_rank = calls and isinstance(calls[0], list | tuple) and not hasattr(calls[0], "op")
    rows = zip(*calls) if per_rank else ((c,) for c in calls)
    steps: list[tuple[float, str]] = []
    gamma = 0.0
    g_link = LinkParams(0.0, 1e300, link.gamma_s_per_byte) if link.gamma_s_per_byte else None
    for recs in rows:
        r = recs[0]
        gathered = r.op.replace("-", "_") in ("all_gather", "allgather")
        nb = r.nbytes if gathered else max(c.nbytes for c in recs)
        sizes = [c.nbytes for c in recs] if (gathered and per_rank) else None
        steps += call_steps(r.op, r.algorithm, nb, r.world_size, sizes, _exchanges_sizes(r))
        if g_link is not None:
            kw: dict[str, Any] = {"sizes": sizes} if sizes is not None else {}
            if gathered:
                kw["exchange_sizes"] = _exchanges_sizes(r)
            gamma += collective_time(r.op, r.algorithm, nb, r.world_size, g_link, **kw)
    return gamma + bucket_steps_time(steps, link.alpha_s, link.beta, bucket_bytes)


# ----------------------------------------------------------------------------------- step time
def step_time(compute_s: float, comm_s: float, compress_s: float = 0.0, overlap: bool = False) -> float:
    """One training step. Without overlap: compute + compress + communicate. With (perfect, wait-free
    backprop) overlap communication hides behind compute: max(compute, compress + communicate) -- the
    compression itself sits on the critical path of the bucket it compresses, so it is not hidden."""
    if min(compute_s, comm_s, compress_s) < 0:
        raise ValueError("times must be >= 0")
    if overlap:
        return max(compute_s, compress_s + comm_s)
    return compute_s + compress_s + comm_s


def min_training_time(steps: int, compute_s: float, nbytes: float, world_size: int, link: LinkParams) -> dict:
    """The theoretical minimum wall time of ``steps`` data-parallel steps of a model whose gradient has
    ``nbytes``: compute-bound ``steps * compute`` and, with communication fully overlapped at the
    bandwidth-optimal bound, ``steps * max(compute, 2(N-1)/N M b)``; also which one binds."""
    comm = lower_bound(nbytes, world_size, link)
    per_step = max(compute_s, comm)
    return {"compute_bound_s": steps * compute_s, "comm_bound_s": steps * comm, "min_s": steps * per_step,
            "bound": "compute" if compute_s >= comm else "communication"}


# ----------------------------------------------------------------------------------- crossovers
def ranking(nbytes: float, world_size: int, link: LinkParams, algorithms: Iterable[str] | None = None
            ) -> list[tuple[str, float]]:
    """Algorithms (default: every registered one but ``native``, which is the ring) sorted by modelled
    all-reduce time (fastest first; ties in the registry's order)."""
    if algorithms is None:
        algorithms = [a for a, spec in _collectives().items() if spec.run is not None]
    return sorted(((a, allreduce_time(a, nbytes, world_size, link)) for a in algorithms), key=lambda x: x[1])


def best_algorithm(nbytes: float, world_size: int, link: LinkParams, algorithms: Iterable[str] | None = None) -> str:
    """The all-reduce algorithm the model predicts fastest."""
    return ranking(nbytes, world_size, link, *(() if algorithms is None else (algorithms,)))[0][0]


def crossover_nbytes(alg1: str, alg2: str, world_size: int, link: LinkParams, talk: bool = False) -> float | None:
    """Message size M* at which ``alg1`` and ``alg2`` take equal time (alpha-beta times are linear in M:
    t = A a + B M b, so M* = (A2 - A1) a / ((B1 - B2) b)). Below M* the one with fewer latency steps wins,
    above it the one moving fewer bytes. None if they never cross for M > 0 (one dominates).
    ``talk=True`` uses the talk's formulas (e.g. ring vs tree: M* = (a/b) (N-1-logN) / (logN - (N-1)/N))."""
    terms = _talk_terms if talk else (lambda a, n: _allreduce_terms(a, n)[:2])
    A1, B1 = terms(alg1, world_size)
    A2, B2 = terms(alg2, world_size)
    if B1 == B2:
        return None
    m = (A2 - A1) * link.alpha_s / ((B1 - B2) * link.beta)
    return m if m > 0 else None
