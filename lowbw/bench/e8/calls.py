"""A cell's gradient exchange without a network, for E8's probe (:mod:`lowbw.bench.e2e_probe`): the calls it makes
and the CPU work before each (:func:`call_sequence`), and its compressor's parts to time compression alone."""

from __future__ import annotations

import statistics
import time
from typing import Any

import torch

from lowbw.train.aggregate import aggregate_rank, bucket_mb_of, granularity, make_compressor, make_states
from lowbw.train.config import RunConfig
from lowbw.train.models import build_model
from lowbw.train.replicas import Replicas

__all__ = ["RecordingCollective", "InSituCollective", "exchange_parts", "call_sequence", "probe_model",
           "probe_batch"]


def probe_model(name: str, data_shape: tuple[list[int], int]):
    """The model ``name`` for inputs of ``data_shape``: ``([C, H, W], classes)`` (an image classifier) or
    ``([T], vocabulary)`` (a character-level language model with context T)."""
    shape, classes = data_shape
    if len(shape) == 1:
        return build_model(name, classes, 1, shape[0])
    c, h, _w = shape
    return build_model(name, classes, c, h)


def probe_batch(data_shape: tuple[list[int], int], batch: int):
    """A random batch ``(x, y)`` of ``batch`` samples of ``data_shape`` (:func:`probe_model`): images and labels,
    or windows of T character ids and their next characters (what a step computes on, whatever the values)."""
    shape, classes = data_shape
    if len(shape) == 1:
        return (torch.randint(0, classes, (batch, shape[0])), torch.randint(0, classes, (batch, shape[0])))
    return torch.randn(batch, *shape), torch.randint(0, classes, (batch,))


def exchange_parts(rc, rep):
    """``(compressor, chunks, state, bucket_mb)`` of the run config ``rc``'s gradient exchange on the replicas
    ``rep``, as the trainer aggregates (:func:`lowbw.train.aggregate.granularity`: per bucket unless
    ``granularity`` says otherwise; ``bucket_mb`` None: one call per chunk); None without a compressor."""
    comp = make_compressor(rc)
    if comp is None:
        return None
    gran = granularity(rc, comp)
    return comp, rep.chunks(gran), make_states(rc, [0])[0], bucket_mb_of(rc, gran)


class RecordingCollective:
    """Rank 0 of a ``world_size``-rank collective inside one process (every rank holds this rank's tensor): it
    records each call's operation and this thread's CPU seconds since the previous call returned."""

    rank = 0

    def __init__(self, world_size: int) -> None:
        self.world_size = world_size
        self.ops: list[str] = []
        self.gaps_s: list[float] = []
        self._last = time.thread_time()

    def restart(self) -> None:
        self.ops, self.gaps_s, self._last = [], [], time.thread_time()

    def tail_s(self) -> float:
        """CPU seconds since the last call returned (decompression after it)."""
        return time.thread_time() - self._last

    def _call(self, op: str, fn):
        self.ops.append(op)
        self.gaps_s.append(time.thread_time() - self._last)
        out = fn()
        self._last = time.thread_time()
        return out

    def all_reduce(self, tensor):
        return self._call("all_reduce", lambda: tensor * self.world_size)

    def all_gather(self, tensor, same_size: bool = False):
        return self._call("all_gather", lambda: [tensor.clone() for _ in range(self.world_size)])

    def broadcast(self, tensor, src: int):
        return self._call("broadcast", tensor.clone)


class InSituCollective(RecordingCollective):
    """A rank's collective for E8's in-situ exchange: every call is also made on ``inner`` (the testbed's
    collective) with a tiny tensor and timed there (``calls_s``), then answered as :class:`RecordingCollective`
    answers it. The compressor thus does its real work, memory traffic and decompression of N payloads
    included, between real messages whose payload is too small to add wire time: what the probe needs to
    know of a per-layer exchange's messages on this host (their software cost after that work, and the
    work's own slow-down in between), not what the link carries, which the clock models."""

    def __init__(self, inner, tiny: dict[str, torch.Tensor]) -> None:
        super().__init__(inner.world_size)
        self.rank = inner.rank
        self.inner = inner
        self.tiny = tiny  # per operation the tensor sent: one float, or one per rank for a ring all-reduce
        self.calls_s = 0.0

    def _call(self, op: str, fn):
        t0 = time.perf_counter()
        if op == "broadcast":
            self.inner.broadcast(self.tiny[op], 0)
        else:
            getattr(self.inner, op)(self.tiny[op])
        self.calls_s += time.perf_counter() - t0
        return super()._call(op, fn)


def call_sequence(cfg: dict[str, Any], workers: int, data_shape: tuple[list[int], int], reps: int = 20
                  ) -> list[tuple[str, float]]:
    """The calls of one gradient exchange of ``cfg`` (a RunConfig dict; ``data_shape`` as :func:`probe_model`
    takes it) as a rank makes them: per call its
    operation and the CPU milliseconds of compression before it, median over ``reps`` exchanges of random
    gradients of the config's model, in this process on one thread. The first call's entry also holds the
    work after the last call (decompression), which comes before the next exchange's first call. Without a
    compressor an exchange is one all-reduce with no work before it."""

    rc = RunConfig.from_dict(cfg)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        torch.manual_seed(0)
        rep = Replicas(probe_model(rc.model, data_shape), 1)
        parts = exchange_parts(rc, rep)
        if parts is None:
            return [("all_reduce", 0.0)]
        comp, chunks, state, bucket_mb = parts
        rec = RecordingCollective(workers)
        runs: list[list[float]] = []
        for _ in range(reps + 2):  # the first two warm up
            grad = torch.randn(rep.P)
            rec.restart()
            aggregate_rank(grad, chunks, rec, comp, state, bucket_mb)
            runs.append([g + (rec.tail_s() if j == 0 else 0.0) for j, g in enumerate(rec.gaps_s)])
            if len(runs[-1]) != len(runs[0]):
                raise RuntimeError(f"{rc.compressor}: {len(runs[-1])} calls in an exchange, {len(runs[0])} before")
    finally:
        torch.set_num_threads(threads)
    return [(op, statistics.median(xs) * 1e3) for op, xs in zip(rec.ops, zip(*runs[2:]), strict=True)]
