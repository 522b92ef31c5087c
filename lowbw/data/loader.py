"""``load(name)``: verified dataset arrays from the cache, a mirror, or the official URLs (in that order).

Cache layout (``$LOWBW_DATA_DIR``, default ``~/.cache/lowbw/data``)::

    <cache>/<name>/x_train.npy y_train.npy x_test.npy y_test.npy   uncompressed, memory-mapped on load
    <cache>/<name>/manifest.json                                  written last = the cache entry is complete;
                                                                  sha256 + size of every .npy, verified on
                                                                  the first load in each process
    <cache>/<name>/raw/                                           verified original archives (downloads)

Mirror (``$LOWBW_DATA_MIRROR``: directory, ``file://`` or ``http(s)://``) may hold either the original
archives (verified by their published md5) or a pre-converted ``<name>.npz`` (verified by the sha256
pinned in ``specs.py`` or listed in the mirror's ``SHA256SUMS``).
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from lowbw.data.fetch import MIRROR_ENV, ChecksumError, download, file_digest, mirror_get, verify
from lowbw.data.parse import Arrays, FormatError, parse_cifar_tar, parse_idx_gz
from lowbw.data.specs import SPECS, DatasetSpec

if TYPE_CHECKING:  # annotations only: `lowbw --help` imports this module (lowbw.data) and must not load torch
    import torch

__all__ = ["Dataset", "load", "load_arrays", "cache_dir", "DATA_DIR_ENV", "available", "verify_cache"]

DATA_DIR_ENV = "LOWBW_DATA_DIR"
_KEYS = ("x_train", "y_train", "x_test", "y_test")


@dataclass(frozen=True)
class Dataset:
    """A whole dataset in memory. Images ``uint8 [N, H, W, C]``, labels ``int64 [N]``."""

    name: str
    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    num_classes: int
    mean: tuple[float, ...]
    std: tuple[float, ...]
    source: str  # "cache" | "mirror-npz" | "mirror-archive" | "download" | "derived"


def available() -> list[str]:
    return sorted(SPECS)


def cache_dir(root: str | Path | None = None) -> Path:
    return Path(root or os.environ.get(DATA_DIR_ENV) or Path.home() / ".cache" / "lowbw" / "data").expanduser()


def _spec(name: str) -> DatasetSpec:
    if name not in SPECS:
        raise ValueError(f"dataset={name!r} is unknown; allowed: {', '.join(available())}")
    return SPECS[name]


def _check(spec: DatasetSpec, arrays: Arrays, origin: str) -> Arrays:
    """Validate shapes, dtypes and label range; give MNIST-style images their channel axis."""
    out = {}
    for k in _KEYS:
        if k not in arrays:
            raise FormatError(f"{origin}: missing array {k!r}")
        a = np.asarray(arrays[k])
        if a.dtype != np.uint8:
            if k.startswith("y") and np.issubdtype(a.dtype, np.integer) and a.size and a.max() < 256 and a.min() >= 0:
                a = a.astype(np.uint8)
            else:
                raise FormatError(f"{origin}: {k} has dtype {a.dtype}, expected uint8")
        if k.startswith("x") and a.ndim == 3:
            a = a[..., None]
        out[k] = a
    for split, n in (("train", spec.train_size), ("test", spec.test_size)):
        x, y = out[f"x_{split}"], out[f"y_{split}"]
        if x.shape != (n, *spec.image_shape) or y.shape != (n,):
            raise FormatError(f"{origin}: {split} has shapes {x.shape}/{y.shape}, expected "
                              f"{(n, *spec.image_shape)}/{(n,)}")
        if y.size and int(y.max()) >= spec.num_classes:
            raise FormatError(f"{origin}: label {int(y.max())} >= num_classes={spec.num_classes}")
    return out


def _readable(fd: int) -> None:
    """mkstemp makes files 0600; the cache is shared like run files: 0666 minus the umask."""
    umask = os.umask(0)
    os.umask(umask)
    os.fchmod(fd, 0o666 & ~umask)


def _write_cache(entry: Path, arrays: Arrays, source: str) -> None:
    """Write ``.npy`` files then ``manifest.json`` (atomic), so a half-written cache is never used.

    The manifest records each file's sha256 and size: loads verify them (see :func:`verify_cache`)."""
    entry.mkdir(parents=True, exist_ok=True)
    sums = {}
    for k in _KEYS:
        fd, tmp = tempfile.mkstemp(prefix=f".{k}.", suffix=".npy", dir=entry)
        _readable(fd)
        with os.fdopen(fd, "wb") as f:
            np.save(f, arrays[k])
        sums[k] = {"sha256": file_digest(tmp, "sha256"), "bytes": os.path.getsize(tmp)}
        os.replace(tmp, entry / f"{k}.npy")
    manifest = {
        "source": source,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "arrays": {k: {"shape": list(arrays[k].shape), "dtype": str(arrays[k].dtype), **sums[k]} for k in _KEYS},
    }
    fd, tmp = tempfile.mkstemp(prefix=".manifest.", dir=entry)
    _readable(fd)
    with os.fdopen(fd, "w") as f:
        json.dump(manifest, f, indent=2)
    os.replace(tmp, entry / "manifest.json")


