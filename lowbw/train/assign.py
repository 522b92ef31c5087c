"""Datasets on the device, the train/validation split, data assignment schemes and per-worker sample streams.

Data assignment follows the thesis (Haland & Birkeland 2020, ch. 4): the training split is shuffled once
(seeded) and then

* ``disjoint``: M shards, worker i gets shard i (C = 1);
* ``full``: every worker gets everything (C = M);
* ``coarse``: S shards (S | M), worker i gets shard i mod S (C = M / S);
* ``medium``: M shards, worker i gets shards i, i+1, ..., i+C-1 (mod M) (2C - 1 workers intersect);
* ``fine``: every sample goes to C distinct workers so that every pair of workers shares about the same
  number of samples: samples are taken M at a time, each round draws a random permutation pi of the workers
  and sample j of the round goes to pi[j], pi[j+1], ..., pi[j+C-1] (mod M). Every worker gets exactly C
  samples per round (equal loads) and every pair is equally likely at every distance (equal expected
  intersections, C(C-1)N / (M(M-1)));
* ``household``: S_H household shards (S_H | H), household h gets shard h mod S_H, split disjointly among its
  M/H workers (workers are numbered household by household, households neighbourhood by neighbourhood, so
  S_H = H/NB gives full overlap between neighbourhoods and none inside one, as in the thesis' Figure 4.8).

Each worker reads its samples as an endless stream: a fresh seeded permutation of its own shard per pass
(local shuffling), batches may straddle passes. The generator of worker r depends only on (seed, r), so the
``sim`` and ``procs`` backends see the same batches.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import torch

from lowbw.data import load

__all__ = ["TrainData", "load_data", "assign", "WorkerStream", "Batches", "seed_for", "pairwise_intersections"]


def seed_for(seed: int, *tags: object) -> int:
    """A 63-bit seed derived from ``seed`` and tags (stable across processes and Python versions)."""
    h = hashlib.sha256("/".join(str(t) for t in (seed, *tags)).encode()).digest()
    return int.from_bytes(h[:8], "little") & ((1 << 63) - 1)


def generator(seed: int, *tags: object) -> torch.Generator:
    return torch.Generator().manual_seed(seed_for(seed, *tags))


@dataclass
class TrainData:
    """Whole splits as tensors: images uint8 ``[N, C, H, W]`` (on the training device), labels int64."""

    name: str
    x_train: torch.Tensor
    y_train: torch.Tensor
    x_val: torch.Tensor
    y_val: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    num_classes: int
    mean: tuple[float, ...]
    std: tuple[float, ...]

    @property
    def image_shape(self) -> tuple[int, int, int]:
        return tuple(self.x_train.shape[1:])  # type: ignore[return-value]


def split_indices(n: int, val_fraction: float, split_seed: int,
                  train_limit: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Seeded train/validation split of ``range(n)``: (train indices sorted, val indices sorted)."""
    perm = torch.randperm(n, generator=generator(split_seed, "split"))
    n_val = int(round(n * val_fraction))
    val, train = perm[:n_val], perm[n_val:]
    if train_limit:
        train = train[:train_limit]
    return train.sort().values, val.sort().values


SYNTHETIC = "synthetic"


@dataclass(frozen=True)
class _Synthetic:
    """A learnable stand-in dataset (no files): 10 classes of 16x16x3 images, class prototype + noise."""

    name: str
    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    num_classes: int = 10
    mean: tuple[float, ...] = (0.5, 0.5, 0.5)
    std: tuple[float, ...] = (0.25, 0.25, 0.25)


def synthetic(n_train: int = 6000, n_test: int = 1000, size: int = 16, classes: int = 10, seed: int = 0) -> _Synthetic:
    g = generator(seed, "synthetic")
    proto = torch.randint(0, 256, (classes, size, size, 3), generator=g).float()
    n = n_train + n_test
    y = torch.randint(0, classes, (n,), generator=g)
    noise = torch.randint(0, 256, (n, size, size, 3), generator=g).float()
    x = (0.45 * proto[y] + 0.55 * noise).round().clamp(0, 255).to(torch.uint8)
    return _Synthetic(SYNTHETIC, x[:n_train], y[:n_train], x[n_train:], y[n_train:], classes)


def load_data(cfg, device: str | torch.device = "cpu", dataset=None) -> TrainData:
    """Load ``cfg.dataset`` via lowbw.data, split off validation, move uint8 NCHW tensors to ``device``.

    ``dataset: synthetic`` needs no files (tests, benchmarks): see :func:`synthetic`.
    """
    if dataset is None and cfg.dataset == SYNTHETIC:
        dataset = synthetic()
    if dataset is None:
        dataset = load(cfg.dataset)
    ds = dataset

    def nchw(x: torch.Tensor) -> torch.Tensor:
        x = torch.as_tensor(x)
        if x.dim() == 3:
            x = x[..., None]
        return x.permute(0, 3, 1, 2).contiguous().to(device)

    ytr = torch.as_tensor(ds.y_train).long()
    tr, va = split_indices(len(ytr), cfg.val_fraction, cfg.split_seed, cfg.train_limit)
    xtr = torch.as_tensor(ds.x_train)
    x_test, y_test = torch.as_tensor(ds.x_test), torch.as_tensor(ds.y_test).long()
    if cfg.test_limit:
        x_test, y_test = x_test[: cfg.test_limit], y_test[: cfg.test_limit]
        va = va[: cfg.test_limit]
    return TrainData(
        name=getattr(ds, "name", cfg.dataset),
        x_train=nchw(xtr[tr]), y_train=ytr[tr].to(device),
        x_val=nchw(xtr[va]), y_val=ytr[va].to(device),
        x_test=nchw(x_test), y_test=y_test.to(device),
        num_classes=int(ds.num_classes),
        mean=tuple(getattr(ds, "mean", ()) or ()), std=tuple(getattr(ds, "std", ()) or ()),
    )


