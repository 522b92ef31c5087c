"""``python -m lowbw bench NAME [ARGS...]``: run one benchmark of :mod:`lowbw.bench`.

Every benchmark is a module ``lowbw.bench.<NAME>`` with ``main(argv) -> int`` (its own argparse; ``python -m
lowbw bench NAME --help`` shows its flags); it writes ``runs/bench/<NAME>.json`` (or ``--out``) and prints a
table. This command only finds and dispatches; the list is read off the package, so a new benchmark module
is a new subcommand.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys

import lowbw.bench as pkg

__all__ = ["add_parser", "main", "benchmarks"]

# modules of lowbw.bench that are not benchmarks (the dispatcher; E1's plan and its results' helpers; E8's
# machinery, a package; E2's inputs)
_NOT_BENCHMARKS = {"cli", "__main__", "collectives_plan", "collectives_results", "e8", "compressor_inputs"}


def benchmarks() -> list[str]:
    """Names of the benchmark modules (``lowbw/bench/<name>.py`` with a ``main``), sorted."""
    return sorted(m.name for m in pkgutil.iter_modules(pkg.__path__)
                  if not m.name.startswith("_") and m.name not in _NOT_BENCHMARKS)


def add_parser(subparsers) -> argparse.ArgumentParser:
    names = benchmarks()
    p = subparsers.add_parser(
        "bench", help="run a benchmark (" + ", ".join(names) + ")",
        description="run one benchmark of lowbw.bench (it writes runs/bench/NAME.json and prints a table)",
        epilog="benchmarks: " + ", ".join(names) + "\n(python -m lowbw bench NAME --help: its flags)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("name", metavar="NAME", choices=names, help="which benchmark")
    p.add_argument("args", nargs=argparse.REMAINDER, help="the benchmark's own flags")
    return p


def main(args: argparse.Namespace) -> int:
    mod = importlib.import_module(f"lowbw.bench.{args.name}")
    if not hasattr(mod, "main"):  # pragma: no cover - every listed module has one (tests/bench/test_e2e.py)
        print(f"lowbw bench: lowbw.bench.{args.name} has no main()", file=sys.stderr)
        return 2
    return int(mod.main(list(args.args)) or 0)
