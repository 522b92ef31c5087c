"""``lowbw report``: collate runs and benchmarks into the paper's generated files (what ``rule report`` does
through notebooks/report.ipynb), without Snakemake or papermill.

    python -m lowbw report                                   # config/config.yaml, runs/ -> paper/generated/
    python -m lowbw report --config config/tiny.yaml --only e4 e7
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from lowbw.report import build
from lowbw.runs.results import RunError


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("report", help="runs/ -> paper/generated/ (tables, figures, numbers.tex, tidy stats)",
                       description=__doc__.splitlines()[0])
    p.add_argument("--config", default="config/config.yaml", help="the workflow config (default %(default)s)")
    p.add_argument("--runs", default="runs", help="runs directory (default %(default)s)")
    p.add_argument("--out", default="paper/generated", help="output directory (default %(default)s)")
    p.add_argument("--only", nargs="+", metavar="EXP", help="only these experiments, e.g. e1 e4")


def main(args: argparse.Namespace) -> int:
    import yaml

    # lazy: keeps `lowbw --help` free of matplotlib, pandas, scipy, seaborn, torch
    from lowbw.report.experiments import BY_KEY

    cfg = Path(args.config)
    if not cfg.is_file():
        print(f"lowbw report: --config {args.config} does not exist", file=sys.stderr)
        return 2
    if not Path(args.runs).is_dir():
        print(f"lowbw report: --runs {args.runs} is not a directory", file=sys.stderr)
        return 2
    bad = [k for k in args.only or [] if k not in BY_KEY]
    if bad:
        print(f"lowbw report: --only {bad[0]} is unknown; known: {' '.join(BY_KEY)}", file=sys.stderr)
        return 2
    try:
        result = build(yaml.safe_load(cfg.read_text()), args.runs, args.out, only=args.only)
    except RunError as e:  # an incomplete or corrupt run: rerun it; nothing was written
        print(f"lowbw report: {e}", file=sys.stderr)
        return 2
    for sec in result.sections:
        if sec.incomplete:
            print(f"lowbw report: {sec.key} reported as not run: {sec.incomplete}", file=sys.stderr)
    print(result.summary().to_string(index=False))
    return 0
