"""A workload = a dataset, the model it feeds, its training samples, its evaluation sets and their metrics.

The Trainer, the replicas and the schemes see only what this interface gives: ``n_train`` samples per epoch,
``train_batch(indices, gen)`` for a worker's batch, ``model(name)`` for the template, and ``eval_sets()`` of
named ``(inputs, targets)`` whose mean cross-entropy and accuracy :meth:`Replicas.evaluate` computes over
every target element. Two kinds exist:

* :class:`ImageWorkload`: a sample is one image; a batch is augmented (crop/flip) and normalised; the
  evaluation sets are ``val`` and ``test``; metrics ``{val,test}_{loss,acc}``.
* :class:`TextWorkload`: a character-level corpus; a sample index ``i`` is the block of characters
  ``[i T, (i + 1) T)`` of the training split (T = ``block_size``) and a draw of it is the window of
  ``T + 1`` characters that starts at a random offset inside that block (drawn from the worker's seeded
  generator, as an image's crop is), so an epoch is one pass over the training characters and the data
  assignment schemes split blocks as they split images. Inputs are the first T characters, targets the
  last T. The evaluation set ``val`` is fixed: the validation split cut into consecutive non-overlapping
  windows (the first ``test_limit`` of them when set), so every run is scored on the same characters;
  metrics ``val_loss`` (nats per character), ``val_ppl`` = exp(val_loss) and ``val_acc`` (next-character
  accuracy).
* :class:`FileWorkload`: the user's own data (``dataset: my_data.py:build``, :mod:`lowbw.train.userfiles`):
  a sample is one row of its tensors, batches are taken as given (no augmentation), the evaluation set is
  ``val``; metrics ``val_loss`` and ``val_acc``, the run judged by the dataset's own ``metric``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Protocol

import torch
from torch import nn

from lowbw.data import load
from lowbw.data.text import TEXT_SPECS, TextCorpus, load_text
from lowbw.train.assign import TrainData, load_data
from lowbw.train.augment import Augmenter
from lowbw.train.models import GPT_SIZES, build_model, model_kind
from lowbw.train.userfiles import UserDataset, build_dataset, is_file_spec
from lowbw.train.userfiles import build_model as build_user_model

__all__ = ["Workload", "ImageWorkload", "TextWorkload", "FileWorkload", "load_workload", "build_template",
           "is_text_dataset", "WorkloadError",
           "fill_cache", "text_block_size"]

Batch = tuple[torch.Tensor, torch.Tensor]


class WorkloadError(ValueError):
    """A dataset and a model that do not go together (raised before any work)."""


class Workload(Protocol):
    name: str  # the dataset's name
    kind: str  # "image" | "text" | "file"
    n_train: int  # samples in one epoch

    def model(self, name: str, device) -> nn.Module: ...

    def train_batch(self, idx: torch.Tensor, gen: torch.Generator) -> Batch: ...

    def eval_sets(self) -> dict[str, Batch]: ...

    def eval_input(self, x: torch.Tensor) -> torch.Tensor: ...

    def probe(self, n: int) -> Batch: ...

    def derived_metrics(self, ev: dict[str, Any]) -> dict[str, float]: ...

    def describe(self) -> dict[str, Any]: ...


def is_text_dataset(name: str) -> bool:
    return name in TEXT_SPECS


# ----------------------------------------------------------------------------------------------- images
class ImageWorkload:
    """Image classification over :class:`~lowbw.train.assign.TrainData` (uint8 NCHW on the device)."""

    kind = "image"

    def __init__(self, data: TrainData, augment: str, device):
        self.data = data
        self.name = data.name
        self.n_train = len(data.y_train)
        C, _, _ = data.image_shape
        self.aug = Augmenter(augment, C, data.mean, data.std, device)

    def model(self, name: str, device) -> nn.Module:
        if model_kind(name) != "image":
            raise WorkloadError(f"model={name!r} is a language model; dataset={self.name!r} holds images "
                                f"(use dataset: {', '.join(TEXT_SPECS)})")
        C, H, _ = self.data.image_shape
        return build_model(name, self.data.num_classes, C, H, device=device)

    def train_batch(self, idx: torch.Tensor, gen: torch.Generator) -> Batch:
        """The augmented, normalised images and the labels of samples ``idx``."""
        return self.aug.train(self.data.x_train[idx], gen), self.data.y_train[idx]

    def eval_sets(self) -> dict[str, Batch]:
        d = self.data
        return {"val": (d.x_val, d.y_val), "test": (d.x_test, d.y_test)}

    def eval_input(self, x: torch.Tensor) -> torch.Tensor:
        return self.aug.eval(x)

    def probe(self, n: int) -> Batch:
        """The first ``n`` training samples, unaugmented (the dynamic batch size's initial loss)."""
        d = self.data
        return d.x_train[:n], d.y_train[:n]

    def derived_metrics(self, ev: dict[str, Any]) -> dict[str, float]:
        return {}

    def describe(self) -> dict[str, Any]:
        d = self.data
        return {"kind": self.kind, "train": self.n_train, "val": len(d.y_val), "test": len(d.y_test),
                "image_shape": list(d.image_shape), "num_classes": d.num_classes}


# ----------------------------------------------------------------------------------------------- text
@dataclass(frozen=True)
class _Windows:
    """Consecutive non-overlapping windows of ``T + 1`` characters of ``ids``: inputs and next characters."""

    x: torch.Tensor  # int64 [n, T]
    y: torch.Tensor  # int64 [n, T]


def _windows(ids: torch.Tensor, T: int, limit: int) -> _Windows:
    n = (len(ids) - 1) // T
    if limit:
        n = min(n, limit)
    starts = torch.arange(n) * T
    w = ids[starts[:, None] + torch.arange(T + 1)].long()
    return _Windows(w[:, :-1].contiguous(), w[:, 1:].contiguous())


class TextWorkload:
    """Next-character prediction on a :class:`~lowbw.data.text.TextCorpus` (see the module docstring)."""

    kind = "text"

    def __init__(self, corpus: TextCorpus, block_size: int, eval_limit: int, device, dropout: float = 0.0):
        self.corpus, self.T, self.device = corpus, block_size, torch.device(device)
        self.dropout = dropout  # the model's dropout rate (the run's ``dropout`` key)
        self.name = corpus.name
        train, val = corpus.ids[: corpus.split], corpus.ids[corpus.split:]
        if block_size + 1 > len(val):
            raise WorkloadError(f"block_size={block_size} is longer than the validation split of {corpus.name} "
                                f"({len(val)} characters)")
        self.train = train.to(self.device)
        # blocks whose every window [i T + r, i T + r + T] (0 <= r < T) lies inside the training split
        self.n_train = (len(train) - 1) // block_size - 1
        v = _windows(val, block_size, eval_limit)
        self.val = (v.x.to(self.device), v.y.to(self.device))
        self._offsets = torch.arange(block_size + 1, device=self.device)

    def model(self, name: str, device) -> nn.Module:
        if model_kind(name) != "text":
            raise WorkloadError(f"model={name!r} is an image model; dataset={self.name!r} is text "
                                f"(use model: {', '.join(GPT_SIZES)})")
        return build_model(name, self.corpus.vocab_size, 1, self.T, device=device, dropout=self.dropout)

    def train_batch(self, idx: torch.Tensor, gen: torch.Generator) -> Batch:
        """Windows of blocks ``idx``, each starting at a random offset in its block: (inputs, targets)."""
        r = torch.randint(0, self.T, (len(idx),), generator=gen).to(self.device)
        w = self.train[(idx * self.T + r)[:, None] + self._offsets].long()
        return w[:, :-1], w[:, 1:]

    def eval_sets(self) -> dict[str, Batch]:
        return {"val": self.val}

    def eval_input(self, x: torch.Tensor) -> torch.Tensor:
        return x

    def probe(self, n: int) -> Batch:
        """The first ``n`` blocks of the training split, aligned (the dynamic batch size's initial loss)."""
        w = _windows(self.train, self.T, n)
        return w.x, w.y

    def derived_metrics(self, ev: dict[str, Any]) -> dict[str, float]:
        """Perplexity exp(loss) of every evaluated split."""
        return {k[:-5] + "_ppl": math.exp(v) for k, v in ev.items()
                if k.endswith("_loss") and v is not None and math.isfinite(v) and v < 700}

    def describe(self) -> dict[str, Any]:
        c = self.corpus
        return {"kind": self.kind, "train": self.n_train, "val": len(self.val[1]), "test": 0,
                "block_size": self.T, "vocab_size": c.vocab_size, "train_chars": c.split,
                "val_chars": len(c.ids) - c.split, "val_chars_scored": int(self.val[1].numel())}


# ----------------------------------------------------------------------------------------------- user files
class FileWorkload:
    """The user's own dataset (:class:`~lowbw.train.userfiles.UserDataset`), its tensors on the device."""

    kind = "file"

    def __init__(self, spec: str, data: UserDataset, device):
        self.name, self.spec = spec, data
        dev = torch.device(device)
        self.x_train, self.y_train = data.x_train.to(dev), data.y_train.to(dev)
        self.x_val, self.y_val = data.x_val.to(dev), data.y_val.to(dev)
        self.n_train = len(self.y_train)

    def model(self, name: str, device) -> nn.Module:
        """A lowbw image model on the user's images ([n, C, H, W]; classes = the largest target + 1)."""
        if model_kind(name) != "image" or self.x_train.dim() != 4:
            raise WorkloadError(f"model={name!r} needs images [n, C, H, W]; dataset={self.name!r} holds "
                                f"{tuple(self.x_train.shape)}: give model: path/to/module.py:build")
        classes = int(max(self.y_train.max(), self.y_val.max())) + 1
        return build_model(name, classes, self.x_train.shape[1], self.x_train.shape[2], device=device)

    def train_batch(self, idx: torch.Tensor, gen: torch.Generator) -> Batch:
        idx = idx.to(self.x_train.device)
        return self.x_train[idx], self.y_train[idx]

    def eval_sets(self) -> dict[str, Batch]:
        return {"val": (self.x_val, self.y_val)}

    def eval_input(self, x: torch.Tensor) -> torch.Tensor:
        return x

    def probe(self, n: int) -> Batch:
        return self.x_train[:n], self.y_train[:n]

    def derived_metrics(self, ev: dict[str, Any]) -> dict[str, float]:
        return {}

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, "train": self.n_train, "val": len(self.y_val), "test": 0,
                "input_shape": list(self.x_train.shape[1:]), "target_shape": list(self.y_train.shape[1:]),
                "metric": self.spec.metric, "direction": self.spec.direction}