# files verified in this process, keyed by (path, size, mtime_ns, inode): each is hashed once per process
_VERIFIED: set[tuple[str, int, int, int]] = set()


def verify_cache(entry: Path, force: bool = False) -> list[str]:
    """Problems of cache entry ``entry`` (empty list = every file matches its recorded sha256 and size).

    Each file is hashed once per process (``force``: again), keyed by its size, mtime and inode."""
    problems = []
    try:
        meta = json.loads((entry / "manifest.json").read_text())["arrays"]
    except (OSError, ValueError, KeyError) as e:
        return [f"{entry / 'manifest.json'}: unreadable ({e})"]
    for k in _KEYS:
        p = entry / f"{k}.npy"
        want = (meta.get(k) or {}).get("sha256")
        if not want:
            problems.append(f"{p}: no checksum recorded (cache written by an older lowbw)")
            continue
        try:
            st = p.stat()
        except OSError as e:
            problems.append(f"{p}: {e.strerror}")
            continue
        key = (str(p), st.st_size, st.st_mtime_ns, st.st_ino)
        if key in _VERIFIED and not force:
            continue
        if st.st_size != meta[k].get("bytes", st.st_size):
            problems.append(f"{p}: {st.st_size} bytes, the cache recorded {meta[k]['bytes']}")
            continue
        got = file_digest(p, "sha256")
        if got != want:
            problems.append(f"{p}: sha256 {got[:16]}... does not match the recorded {want[:16]}... (corrupt)")
            continue
        _VERIFIED.add(key)
    return problems


def _read_cache(entry: Path) -> Arrays | None:
    """The cached arrays, or None when the entry is missing, damaged or fails verification (it is then
    rebuilt from the sources; a corrupt one is reported on stderr)."""
    manifest = entry / "manifest.json"
    if not manifest.is_file():
        return None
    problems = verify_cache(entry)
    if problems:
        import sys

        print(f"lowbw data: cache entry {entry} rejected, rebuilding it from the sources: {problems[0]}",
              file=sys.stderr)
        return None
    try:
        meta = json.loads(manifest.read_text())["arrays"]
        arrays = {k: np.load(entry / f"{k}.npy", mmap_mode="c") for k in _KEYS}
    except (OSError, ValueError, KeyError):
        return None  # damaged cache: rebuilt from the sources
    if any(list(arrays[k].shape) != meta[k]["shape"] for k in _KEYS):
        return None
    return arrays


def _cache_and_reread(entry: Path, arrays: Arrays, source: str) -> tuple[Arrays, str]:
    """Write the cache, then serve from it: first and later loads return the same (mmap'd) arrays."""
    _write_cache(entry, arrays, source)
    cached = _read_cache(entry)
    if cached is None:
        raise OSError(f"cache entry {entry} could not be read back after writing it")
    return cached, source


def _sha256_from_sums(mirror_dir_file: Path | None, filename: str) -> str | None:
    if mirror_dir_file is None or not mirror_dir_file.is_file():
        return None
    for line in mirror_dir_file.read_text().splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].lstrip("*") == filename:
            return parts[0]
    return None


def _parse_archives(spec: DatasetSpec, directory: Path) -> Arrays:
    if spec.format == "cifar":
        return parse_cifar_tar(directory / spec.files[0].filename, label_key=spec.label_key)
    if spec.format == "idx":
        return parse_idx_gz(directory)
    raise ValueError(f"dataset {spec.name}: format {spec.format!r} has no archive parser")