def assign(scheme: str, n: int, workers: int, seed: int, *, shards: int = 0, copies: int = 0,
           households: int = 0, household_shards: int = 0) -> list[torch.Tensor]:
    """Indices (into the training split) held by each worker under ``scheme``."""
    M = workers
    perm = torch.randperm(n, generator=generator(seed, "assign"))
    if scheme == "disjoint":
        return [s.clone() for s in torch.tensor_split(perm, M)]
    if scheme == "full":
        return [perm.clone() for _ in range(M)]
    if scheme == "coarse":
        if not shards or M % shards:
            raise ValueError(f"coarse: shards={shards} must divide workers={M}")
        parts = torch.tensor_split(perm, shards)
        return [parts[i % shards].clone() for i in range(M)]
    if scheme == "medium":
        if not 1 <= copies <= M:
            raise ValueError(f"medium: copies={copies} must be in 1..{M}")
        parts = torch.tensor_split(perm, M)
        return [torch.cat([parts[(i + j) % M] for j in range(copies)]) for i in range(M)]
    if scheme == "fine":
        if not 1 <= copies <= M:
            raise ValueError(f"fine: copies={copies} must be in 1..{M}")
        rounds = -(-n // M)
        g = generator(seed, "fine")
        pis = torch.stack([torch.randperm(M, generator=g) for _ in range(rounds)])  # [R, M]
        k = torch.arange(n)
        r, j = k // M, k % M
        owners = torch.stack([pis[r, (j + t) % M] for t in range(copies)], 1)  # [n, C]
        return [perm[(owners == w).any(1)] for w in range(M)]
    if scheme == "household":
        H = households
        SH = household_shards or H
        if not H or M % H or H % SH:
            raise ValueError(f"household: need H | M and S_H | H (M={M}, H={H}, S_H={SH})")
        parts = torch.tensor_split(perm, SH)
        per = M // H
        out = []
        for h in range(H):
            mine = torch.tensor_split(parts[h % SH], per)
            out.extend(m.clone() for m in mine)
        return out
    raise ValueError(f"assignment={scheme!r} is unknown")


def pairwise_intersections(parts: list[torch.Tensor], n: int) -> torch.Tensor:
    """``[M, M]`` matrix of |D_i ∩ D_j| (diagonal: shard sizes)."""
    M = len(parts)
    member = torch.zeros(M, n, dtype=torch.float64)
    for i, p in enumerate(parts):
        member[i, p] = 1
    return (member @ member.T).round().long()


class WorkerStream:
    """Endless seeded stream of one worker's sample indices: a new permutation of its shard every pass."""

    def __init__(self, indices: torch.Tensor, seed: int, rank: int):
        if len(indices) == 0:
            raise ValueError(f"worker {rank} was assigned no samples")
        self.indices = indices
        self.gen = generator(seed, "stream", rank)
        self.order = self._shuffle()
        self.pos = 0
        self.passes = 0

    def _shuffle(self) -> torch.Tensor:
        return self.indices[torch.randperm(len(self.indices), generator=self.gen)]

    def take(self, b: int) -> torch.Tensor:
        out = []
        need = b
        while need:
            k = min(need, len(self.order) - self.pos)
            out.append(self.order[self.pos: self.pos + k])
            self.pos += k
            need -= k
            if self.pos == len(self.order):
                self.order = self._shuffle()
                self.pos = 0
                self.passes += 1
        return out[0] if len(out) == 1 else torch.cat(out)

    def state_dict(self) -> dict:
        return {"gen": self.gen.get_state(), "order": self.order.clone(), "pos": self.pos, "passes": self.passes}

    def load_state_dict(self, s: dict) -> None:
        self.gen.set_state(s["gen"])
        self.order = s["order"].clone()
        self.pos = int(s["pos"])
        self.passes = int(s["passes"])


class Batches:
    """The training batches of the replicas one process holds: replica ``i`` (worker ``ranks[i]``) takes
    sample indices from its own stream, and its workload draws them (augmentation, window offsets) with its
    own generator, both seeded by (seed, worker)."""

    def __init__(self, workload, parts: list[torch.Tensor], ranks: list[int], seed: int, device):
        self.workload = workload
        self.device = torch.device(device)
        self.streams = [WorkerStream(parts[w], seed, w) for w in ranks]
        self.gens = [generator(seed, "augment", w) for w in ranks]

    def __call__(self, i: int, b: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Replica ``i``'s next ``b`` samples: (model inputs, targets)."""
        idx = self.streams[i].take(b)
        if self.device.type != "cpu":
            idx = idx.to(self.device)
        return self.workload.train_batch(idx, self.gens[i])

    def state_dict(self) -> dict:
        return {"streams": [st.state_dict() for st in self.streams], "gens": [g.get_state() for g in self.gens]}

    def load_state_dict(self, s: dict) -> None:
        for st, d in zip(self.streams, s["streams"], strict=True):
            st.load_state_dict(d)
        for g, d in zip(self.gens, s["gens"], strict=True):
            g.set_state(d)
