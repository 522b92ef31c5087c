"""lowbw.train: the data-parallel training engine.

One validated run config (:class:`RunConfig`), three backends with the same numbers (``sim``: M workers in
one process with a virtual clock; ``procs``: M processes over torch.distributed, optionally inside the tc
testbed; ``torchrun``), every synchronisation scheme of the sources (synchronous with any collective and
compressor, local SGD, post-local SGD, households/neighbourhoods, SSP, asynchronous), the thesis' data
assignment schemes, and the draft paper's dynamic batch size.

>>> from lowbw.train import RunConfig, run
>>> summary = run(RunConfig.from_dict({"model": "cnn", "workers": 4, "compressor": "topk",
...                                    "compressor_args": {"ratio": 0.01}}), "runs/demo")  # doctest: +SKIP

Submodules are imported lazily (``import lowbw.train`` does not import torch).
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["RunConfig", "ConfigError", "json_schema", "run"]

_LAZY = {"RunConfig": "lowbw.train.config", "ConfigError": "lowbw.train.config",
         "json_schema": "lowbw.train.config", "run": "lowbw.train.launch"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'lowbw.train' has no attribute {name!r}")
