"""``python -m lowbw train --config run.yaml [--set key=value ...] --out DIR``: one run on any backend."""

from __future__ import annotations

import argparse
import json
import sys

__all__ = ["add_parser", "main"]

_DESC = """Train one run config and write its run directory (config.json, metrics.jsonl, summary.json).

The config is a YAML/JSON mapping of the keys below (a run's config.json works too); --set overrides keys
(values parsed as YAML: --set lr=0.1 --set targets=[0.5,0.6] --set compressor_args={ratio: 0.01}).
Unknown keys and impossible combinations are rejected before any work, naming the key."""


def add_parser(subparsers) -> argparse.ArgumentParser:
    from lowbw.train.config import keys_help

    p = subparsers.add_parser(
        "train", help="train one run config (sim | procs | torchrun)", description=_DESC,
        epilog="keys (name = default {choices}):\n" + keys_help(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--config", "-c", help="run config file (YAML or JSON); omitted = all defaults")
    p.add_argument("--set", "-s", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override one key (repeatable)")
    p.add_argument("--out", "-o", help="run directory (required unless --print-config/--schema)")
    p.add_argument("--force", action="store_true", help="redo a complete run (summary.json exists)")
    p.add_argument("--print-config", action="store_true", help="print the validated config and derived values, exit")
    p.add_argument("--schema", action="store_true", help="print the run config's JSON schema, exit")
    return p


def build_config(path: str | None, overrides: list[str]):
    from lowbw.train.config import RunConfig, load_file, parse_override

    d = load_file(path) if path else {}
    for o in overrides:
        k, v = parse_override(o)
        d[k] = v
    return RunConfig.from_dict(d)


def main(args: argparse.Namespace) -> int:
    from lowbw.train.config import ConfigError, json_schema

    if args.schema:
        print(json.dumps(json_schema(), indent=2))
        return 0
    try:
        cfg = build_config(args.config, args.overrides)
    except ConfigError as e:
        print(f"lowbw train: invalid config: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"lowbw train: {e}", file=sys.stderr)
        return 2
    if args.print_config:
        print(json.dumps({"config": cfg.to_dict(), "derived": cfg.derived()}, indent=2))
        return 0
    if not args.out:
        print("lowbw train: --out DIR is required", file=sys.stderr)
        return 2
    from pathlib import Path

    if (Path(args.out) / "summary.json").exists() and not args.force:
        print(f"lowbw train: {args.out} is complete (summary.json exists); --force redoes it", file=sys.stderr)
        return 0
    from lowbw.train.launch import run

    summ = run(cfg, args.out, overwrite=args.force)
    keys = ("complete", "step", "epoch", "final_test_acc", "best_test_acc", "bytes_sent_total", "t_virtual",
            "t_wall")
    print(json.dumps({k: summ.get(k) for k in keys}))
    return 0
