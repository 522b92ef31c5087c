"""``lowbw data``: fetch/verify datasets into the cache, or list them.

    python -m lowbw data                      # list the datasets and the cache directory
    python -m lowbw data cifar10 mnist        # load (fetch + convert once) into the cache
    python -m lowbw data verify [NAMES]       # re-hash the cached files against their recorded sha256
                                              # (a text corpus: against its published md5)

Image datasets and text corpora (``shakespeare``: Tiny Shakespeare, the language model's) alike.
"""

from __future__ import annotations

import argparse
import sys
import time

from lowbw.data import available, cache_dir, load
from lowbw.data.fetch import file_digest
from lowbw.data.loader import verify_cache
from lowbw.data.text import TEXT_SPECS, load_text, text_available


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("data", help="fetch and verify datasets into the cache",
                       description="Load datasets (cache -> $LOWBW_DATA_MIRROR -> official URLs), verifying checksums. "
                                   "`data verify [NAMES]` re-hashes cached entries (default: all cached) and exits 1 "
                                   "naming any corrupt file; a later load rebuilds it.")
    p.add_argument("names", nargs="*", help="dataset names (default: list them), or: verify [NAMES]")
    p.add_argument("--root", help="cache directory (default $LOWBW_DATA_DIR or ~/.cache/lowbw/data)")
    p.add_argument("--mirror", help="mirror directory or URL (default $LOWBW_DATA_MIRROR)")
    p.add_argument("--no-download", action="store_true", help="never download: fail on a file not cached or mirrored")


def _all() -> list[str]:
    return [*available(), *text_available()]


def _text_line(name: str, chars: int, vocab: int) -> str:
    spec = TEXT_SPECS[name]
    return (f"{chars:,} characters, {vocab} distinct; first {spec.train_fraction:.0%} train, "
            f"last {1 - spec.train_fraction:.0%} validation")


def _verify_text(name: str, base) -> int:
    """A cached corpus against its published md5 (0 ok or not cached, 1 corrupt)."""
    spec = TEXT_SPECS[name]
    path = base / name / spec.filename
    if not path.is_file():
        print(f"{name}: not cached ({path})")
        return 0
    got = file_digest(path, "md5")
    if got != spec.md5:
        print(f"{name}: {path}: md5 {got} differs from the published {spec.md5}", file=sys.stderr)
        return 1
    print(f"{name}: ok ({spec.filename}, md5 {spec.md5} as published; {_text_line(name, spec.chars, spec.vocab_size)})")
    return 0


def _verify(names: list[str], root) -> int:
    bad = [n for n in names if n not in _all()]
    if bad:
        print(f"lowbw data verify: dataset={bad[0]!r} is unknown; allowed: {', '.join(_all())}", file=sys.stderr)
        return 2
    base = cache_dir(root)
    names = names or [n for n in available() if (base / n / "manifest.json").is_file()] + [
        n for n in text_available() if (base / n / TEXT_SPECS[n].filename).is_file()]
    rc = 0
    for n in names:
        if n in TEXT_SPECS:
            rc = max(rc, _verify_text(n, base))
            continue
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
        for n in text_available():
            print(f"{n} (text: {_text_line(n, TEXT_SPECS[n].chars, TEXT_SPECS[n].vocab_size)})")
        return 0
    for name in args.names:
        t = time.perf_counter()
        if name in TEXT_SPECS:
            c = load_text(name, root=args.root, mirror=args.mirror, download_ok=not args.no_download)
            print(f"{name}: {c.source}, {_text_line(name, len(c.ids), c.vocab_size)}, "
                  f"{time.perf_counter() - t:.2f} s")
            continue
        ds = load(name, root=args.root, mirror=args.mirror, download_ok=not args.no_download)
        print(f"{name}: {ds.source}, train {tuple(ds.x_train.shape)}, test {tuple(ds.x_test.shape)}, "
              f"{ds.num_classes} classes, {time.perf_counter() - t:.2f} s")
    return 0
