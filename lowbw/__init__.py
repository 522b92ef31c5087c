"""lowbw: data-parallel training over low-bandwidth networks.

One package per concept, layered: a package imports only packages beneath it. The order and what each
package holds are written once, in the README's "Layout" section (``tests/test_architecture.py`` reads it
from there). ``python -m lowbw <command>`` (:mod:`lowbw.cli`) is the one command line above them all.

Subpackages are imported lazily so ``import lowbw`` is cheap: ``lowbw.train``, ``lowbw.comm``, ... load on
first use; ``lowbw.results`` is kept as a name for :mod:`lowbw.runs.results` (run directories as DataFrames).
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"
__all__ = ["collective", "compress", "comm", "net", "runs", "train", "report", "data", "results", "__version__"]

_MODULES = {"results": "lowbw.runs.results"}  # short names kept for code written against them


def __getattr__(name: str) -> Any:
    if name in __all__ and name != "__version__":
        return importlib.import_module(_MODULES.get(name, f"lowbw.{name}"))
    raise AttributeError(f"module 'lowbw' has no attribute {name!r}")
