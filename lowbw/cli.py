"""``python -m lowbw <command>``: one entry point for people who don't want notebooks.

Each subcommand lives next to the code it drives and exposes ``add_parser(subparsers)`` and
``main(args) -> int``; this module only dispatches (imports are lazy so ``--help`` is fast).
"""

from __future__ import annotations

import argparse
import importlib
import sys

# command name -> module implementing add_parser(subparsers) and main(args)
COMMANDS: dict[str, str] = {
    "train": "lowbw.train.cli",
    "testbed": "lowbw.net.cli",
    "data": "lowbw.data.cli",
    "report": "lowbw.report.cli",
    "bench": "lowbw.bench.cli",
    "doctor": "lowbw.workflow.doctor",
    "store": "lowbw.workflow.store",
    "advise": "lowbw.advise.cli",
    "compare": "lowbw.runs.compare",
}


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="lowbw", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, modname in COMMANDS.items():
        if only is not None and name != only:
            sub.add_parser(name, help=f"(see: lowbw {name} --help)")
            continue
        try:
            mod = importlib.import_module(modname)
        except ModuleNotFoundError as e:  # a subcommand whose module is not built yet
            if e.name and modname.startswith(e.name):
                continue
            raise
        mod.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    first = next((a for a in argv if not a.startswith("-")), None)
    parser = build_parser(first if first in COMMANDS else None)
    args = parser.parse_args(argv)
    if not args.command:
        parser.print_help()
        return 2
    return int(importlib.import_module(COMMANDS[args.command]).main(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
