"""Streaming DiLoCo's pieces for the engine: fragments of the flat parameter row, exchanges in flight, and
the virtual clock of an exchange that overlaps compute.

Fragments (``diloco_fragments`` = F), two layouts (``diloco_fragment_layout``):

- ``contiguous`` (lowbw's first schedule): the flat row is cut into F contiguous ranges of near-equal size at
  row boundaries of the parameter tensors (:func:`lowbw.comm.diloco.split_rows`; a large tensor may be split
  between fragments);
- ``strided`` (the paper's, Douillard et al. 2025 sec. 2.2: fragments of whole layers in a strided pattern):
  the model's layers L_0, L_1, ... (:func:`layers`: a repeated block such as ``blocks.3`` is one layer, else
  each module) go to fragment j mod F, whole; a fragment is then not contiguous in the flat row and is
  gathered and scattered by its element index.

Either way fragment f has its outer step after the inner steps t with t % H == ((f + 1) H / F) % H
(:func:`lowbw.comm.diloco.sync_offsets`).

Overlap (``diloco_delay`` = tau): fragment f's exchange starts after its sync step t (Delta_f taken then)
and its outer update lands after step t + tau. The link is modelled as one channel busy in the background:
an exchange of modelled time v_comm that starts at virtual time T_s (the end of step t) occupies the link
from b = max(T_s, F_prev), F_prev the end of the exchange before it on the link, to e = b + v_comm. At the
step where it lands, after that step's own time (compute + (de)compression + its foreground communication)
the clock reads T_r; the step then waits

    w = max(0, e - T_r),    i.e. with a free link   w = max(0, v_comm - sum_{s=t+1}^{t+tau} dt_s),

dt_s = the whole virtual time of step s (compute + (de)compression + foreground communication), and
T <- T_r + w; w is the exposed communication (``t_virtual_comm``). The exchange's alpha-beta coefficients
are counted with weight w / v_comm, so that ``t_virtual_comm = alpha-terms x alpha + beta-bytes x 8 / bw``
holds at the run's own link (re-timing an overlapped run at another link is therefore approximate).
"""

from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass, field, fields
from typing import Any

import torch

from lowbw.comm.diloco import layer_runs, split_rows, sync_offsets
from lowbw.train.world import Exchange, messages_of

__all__ = ["FragmentPlan", "layers", "InFlight", "Background", "landing_wait", "exchange_to_dict", "exchange_from_dict"]


def layers(layout) -> list[list[int]]:
    """The model's layers as lists of tensor indices of ``layout`` (name, offset, numel, shape), in order: a
    tensor's layer is its name up to the first numeric component (``blocks.3.attn.c_attn.weight`` ->
    ``blocks.3``: a repeated block), else its module (``fc1.weight`` -> ``fc1``); consecutive tensors of one
    layer are one layer. The rule is :func:`lowbw.comm.diloco.layer_runs`, which the wrapper shares."""
    return layer_runs([name for name, _, _, _ in layout])


@dataclass
class FragmentPlan:
    """``ranges[f]`` = (lo, hi) of fragment f in the flat row (strided: its first and last element's span);
    ``chunks[f]`` its aggregation chunks (name, offset in the fragment's own row, numel, shape), as
    :meth:`lowbw.train.replicas.Replicas.chunks`; ``offsets[f]`` its sync step modulo H; ``index[f]``: None
    for a contiguous fragment, else the positions of its elements in the flat row (int64, in order)."""

    ranges: list[tuple[int, int]]
    chunks: list[list[tuple[str, int, int, torch.Size]]]
    offsets: list[int]
    index: list[torch.Tensor | None] = field(default_factory=list)

    def size(self, f: int) -> int:
        """Elements of fragment f."""
        lo, hi = self.ranges[f]
        return hi - lo if not self.index or self.index[f] is None else int(self.index[f].numel())

    def take(self, rows: torch.Tensor, f: int) -> torch.Tensor:
        """Fragment f of every row of ``rows`` ``[R, P]``: a view (contiguous) or a gathered copy (strided)."""
        if not self.index or self.index[f] is None:
            lo, hi = self.ranges[f]
            return rows[:, lo:hi]
        return rows[:, self.index[f].to(rows.device)]

    def put(self, rows: torch.Tensor, f: int, values: torch.Tensor) -> None:
        """rows[:, fragment f] <- ``values`` ``[R, size(f)]`` (a no-op for a view :meth:`take` returned)."""
        if not self.index or self.index[f] is None:
            lo, hi = self.ranges[f]
            if values.data_ptr() != rows[:, lo:hi].data_ptr():
                rows[:, lo:hi].copy_(values)
            return
        rows[:, self.index[f].to(rows.device)] = values

    @classmethod
    def make(cls, layout, count: int, period: int, flat: bool, kind: str = "contiguous") -> FragmentPlan:
        """The plan for parameter ``layout`` (name, offset, numel, shape per tensor, in row order);
        ``flat``: one chunk per fragment (``granularity: flat``), else one per tensor piece; ``kind``:
        ``contiguous`` or ``strided`` (the module docstring)."""
        if kind == "strided":
            return cls._strided(layout, count, period, flat)
        if kind != "contiguous":
            raise ValueError(f"fragment layout {kind!r} is unknown (contiguous, strided)")
        pieces = split_rows([tuple(s) for _, _, _, s in layout], count)
        ranges, chunks = [], []
        for f, frag in enumerate(pieces):
            cs = []
            for i, r0, r1 in frag:
                name, off, k, shape = layout[i]
                unit = k // shape[0] if len(shape) and shape[0] else k
                whole = len(shape) == 0 or (r0 == 0 and r1 == shape[0])
                cs.append((name if whole else f"{name}[{r0}:{r1}]", off + r0 * unit, (r1 - r0) * unit,
                           shape if whole else torch.Size([r1 - r0, *shape[1:]])))
            lo, hi = cs[0][1], cs[-1][1] + cs[-1][2]
            if flat:
                cs = [("flat" if count == 1 else f"flat{f}", 0, hi - lo, torch.Size([hi - lo]))]
            else:
                cs = [(n, o - lo, k, s) for n, o, k, s in cs]
            ranges.append((lo, hi))
            chunks.append(cs)
        return cls(ranges, chunks, sync_offsets(period, count), [None] * count)

    @classmethod
    def _strided(cls, layout, count: int, period: int, flat: bool) -> FragmentPlan:
        ls = layers(layout)
        if count > len(ls):
            raise ValueError(f"{count} strided fragments need as many layers; the model has {len(ls)}")
        ranges, chunks, index = [], [], []
        for f in range(count):
            tensors = [i for j in range(f, len(ls), count) for i in ls[j]]
            cs, idx, pos = [], [], 0
            for i in tensors:
                name, off, k, shape = layout[i]
                cs.append((name, pos, k, shape))
                idx.append(torch.arange(off, off + k))
                pos += k
            if flat:
                cs = [(f"flat{f}", 0, pos, torch.Size([pos]))]
            ix = torch.cat(idx)
            lo, hi = int(ix.min()), int(ix.max()) + 1
            contiguous = hi - lo == pos
            ranges.append((lo, hi))
            chunks.append(cs)
            index.append(None if contiguous else ix)
        return cls(ranges, chunks, sync_offsets(period, count), index)


