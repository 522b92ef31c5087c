"""Adaptive compression under fluctuating bandwidth: choose the top-k density and the collective per step.

Follows Tyagi & Swany (IEEE BigData 2023, "Flexible Communication for Optimal Distributed Learning over
Unpredictable Networks"): candidate densities c in a geometric grid between ``c_low`` and ``c_high``
(scaling factor 3: 0.1, 0.033, 0.011, 0.0037, 0.001); for each, the aggregation collective is the cheapest
of AR-Top-k over ring, AR-Top-k over tree, and all-gather of (values, indices) under the alpha-beta model;
the density is chosen as the optimum of the two objectives (step time, 1 / compression gain), where
gain = ||C(g_e)||^2 / ||g_e||^2 is measured during training. We scalarise them as the time per unit of
gradient energy delivered, (t_compute + t_compress(c) + t_comm(c)) / gain(c): a step that carries a fraction
gain of the gradient's energy makes about that fraction of a dense step's progress. A new choice is made when the
link's bandwidth or latency (on per-worker links: any worker's), or the gain, moves by more than ``trigger``
(10%) since the last choice.

The three collectives are timed on the records each would make (:func:`option_calls`: per tensor, all-gather of
int32 indices and fp32 values; or the leader's count and indices broadcast, then the values all-reduced) with
the virtual clock's own cost model at the link it passes: a plain or token-bucket link
(:func:`lowbw.net.costmodel.calls_time`) or, for per-worker links (a link with ``workers``, as
:func:`lowbw.train.links.link_for` gives on unequal links), every worker's own uplink and downlink
(:func:`lowbw.net.costlinks.calls_time`: a ring's slowest hop, a pipeline's slowest hop), not the slowest
link for all. :class:`ChosenTopK` then aggregates with the collective chosen (Tyagi & Swany switch it too).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

from lowbw.comm.algorithms import BROADCAST_FOR
from lowbw.compress.artopk import ARTopK
from lowbw.compress.base import ErrorFeedback, State
from lowbw.compress.protocol import CallRecord
from lowbw.compress.sparsify import TopK, topk_count
from lowbw.data.specs import SPECS
from lowbw.net.costmodel import LinkParams
from lowbw.train.links import comm_cost, link_for
from lowbw.train.models import build_model

__all__ = ["COLLECTIVES", "candidate_densities", "option_calls", "option_time", "collective_for", "Choice",
           "AdaptiveTopK", "ChosenTopK", "model_numels", "run_collective"]

#: the aggregation collectives of top-k the policy chooses from
COLLECTIVES = ("allgather", "artopk-ring", "artopk-tree")


def candidate_densities(c_low: float = 0.001, c_high: float = 0.1, factor: float = 3.0) -> list[float]:
    """``c_high, c_high/factor, ...`` down to ``c_low`` (inclusive), e.g. [0.1, 0.0333, 0.0111, 0.0037, 0.001]."""
    if not 0 < c_low <= c_high <= 1:
        raise ValueError(f"need 0 < c_low <= c_high <= 1, got c_low={c_low}, c_high={c_high}")
    if factor <= 1:
        raise ValueError(f"factor must be > 1, got {factor}")
    steps = int(math.floor(math.log(c_high / c_low) / math.log(factor) + 1e-9))
    if steps == 0:
        return [c_high]
    return [c_high / factor**i for i in range(steps)] + [c_low]  # the last step is clamped to c_low


def option_calls(numels: Sequence[int], density: float, world_size: int, option: str) -> list[CallRecord]:
    """The collective calls one rank makes to aggregate top-k at ``density`` of tensors of ``numels`` entries
    with ``option`` (one of :data:`COLLECTIVES`), as :class:`ChosenTopK` makes them: per tensor of n entries,
    k = ceil(density n); ``allgather``: two ring all-gathers (int32 indices, fp32 values: 4k bytes each);
    ``artopk-<base>``: the leader's count (8 bytes) and indices (4k bytes) broadcast the way ``base``
    broadcasts, then the values (4k bytes) all-reduced with ``base``."""
    if option not in COLLECTIVES:
        raise ValueError(f"option={option!r}: expected one of {', '.join(COLLECTIVES)}")
    out = []
    for n in numels:
        k = topk_count(density, int(n))
        if option == "allgather":
            out += [CallRecord("all_gather", 4 * k, "ring", world_size)] * 2
        else:
            base = option.removeprefix("artopk-")
            how = BROADCAST_FOR[base]
            out += [CallRecord("broadcast", 8, how, world_size), CallRecord("broadcast", 4 * k, how, world_size),
                    CallRecord("all_reduce", 4 * k, base, world_size)]
    return out


def option_time(numels: Sequence[int], density: float, world_size: int, link: LinkParams, option: str) -> float:
    """Modelled seconds of :func:`option_calls` at ``link``, exactly as the virtual clock times an exchange
    (:func:`lowbw.train.links.comm_cost`): on every worker's own link where ``link`` carries them
    (``link.workers``, one per rank), as one exchange on the shapers' token bucket where it has one
    (``link.bucket_bytes``), else on the plain link."""
    workers = tuple(getattr(link, "workers", ()) or ())
    if workers and len(workers) != world_size:
        raise ValueError(f"{len(workers)} per-worker links for {world_size} workers")
    calls = option_calls(numels, density, world_size, option)
    return comm_cost({0: [list(calls) for _ in range(world_size)]}, link)["v_comm"]


def collective_for(nbytes: float, density: float, world_size: int, link: LinkParams,
                   numels: Sequence[int] | None = None) -> tuple[str, float]:
    """The cheapest way to aggregate top-k of a dense fp32 gradient of ``nbytes`` (as tensors of ``numels``
    entries; default one tensor) at ``density``: one of :data:`COLLECTIVES` and its time (s) by
    :func:`option_time` (per-worker links where ``link`` has them)."""
    numels = list(numels) if numels else [max(1, int(nbytes // 4))]
    options = {o: option_time(numels, density, world_size, link, o) for o in COLLECTIVES}
    name = min(options, key=lambda k: (options[k], k))
    return name, options[name]


def _link_moved(new: LinkParams, old: LinkParams, trigger: float) -> bool:
    """Whether a link moved by more than ``trigger`` (relative) in bandwidth or latency; on per-worker links
    (``workers``) whether any worker's uplink or downlink did."""
    def moved(a: float, b: float, floor: float = 0.0) -> bool:
        return abs(a - b) > trigger * max(b, floor)

    if moved(new.bandwidth_bps, old.bandwidth_bps) or moved(new.alpha_s, old.alpha_s, 1e-6):
        return True
    nw, ow = tuple(getattr(new, "workers", ()) or ()), tuple(getattr(old, "workers", ()) or ())
    if len(nw) != len(ow):
        return True
    return any(moved(a.up_bps, b.up_bps) or moved(a.down_bps, b.down_bps) or moved(a.up_alpha_s, b.up_alpha_s, 1e-6)
               or moved(a.down_alpha_s, b.down_alpha_s, 1e-6) for a, b in zip(nw, ow))