def _from_mirror(spec: DatasetSpec, mirror: str, workdir: Path) -> tuple[Arrays, str] | None:
    npz_name = f"{spec.name}.npz"
    npz = mirror_get(mirror, npz_name, workdir)
    if npz is not None:
        sums = mirror_get(mirror, "SHA256SUMS", workdir)
        expected = spec.npz_sha256 or _sha256_from_sums(sums, npz_name)
        if expected is None:
            raise ChecksumError(f"{npz}: no sha256 to verify it against (not pinned for {spec.name} and "
                                f"not listed in the mirror's SHA256SUMS); refusing an unverified file")
        verify(npz, expected, "sha256")
        with np.load(npz) as z:
            return {k: z[k] for k in _KEYS}, "mirror-npz"
    if not spec.files:
        return None
    local = []
    for f in spec.files:
        p = mirror_get(mirror, f.filename, workdir)
        if p is None:
            return None
        verify(p, f.md5, "md5")
        local.append(p)
    if len({p.parent for p in local}) != 1:
        raise FormatError(f"mirror {mirror}: archive files for {spec.name} are not in one directory")
    return _parse_archives(spec, local[0].parent), "mirror-archive"


def _from_download(spec: DatasetSpec, raw: Path) -> Arrays:
    for f in spec.files:
        target = raw / f.filename
        if target.is_file():
            try:
                verify(target, f.md5, "md5")
                continue
            except ChecksumError:
                target.unlink()
        download(f.urls, target, md5=f.md5)
    return _parse_archives(spec, raw)


def _derive_cifar10_small(parent: Arrays) -> Arrays:
    """shared/data/README recipe: default_rng(0); per class 1000 train draws, then per class 200 test draws."""
    rng = np.random.default_rng(0)
    ytr, yte = np.asarray(parent["y_train"]), np.asarray(parent["y_test"])
    tr = [rng.choice(np.flatnonzero(ytr == c), 1000, replace=False) for c in range(10)]
    te = [rng.choice(np.flatnonzero(yte == c), 200, replace=False) for c in range(10)]
    tri, tei = np.sort(np.concatenate(tr)), np.sort(np.concatenate(te))
    return {"x_train": np.asarray(parent["x_train"])[tri], "y_train": ytr[tri],
            "x_test": np.asarray(parent["x_test"])[tei], "y_test": yte[tei]}


def load_arrays(name: str, root: str | Path | None = None, mirror: str | None = None,
                download_ok: bool = True) -> tuple[Arrays, str]:
    """Verified uint8 arrays for ``name`` and where they came from. Converts once into the cache."""
    spec = _spec(name)
    entry = cache_dir(root) / name
    cached = _read_cache(entry)
    if cached is not None:
        return _check(spec, cached, str(entry)), "cache"
    if spec.format == "derived":
        assert spec.derived_from is not None
        parent, _ = load_arrays(spec.derived_from, root, mirror, download_ok)
        return _cache_and_reread(entry, _check(spec, _derive_cifar10_small(parent), f"derived {name}"),
                                 "derived")
    mirror = mirror if mirror is not None else os.environ.get(MIRROR_ENV)
    entry.mkdir(parents=True, exist_ok=True)
    got = None
    if mirror:
        with tempfile.TemporaryDirectory(dir=entry) as work:
            got = _from_mirror(spec, mirror, Path(work))
            if got is not None:
                return _cache_and_reread(entry, _check(spec, got[0], f"mirror {mirror}"), got[1])
    if not download_ok:
        raise FileNotFoundError(f"dataset {name}: not in the cache {entry}"
                                + (f" nor the mirror {mirror}" if mirror else "")
                                + f", and downloading is disabled (set {MIRROR_ENV} or allow downloads)")
    return _cache_and_reread(entry, _check(spec, _from_download(spec, entry / "raw"), f"download of {name}"),
                             "download")


def load(name: str, root: str | Path | None = None, mirror: str | None = None,
         download_ok: bool = True) -> Dataset:
    """Load a dataset as tensors (see ``Dataset``). ``name`` in ``available()``.

    Sources in order: the cache (``root`` / ``$LOWBW_DATA_DIR``), the mirror (``mirror`` /
    ``$LOWBW_DATA_MIRROR``), the official URLs. Later loads memory-map the cache (well under a second).
    """
    import torch  # lazy: keeps `lowbw --help` and `lowbw data verify` free of torch

    spec = _spec(name)
    arrays, source = load_arrays(name, root, mirror, download_ok)
    t = {k: torch.from_numpy(np.asarray(arrays[k])) for k in _KEYS}
    return Dataset(name=name, x_train=t["x_train"], y_train=t["y_train"].long(), x_test=t["x_test"],
                   y_test=t["y_test"].long(), num_classes=spec.num_classes, mean=spec.mean, std=spec.std,
                   source=source)
