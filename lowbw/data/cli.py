"""``lowbw data``: fetch/verify datasets into the cache, or list them."""

from __future__ import annotations

import argparse
import time


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("data", help="fetch and verify datasets into the cache",
                       description="Load datasets (cache -> $LOWBW_DATA_MIRROR -> official URLs), verifying checksums.")
    p.add_argument("names", nargs="*", help="dataset names (default: list them)")
    p.add_argument("--root", help="cache directory (default $LOWBW_DATA_DIR or ~/.cache/lowbw/data)")
    p.add_argument("--mirror", help="mirror directory or URL (default $LOWBW_DATA_MIRROR)")
    p.add_argument("--no-download", action="store_true", help="fail instead of downloading")


def main(args: argparse.Namespace) -> int:
    from lowbw.data import available, cache_dir, load

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
