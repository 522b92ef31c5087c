"""PowerSGD (Vogels et al. 2019), numerically the same as torch's ``powerSGD_hook`` for one matrix per bucket.

Per tensor (viewed as a matrix ``M`` of shape (shape[0], -1)), with error feedback ``e`` and warm start:

1. ``M <- M + e`` (error feedback); keep a copy ``M0``.
2. ``Q``: on the first step (or every step without warm start) standard normal from a generator seeded
   by ``rng.randint(1_000_000_000)``, where ``rng = numpy.random.RandomState(seed)`` is shared by all tensors
   of one worker (as torch's state is shared by all buckets); otherwise last step's averaged ``Q``.
   Orthogonalized (Gram-Schmidt for rank <= 2, QR above, like torch).
3. ``P = M Q``; all-reduce (sum) P; orthogonalize P.
4. ``Q = M^T P``; all-reduce Q and divide by N.
5. result ``P Q^T``; ``e <- M0 - P Q^T``.

Tensors with fewer than 2 dimensions, or whose rank-r factors would not be ``min_compression_rate`` times
smaller (torch's test ``(n + m) r * rate < n m``), are averaged uncompressed; their error is kept the same way
(local minus average), exactly as torch does, and consume a seed from ``rng`` like torch's buckets do.
The first ``start_iter`` steps of each tensor are plain averages without error feedback (torch's
``start_powerSGD_iter``; our default 0 starts at once). One tensor here = one bucket in torch's hook.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import Tensor

from lowbw.compress.base import Compressor, Payload, State
from lowbw.compress.checks import check_bool, check_float, check_int
from lowbw.compress.registry import register
from lowbw.compress.rounds import Request, Rounds, run_local

__all__ = ["PowerSGD", "orthogonalize"]


def orthogonalize(m: Tensor, epsilon: float = 0.0) -> None:
    """Orthonormalize the columns of ``m`` (n, r) in place: Gram-Schmidt for r <= 2, QR otherwise (torch's rule)."""
    r = m.shape[1]
    if r > 2:
        q, _ = torch.linalg.qr(m)
        m.copy_(q)
        return
    for i in range(r):
        col = m[:, i : i + 1]
        col /= torch.linalg.vector_norm(col, dim=0, keepdim=True) + epsilon
        if i + 1 < r:
            rest = m[:, i + 1 :]
            rest -= torch.sum(col * rest, dim=0, keepdim=True) * col


class PowerSGD(Compressor):
    """Rank-``rank`` PowerSGD with warm start, error feedback and orthogonalization (see the module docstring).

    ``compress``/``decompress`` are the one-worker view (payload ``[P, Q]``, or the raw tensor when it is not
    compressed); ``aggregate`` runs the two all-reduce rounds (P, then Q).
    """

    name = "powersgd"
    # error feedback M = g + e (read 2, write 1), P = M Q and Q = M^T P (read 2), decode P Q^T (write 1),
    # new residual e = M - P Q^T (read 2, write 1); the rank-r factors cost nothing per entry
    passes = 9.0
    summable = True  # aggregates with all-reduce only (two rounds: P then Q)
    has_own_memory = True

    def __init__(self, rank: int = 1, warm_start: bool = True, error_feedback: bool = True, start_iter: int = 0,
                 min_compression_rate: float = 2.0, epsilon: float = 0.0, seed: int = 0):
        super().__init__()
        self.rank = check_int("powersgd", "rank", rank, 1)
        self.warm_start = check_bool("powersgd", "warm_start", warm_start)
        self.error_feedback = check_bool("powersgd", "error_feedback", error_feedback)
        self.start_iter = check_int("powersgd", "start_iter", start_iter, 0)
        self.min_compression_rate = check_float("powersgd", "min_compression_rate", min_compression_rate, 0.0)
        self.epsilon = check_float("powersgd", "epsilon", epsilon, 0.0, lo_open=False)
        self.seed = check_int("powersgd", "seed", seed, 0)
        self.params = {"rank": rank, "warm_start": warm_start, "error_feedback": error_feedback,
                       "start_iter": start_iter, "min_compression_rate": min_compression_rate, "epsilon": epsilon,
                       "seed": seed}

    def matrix_shape(self, shape: torch.Size) -> tuple[int, int, int] | None:
        """(n, m, r) if a tensor of ``shape`` is compressed, else None."""
        if len(shape) < 2 or shape.numel() == 0:
            return None
        n = shape[0]
        m = shape.numel() // n
        r = min(n, m, self.rank)
        if (n + m) * r * self.min_compression_rate < n * m:
            return n, m, r
        return None

    def _rng(self, state: State) -> np.random.RandomState:
        key = f"powersgd.rng.{self.seed}"
        rng = state.shared.get(key)
        if rng is None:
            rng = state.shared[key] = np.random.RandomState(self.seed)
        return rng

    def _step(self, x: Tensor, name: str, state: State, shape: torch.Size, world: int) -> Rounds:
        """One PowerSGD step as rounds (:mod:`lowbw.compress.rounds`: each all-reduce a yielded request);
        returns (the averaged approximation, flat fp32; local payload parts; meta)."""
        slot = state[name]
        it = slot.get("powersgd.iter", 0)
        slot["powersgd.iter"] = it + 1
        if it < self.start_iter:
            (s,) = yield Request("all_reduce", (x.clone(),))
            return s.div_(world), [x.clone()], {"mode": "raw"}
        err = slot.get("powersgd.err") if self.error_feedback else None
        if err is not None and err.shape == x.shape and err.device == x.device:
            corrected = err.add_(x)  # reuse the error's memory
        else:
            corrected = x.clone()
        mshape = self.matrix_shape(shape)
        if mshape is None:
            if not self.warm_start or not slot.get("powersgd.drawn"):
                # torch draws a seed for every bucket it (re)initialises, compressed or not: so do we, so that
                # the random streams of later tensors match torch's one-tensor-per-bucket hook
                self._rng(state).randint(1_000_000_000)
                slot["powersgd.drawn"] = True
            (s,) = yield Request("all_reduce", (corrected.clone(),))
            avg = s.div_(world)
            parts, meta = [corrected.clone()], {"mode": "raw"}
        else:
            n, m, r = mshape
            mat = corrected.view(n, m)
            q = slot.get("powersgd.q")
            if not self.warm_start or q is None or q.shape != (m, r) or q.device != x.device:
                g = torch.Generator(device="cpu").manual_seed(int(self._rng(state).randint(1_000_000_000)))
                q = torch.randn(m, r, generator=g, dtype=torch.float32).to(x.device)
            else:
                q = q.clone()  # the batched path stores one averaged Q for all ranks: never orthogonalize it in place
            orthogonalize(q, self.epsilon)
            (p,) = yield Request("all_reduce", (mat @ q,))
            orthogonalize(p, self.epsilon)
            (q,) = yield Request("all_reduce", (mat.t() @ p,))
            q = q.div_(world)
            avg = (p @ q.t()).view(-1)
            slot["powersgd.q"] = q
            parts, meta = [p.reshape(-1), q.reshape(-1)], {"mode": "lowrank", "n": n, "m": m, "r": r}
        if self.error_feedback:
            slot["powersgd.err"] = corrected.sub_(avg)
        return avg, parts, meta

    def _encode(self, x: Tensor, name: str, state: State, shape: torch.Size) -> tuple[list[Tensor], dict[str, Any]]:
        _, parts, meta = run_local(self._step(x, name, state, shape, 1))
        return parts, meta

    def decode(self, payload: Payload) -> Tensor:
        meta = payload.meta
        if meta["mode"] == "raw":
            return payload.parts[0].float().clone()
        p = payload.parts[0].view(meta["n"], meta["r"])
        q = payload.parts[1].view(meta["m"], meta["r"])
        return (p @ q.t()).view(-1)

    batched = True

    def rounds_batch(self, xs: Tensor, name: str = "", states=None, world_size: int = 1) -> Rounds:
        """All ranks' rows of one tensor at once, the arithmetic of :meth:`_step` row by row: the error
        feedback and the residuals as ``[N, n]`` operations; P and Q per row (their matrix products row by
        row, so that each is the per-tensor product); the all-reduced P, Q and result once (every rank
        holds the same). A Q that all ranks share (warm start) is orthogonalized once. Rank states must be
        in step (every rank aggregates every tensor every time, as collectives require)."""
        states = self._states(states, xs)
        x = self._prepare_batch(xs)
        N, shape, world = x.shape[0], xs.shape[1:], world_size
        slots = [st[name] for st in states]
        its = {s.get("powersgd.iter", 0) for s in slots}
        if len(its) != 1:
            raise ValueError(f"powersgd: the ranks' states of {name!r} are at different steps {sorted(its)}")
        it = its.pop()
        for s in slots:
            s["powersgd.iter"] = it + 1
        if it < self.start_iter:
            (s,) = yield Request("all_reduce", (x,))
            return s.div_(world).to(xs.dtype).view(shape)
        errs = [s.get("powersgd.err") if self.error_feedback else None for s in slots]
        ok = [e is not None and e.shape == x.shape[1:] and e.device == x.device for e in errs]
        if all(ok):
            corrected = torch.stack(errs).add_(x)
        else:
            corrected = torch.stack([e + xi if o else xi.clone() for e, xi, o in zip(errs, x, ok, strict=True)])
        mshape = self.matrix_shape(shape)
        if mshape is None:
            for s, st in zip(slots, states, strict=True):
                if not self.warm_start or not s.get("powersgd.drawn"):
                    self._rng(st).randint(1_000_000_000)
                    s["powersgd.drawn"] = True
            (s,) = yield Request("all_reduce", (corrected,))
            avg = s.div_(world)
        else:
            n, m, r = mshape
            mats = corrected.view(N, n, m)
            qs: list = []
            for s, st in zip(slots, states, strict=True):
                q = s.get("powersgd.q")
                if not self.warm_start or q is None or q.shape != (m, r) or q.device != x.device:
                    q = int(self._rng(st).randint(1_000_000_000))  # a seed; drawn below (once per distinct seed)
                qs.append(q)
            done: dict = {}  # one orthogonalized Q per distinct stored Q (by identity) or seed
            for i, q in enumerate(qs):
                key = ("seed", q) if isinstance(q, int) else ("id", id(q))
                if key not in done:
                    if isinstance(q, int):
                        g = torch.Generator(device="cpu").manual_seed(q)
                        qo = torch.randn(m, r, generator=g, dtype=torch.float32).to(x.device)
                    else:
                        qo = q.clone()
                    orthogonalize(qo, self.epsilon)
                    done[key] = qo
                qs[i] = done[key]
            (p,) = yield Request("all_reduce", (torch.stack([mats[i] @ qs[i] for i in range(N)]),))
            orthogonalize(p, self.epsilon)
            (q,) = yield Request("all_reduce", (torch.stack([mats[i].t() @ p for i in range(N)]),))
            q = q.div_(world)
            avg = (p @ q.t()).view(-1)
            for s in slots:
                s["powersgd.q"] = q
        if self.error_feedback:
            corrected.sub_(avg)
            for i, s in enumerate(slots):
                s["powersgd.err"] = corrected[i]
        return avg.to(xs.dtype).view(shape)

    def rounds(self, tensor: Tensor, name: str = "", state: State | None = None, world_size: int = 1) -> Rounds:
        """The two all-reduce rounds (P, then Q; one round for a tensor sent raw)."""
        x = self._prepare(tensor)
        avg, _, _ = yield from self._step(x, name, self._state(state), tensor.shape, world_size)
        return avg.to(tensor.dtype).view(tensor.shape)


register("powersgd", family="lowrank", configurable_ef=False, bench=({"rank": 1}, {"rank": 4}),
         doc="PowerSGD: rank-r, warm start, error feedback")(PowerSGD)