@dataclass
class InFlight:
    """A fragment's exchange between its start (after step ``step``) and its landing (after ``land_step``).
    ``t_start``: virtual time it starts (set by the loop at the end of ``step``); ``now``: virtual time the
    link is looked up at (the start step's); ``exchange``: the completed exchange, or None while a
    background job (``job``, procs) still runs it."""

    fragment: int
    step: int
    land_step: int
    now: float
    t_start: float | None = None
    exchange: Exchange | None = None
    job: Any = None  # procs: (Job, the collective's and its meter's record counts at the start)

    def to_dict(self) -> dict:
        if self.exchange is None:
            raise RuntimeError(f"fragment {self.fragment}'s exchange is still running: complete it first")
        return {"fragment": self.fragment, "step": self.step, "land_step": self.land_step, "now": self.now,
                "t_start": self.t_start, "exchange": exchange_to_dict(self.exchange)}

    @classmethod
    def from_dict(cls, d: dict) -> InFlight:
        return cls(d["fragment"], d["step"], d["land_step"], d["now"], d["t_start"],
                   exchange_from_dict(d["exchange"]))


def exchange_to_dict(ex: Exchange) -> dict:
    """The fields of ``ex`` a checkpoint keeps: not its call records, but how many calls they were (the run's
    ``messages`` counts them when the exchange lands)."""
    d = {f.name: getattr(ex, f.name) for f in fields(Exchange) if f.name != "calls"}
    d["messages"] = messages_of(ex)
    return d


def exchange_from_dict(d: dict) -> Exchange:
    return Exchange(**d)


def landing_wait(t_ready: float, t_start: float, v_comm: float, link_free: float) -> tuple[float, float]:
    """(w, e) of the module docstring: the wait of a step whose own time ends at ``t_ready`` for an exchange
    that started at ``t_start`` on a link free from ``link_free``, and the time ``e`` the link is free
    again."""
    end = max(t_start, link_free) + v_comm
    return max(0.0, end - t_ready), end


class Background:
    """One daemon thread per process that runs exchange jobs in submission order (so every rank runs the
    same collectives in the same order), while the main thread computes."""

    def __init__(self, device: torch.device | None = None):
        self.q: queue.Queue = queue.Queue()
        self.device = device
        self.thread = threading.Thread(target=self._run, name="lowbw-diloco-exchange", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        if self.device is not None and self.device.type == "cuda":
            torch.cuda.set_device(self.device)
        while True:
            job = self.q.get()
            if job is None:
                return
            job.run()

    def submit(self, fn) -> Job:
        job = Job(fn)
        self.q.put(job)
        return job

    def close(self) -> None:
        self.q.put(None)


class Job:
    """A background call of ``fn()``; :meth:`result` waits for it at most ``timeout`` seconds."""

    def __init__(self, fn):
        self.fn = fn
        self.done = threading.Event()
        self.value: Any = None
        self.error: BaseException | None = None
        self.seconds = 0.0

    def run(self) -> None:
        t0 = time.perf_counter()
        try:
            self.value = self.fn()
        except BaseException as e:  # noqa: BLE001 - re-raised in the waiting thread
            self.error = e
        self.seconds = time.perf_counter() - t0
        self.done.set()

    def result(self, timeout: float, what: str) -> Any:
        if not self.done.wait(timeout):
            raise TimeoutError(f"{what}: no result after {timeout:g} s")
        if self.error is not None:  # the job's own exception (a NonFiniteError stays one: the run diverged)
            self.error.add_note(what)
            raise self.error
        return self.value