def model_numels(model: str, dataset: str) -> list[int]:
    """Entries of every trainable tensor of ``model`` on ``dataset`` (what a run aggregates tensor by tensor),
    counted on the meta device."""
    if dataset not in SPECS:
        raise ValueError(f"dataset={dataset!r}: no shape known (known: {', '.join(sorted(SPECS))})")
    spec = SPECS[dataset]
    h, _, c = spec.image_shape
    m = build_model(model, spec.num_classes, c, h, device="meta")
    return [p.numel() for p in m.parameters() if p.requires_grad]


def run_collective(cfg, t_virtual: float = 0.0, density: float | None = None) -> tuple[str, float]:
    """The collective (and its modelled seconds) the policy of run config ``cfg`` (a RunConfig) chooses at
    virtual time ``t_virtual`` for ``density`` (default: its configured ratio): its model's tensors on the
    world link the run's virtual clock has then (:func:`lowbw.train.links.link_for`: per-worker links, a
    trace's rates at that time)."""
    c = float(density if density is not None else cfg.compressor_args.get("ratio", 0.01))
    numels = model_numels(cfg.model, cfg.dataset)
    return collective_for(4.0 * sum(numels), c, cfg.workers, link_for(cfg, "world", t_virtual), numels)


@dataclass(frozen=True)
class Choice:
    density: float
    collective: str
    t_comm_s: float
    t_compress_s: float
    gain: float
    score: float


