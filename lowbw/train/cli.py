"""``python -m lowbw train --config run.yaml [--set key=value ...] --out DIR``: one run on any backend."""

from __future__ import annotations

import argparse
import json
import signal
import sys
from pathlib import Path

from lowbw.runs.metric import headline, run_metric
from lowbw.train.config import ConfigError, RunConfig, json_schema, keys_help, load_file, parse_override
from lowbw.train.launch import RunDirError, check_out, run

__all__ = ["add_parser", "main"]

_DESC = """Train one run config and write its run directory (config.json, metrics.jsonl, summary.json).

The config is a YAML/JSON mapping of the keys below (a run's config.json works too); --set overrides keys
(values parsed as YAML: --set lr=0.1 --set targets=[0.5,0.6] --set compressor_args={ratio: 0.01}).
Unknown keys and impossible combinations are rejected before any work, naming the key.

A rerun into the same --out resumes from its checkpoint (checkpoint_every), does nothing if the run is
complete with the same config, and refuses (exit 2, naming the differing keys) if the directory holds a run
of another config, unless --force. Errors are one line on stderr; exit 1 when the run failed, 2 for bad
input, 130 when interrupted."""


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "train", help="train one run config (sim | procs | torchrun)", description=_DESC,
        epilog="keys (name = default {choices} [unit]):\n" + keys_help(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--config", "-c", help="run config file (YAML or JSON); omitted = all defaults")
    p.add_argument("--set", "-s", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override one key (repeatable)")
    p.add_argument("--out", "-o", help="run directory (required unless --print-config/--schema)")
    p.add_argument("--force", action="store_true",
                   help="redo a complete run, or replace a run (or checkpoint) of another config")
    p.add_argument("--keep-checkpoint", action="store_true",
                   help="keep checkpoint/ after the run completes (default: deleted once summary.json is written)")
    p.add_argument("--print-config", action="store_true", help="print the validated config and derived values, exit")
    p.add_argument("--schema", action="store_true", help="print the run config's JSON schema, exit")
    return p


def build_config(path: str | None, overrides: list[str]):
    d = load_file(path) if path else {}
    for o in overrides:
        k, v = parse_override(o)
        d[k] = v
    return RunConfig.from_dict(d)


def _err(msg: str, rc: int) -> int:
    print("lowbw train: " + " ".join(str(msg).split()), file=sys.stderr)
    return rc


def main(args: argparse.Namespace) -> int:
    # a shell starts background jobs with SIGINT ignored; a run must still stop (and clean up) on Ctrl-C/kill -INT
    signal.signal(signal.SIGINT, signal.default_int_handler)
    if args.schema:
        print(json.dumps(json_schema(), indent=2))
        return 0
    try:
        cfg = build_config(args.config, args.overrides)
    except ConfigError as e:
        return _err(f"invalid config: {e}", 2)
    except OSError as e:
        return _err(e, 2)
    if args.print_config:
        print(json.dumps({"config": cfg.to_dict(), "derived": cfg.derived()}, indent=2))
        return 0
    if not args.out:
        return _err("--out DIR is required", 2)
    out = Path(args.out)
    try:
        if out.is_dir() and check_out(cfg, out.resolve(), args.force) == "complete":
            print(f"lowbw train: {args.out} is complete (summary.json exists, same config); --force redoes it",
                  file=sys.stderr)
            return 0
    except RunDirError as e:
        return _err(e, 2)
    # SIGTERM/SIGHUP unwind like Ctrl-C: workers and testbed namespaces are removed on the way out
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, lambda s, f: (_ for _ in ()).throw(SystemExit(128 + s)))
    try:
        summ = run(cfg, args.out, overwrite=args.force, keep_checkpoint=args.keep_checkpoint)
    except KeyboardInterrupt:
        return _err("interrupted (a rerun with the same --out resumes from the last checkpoint)", 130)
    except SystemExit as e:  # SIGTERM/SIGHUP (above): workers and namespaces are gone by now
        if not isinstance(e.code, int) or e.code <= 128:
            raise
        name = signal.Signals(e.code - 128).name if e.code - 128 in {s.value for s in signal.Signals} else e.code
        return _err(f"stopped by {name} (a rerun with the same --out resumes from the last checkpoint)", e.code)
    except RunDirError as e:
        return _err(e, 2)
    except ConfigError as e:
        return _err(f"invalid config: {e}", 2)
    except (RuntimeError, OSError, ValueError) as e:
        from lowbw.data import ChecksumError  # lazy: lowbw.data imports torch, which `lowbw --help` needs not
        from lowbw.train.workload import WorkloadError  # lazy: likewise

        if isinstance(e, WorkloadError):  # a dataset or model that does not build or fit: bad input
            return _err(f"invalid config: {e}", 2)

        kind = "data" if isinstance(e, ChecksumError) else "failed"
        return _err(f"{kind}: {e}", 1)
    print(json.dumps(console_summary(summ, out)))
    return 0


def console_summary(summ: dict, out: Path) -> dict:
    """The line printed after a run: progress, the workload's own metric (test accuracy for a classifier,
    validation loss and perplexity for a language model, a dataset file's declared metric), bytes, times."""
    try:
        metric, _ = run_metric(json.loads((out / "config.json").read_text()))
    except (OSError, ValueError):
        metric = "test_acc"
    line = {k: summ.get(k) for k in ("complete", "step", "epoch")}
    line["metric"] = metric
    line.update(headline(summ, metric))
    line.update({k: summ.get(k) for k in ("bytes_sent_total", "t_virtual", "t_wall")})
    return line