def build_template(cfg, workload, device) -> nn.Module:
    """The run's model: the user's file (``model: my.py:build``) or the workload's lowbw model."""
    if is_file_spec(cfg.model):
        try:
            return build_user_model(cfg.model, device)
        except ValueError as e:
            raise WorkloadError(str(e)) from None
    return workload.model(cfg.model, device)


def fill_cache(dataset: str) -> None:
    """Fetch and verify ``dataset`` into the cache (before M processes start, so that they only read it); a
    user's dataset file is built once and checked instead."""
    if is_file_spec(dataset):
        try:
            build_dataset(dataset)
        except ValueError as e:
            raise WorkloadError(str(e)) from None
    elif is_text_dataset(dataset):
        load_text(dataset)
    else:
        load(dataset)


def text_block_size(cfg) -> int:
    """The run's context length: ``block_size``, or the model's own (``gpt-*`` sizes)."""
    if cfg.block_size:
        return cfg.block_size
    return GPT_SIZES[cfg.model].block_size if cfg.model in GPT_SIZES else 64


def load_workload(cfg, device, data=None) -> ImageWorkload | TextWorkload | FileWorkload:
    """The run's workload on ``device``; ``data``: an already loaded :class:`TrainData` or workload."""
    if data is not None and hasattr(data, "train_batch"):
        return data
    if data is None and is_file_spec(cfg.dataset):
        try:
            return FileWorkload(cfg.dataset, build_dataset(cfg.dataset), device)
        except ValueError as e:
            raise WorkloadError(str(e)) from None
    if data is None and is_text_dataset(cfg.dataset):
        return TextWorkload(load_text(cfg.dataset), text_block_size(cfg), cfg.test_limit, device, cfg.dropout)
    return ImageWorkload(data if data is not None else load_data(cfg, device), cfg.augment, device)
