"""lowbw: data-parallel training over low-bandwidth networks.

Layers (nothing imports upward): ``lowbw.compress`` (compressors, pure tensor functions),
``lowbw.comm`` (collectives over torch.distributed point-to-point, byte meter, DDP hooks),
``lowbw.net`` (alpha-beta cost model, netns + tc testbed), ``lowbw.train`` (training engine),
``lowbw.report`` (tables, figures, numbers for the paper), ``lowbw.data`` (datasets).

Subpackages are imported lazily so ``import lowbw`` is cheap.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"
__all__ = ["compress", "comm", "net", "train", "report", "data", "results", "__version__"]


def __getattr__(name: str) -> Any:
    if name in __all__ and name != "__version__":
        return importlib.import_module(f"lowbw.{name}")
    raise AttributeError(f"module 'lowbw' has no attribute {name!r}")