@dataclass
class AdaptiveTopK:
    """Multi-objective choice of the top-k density c.

    Objective per candidate: F(c) = (t_compute + t_compress(c) + t_comm(c)) / gain(c), seconds per unit of
    gradient energy delivered (lower is better). Candidates whose gain is not yet measured are explored
    first (one step each).
    """

    nbytes: float
    world_size: int
    densities: list[float] = field(default_factory=candidate_densities)
    numels: list[int] | None = None  # the aggregated tensors' sizes (entries); None: one tensor of nbytes
    t_compute_s: float = 0.0
    trigger: float = 0.10
    gains: dict[float, float] = field(default_factory=dict)
    t_compress: dict[float, float] = field(default_factory=dict)
    _last_link: LinkParams | None = None
    _last_gain: float | None = None
    current: Choice | None = None

    def observe(self, density: float, gain: float, t_compress_s: float) -> None:
        """Record the measured compression gain in [0, 1] and (de)compression time (s) at ``density``."""
        if not 0 <= gain <= 1 + 1e-6:
            raise ValueError(f"gain must be in [0, 1], got {gain}")
        self.gains[density] = gain
        self.t_compress[density] = t_compress_s

    def _changed(self, link: LinkParams) -> bool:
        if self.current is None or self._last_link is None:
            return True
        if _link_moved(link, self._last_link, self.trigger):
            return True
        g = self.gains.get(self.current.density)
        if g is None or self._last_gain is None:
            return False
        return abs(g - self._last_gain) > self.trigger * self._last_gain

    def choose(self, link: LinkParams) -> Choice:
        """The density/collective to use now (re-evaluated only on a >trigger change of link or gain)."""
        unexplored = [c for c in self.densities if c not in self.gains]
        if unexplored:
            c = unexplored[0]
            name, t = collective_for(self.nbytes, c, self.world_size, link, self.numels)
            return Choice(c, name, t, 0.0, float("nan"), float("nan"))
        if not self._changed(link):
            assert self.current is not None
            return self.current
        rows = []
        for c in self.densities:
            name, t = collective_for(self.nbytes, c, self.world_size, link, self.numels)
            rows.append((c, name, t, self.t_compress[c], max(self.gains[c], 1e-12)))
        scored = [Choice(c, name, t, tc, g, (self.t_compute_s + tc + t) / g) for c, name, t, tc, g in rows]
        self.current = min(scored, key=lambda ch: (ch.score, -ch.density))
        self._last_link = link
        self._last_gain = self.current.gain
        return self.current

    @staticmethod
    def gain_of(kept_sq_norm: float, total_sq_norm: float) -> float:
        """Compression gain ||C(g_e)||^2 / ||g_e||^2 (1 for an all-zero gradient)."""
        return 1.0 if total_sq_norm <= 0 or not math.isfinite(total_sq_norm) else min(1.0, kept_sq_norm / total_sq_norm)


