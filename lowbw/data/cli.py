"""``lowbw data``: fetch/verify datasets into the cache, or list them.

    python -m lowbw data                      # list the datasets and the cache directory
    python -m lowbw data cifar10 mnist        # load (fetch + convert once) into the cache
    python -m lowbw data verify [NAMES]       # re-hash the cached files against their recorded sha256
"""

from __future__ import annotations

import argparse
import sys
import time

from lowbw.data import available, cache_dir, load
from lowbw.data.loader import verify_cache


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("data", help="fetch and verify datasets into the cache",
                       description="Load datasets (cache -> $LOWBW_DATA_MIRROR -> official URLs), verifying checksums. "
                                   "`data verify [NAMES]` re-hashes cached entries (default: all cached) and exits 1 "
                                   "naming any corrupt file; a later load rebuilds it.")
    p.add_argument("names", nargs="*", help="dataset names (default: list them), or: verify [NAMES]")
    p.add_argument("--root", help="cache directory (default $LOWBW_DATA_DIR or ~/.cache/lowbw/data)")
    p.add_argument("--mirror", help="mirror directory or URL (default $LOWBW_DATA_MIRROR)")
    p.add_argument("--no-download", action="store_true", help="never download: fail on a file not cached or mirrored")


def _verify(names: list[str], root) -> int:
    bad = [n for n in names if n not in available()]
    if bad:
        print(f"lowbw data verify: dataset={bad[0]!r} is unknown; allowed: {', '.join(available())}", file=sys.stderr)
        return 2
    base = cache_dir(root)
    names = names or [n for n in available() if (base / n / "manifest.json").is_file()]
    rc = 0
    for n in names:
        entry = base / n
        if not (entry / "manifest.json").is_file():
            print(f"{n}: not cached ({entry})")
            continue
        problems = verify_cache(entry, force=True)
        if problems:
            rc = 1
            for p in problems:
                print(f"{n}: {p}", file=sys.stderr)
        else:
            print(f"{n}: ok")
    return rc


def main(args: argparse.Namespace) -> int:
    if args.names and args.names[0] == "verify":
        return _verify(args.names[1:], args.root)
    if not args.names:
        print(f"cache: {cache_dir(args.root)}")
        for n in available():
            print(n)
        return 0
    for name in args.names:
        t = time.perf_counter()
        ds = load(name, root=args.root, mirror=args.mirror, download_ok=not args.no_download)
        print(f"{name}: {ds.source}, train {tuple(ds.x_train.shape)}, test {tuple(ds.x_test.shape)}, "
              f"{ds.num_classes} classes, {time.perf_counter() - t:.2f} s")
    return 0