@contextmanager
def _all_reduce_with(coll, algorithm: str):
    """``coll``'s all-reduce (and broadcast) algorithm set to ``algorithm`` in the body: the innermost
    collective's ``algorithm`` (through wrappers' ``inner``; lowbw.comm's collectives read it at each call)."""
    inner = coll
    while not hasattr(inner, "algorithm") and hasattr(inner, "inner"):
        inner = inner.inner
    if not hasattr(inner, "algorithm"):
        raise TypeError(f"{type(coll).__name__} has no all-reduce algorithm to choose")
    old = inner.algorithm
    inner.algorithm = algorithm
    try:
        yield
    finally:
        inner.algorithm = old


class ChosenTopK:
    """Top-k (``ratio``, error feedback) aggregated by the collective :attr:`collective` names (one of
    :data:`COLLECTIVES`, set per step by the adaptive policy): ``allgather`` is ``topk`` (every rank's own
    indices and values all-gathered; :class:`lowbw.compress.sparsify.TopK`, in
    :class:`~lowbw.compress.base.ErrorFeedback` when on), ``artopk-ring``/``artopk-tree`` are ``artopk``
    (:class:`lowbw.compress.artopk.ARTopK`: a leader's indices, the values all-reduced) over that all-reduce.
    Both keep the residual of what a rank did not send; it moves between their state keys when the
    collective changes, so error feedback carries across switches. ``ratio`` sets both densities."""

    name = "topk"
    summable = False
    batched = False
    has_own_memory = True

    def __init__(self, ratio: float = 0.01, error_feedback: bool = True, mode: str = "star",
                 collective: str = "allgather"):
        topk = TopK(ratio)
        self.gather = ErrorFeedback(topk) if error_feedback else topk
        self.reduce = ARTopK(ratio, mode, error_feedback)
        self._topk = topk
        self.error_feedback = bool(error_feedback)
        self.collective = collective
        self._default = State()

    @classmethod
    def like(cls, comp) -> ChosenTopK:
        """The one of a configured ``topk`` (plain or in error feedback) or ``artopk`` compressor: its ratio,
        error feedback and (artopk) leader mode; it starts with that compressor's own collective."""
        inner = getattr(comp, "inner", comp)
        if isinstance(inner, ARTopK):
            return cls(inner.ratio, inner.error_feedback, inner.mode, "artopk-ring")
        if isinstance(inner, TopK):
            return cls(inner.ratio, isinstance(comp, ErrorFeedback))
        raise TypeError(f"ChosenTopK: needs a topk or artopk compressor, got {comp!r}")

    def __repr__(self) -> str:
        return f"ChosenTopK(ratio={self.ratio}, error_feedback={self.error_feedback}, collective={self.collective!r})"

    @property
    def ratio(self) -> float:
        return self.reduce.ratio

    @ratio.setter
    def ratio(self, value: float) -> None:
        if not 0 < value <= 1:
            raise ValueError(f"ratio must be in (0, 1], got {value}")
        self.reduce.ratio = self._topk.ratio = float(value)

    def compress(self, tensor, name: str = "", state: State | None = None):
        """The one-worker view: top-k with error feedback (the all-gather's payload)."""
        return self.gather.compress(tensor, name, state if state is not None else self._default)

    def decompress(self, payload):
        return self.gather.decompress(payload)

    def aggregate(self, tensor, coll, name: str = "", state: State | None = None):
        """The group's average of top-k of ``tensor`` (plus the residual) by :attr:`collective`."""
        if self.collective not in COLLECTIVES:
            raise ValueError(f"collective={self.collective!r}: expected one of {', '.join(COLLECTIVES)}")
        state = state if state is not None else self._default
        slot = state[name]
        if self.collective == "allgather":
            if "artopk.residual" in slot:
                slot["ef.residual"] = slot.pop("artopk.residual")
            return self.gather.aggregate(tensor, coll, name, state)
        if "ef.residual" in slot:
            slot["artopk.residual"] = slot.pop("ef.residual")
        with _all_reduce_with(coll, self.collective.removeprefix("artopk-")):
            return self.reduce.aggregate(tensor, coll, name, state)
