"""Parsers for the original archive formats -> uint8 channel-last arrays.

* CIFAR python tarballs (``data_batch_1..5`` + ``test_batch``, or ``train``/``test`` for CIFAR-100):
  pickled dicts with ``data`` (N, 3072) planar RGB rows and ``labels`` / ``fine_labels``.
* MNIST-style idx files (gzip): big-endian magic ``0x0000 08 0D`` (3-D images) / ``... 01`` (labels).
"""

from __future__ import annotations

import gzip
import pickle
import struct
import tarfile
from pathlib import Path

import numpy as np

__all__ = ["parse_cifar_tar", "parse_idx_gz", "Arrays"]

Arrays = dict[str, np.ndarray]


class FormatError(ValueError):
    """An archive whose content is not what its format promises (truncated, wrong magic, ...)."""


def _cifar_rows_to_nhwc(data: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(data.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1))


def parse_cifar_tar(path: str | Path, label_key: str = "labels") -> Arrays:
    """Read a ``cifar-10/100-python.tar.gz`` into ``x_train (N,32,32,3) uint8, y_train (N,) uint8, ...``."""
    train_x, train_y, test_x, test_y = [], [], [], []
    try:
        with tarfile.open(path, "r:gz") as tar:
            members = sorted((m for m in tar.getmembers() if m.isfile()), key=lambda m: m.name)
            for m in members:
                base = m.name.rsplit("/", 1)[-1]
                is_train = base.startswith("data_batch") or base == "train"
                is_test = base in ("test_batch", "test")
                if not (is_train or is_test):
                    continue
                f = tar.extractfile(m)
                assert f is not None
                d = pickle.load(f, encoding="bytes")
                d = {k.decode() if isinstance(k, bytes) else k: v for k, v in d.items()}
                x = _cifar_rows_to_nhwc(np.asarray(d["data"], dtype=np.uint8))
                y = np.asarray(d[label_key], dtype=np.uint8)
                (train_x if is_train else test_x).append(x)
                (train_y if is_train else test_y).append(y)
    except (tarfile.TarError, EOFError, OSError, pickle.UnpicklingError, KeyError) as e:
        raise FormatError(f"{path}: not a readable CIFAR python archive ({type(e).__name__}: {e})") from e
    if not train_x or not test_x:
        raise FormatError(f"{path}: no training or test batches found")
    return {
        "x_train": np.concatenate(train_x), "y_train": np.concatenate(train_y),
        "x_test": np.concatenate(test_x), "y_test": np.concatenate(test_y),
    }


def _read_idx(path: str | Path) -> np.ndarray:
    try:
        with gzip.open(path, "rb") as f:
            raw = f.read()
    except (OSError, EOFError) as e:
        raise FormatError(f"{path}: not a readable gzip file ({e})") from e
    if len(raw) < 8:
        raise FormatError(f"{path}: too short for an idx header")
    zero, dtype_code, ndim = struct.unpack(">HBB", raw[:4])
    if zero != 0 or dtype_code != 0x08:
        raise FormatError(f"{path}: bad idx magic (expected unsigned-byte data)")
    dims = struct.unpack(f">{ndim}I", raw[4 : 4 + 4 * ndim])
    body = np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim)
    if body.size != int(np.prod(dims)):
        raise FormatError(f"{path}: expected {int(np.prod(dims))} bytes of data for shape {dims}, got {body.size}")
    return body.reshape(dims)


def parse_idx_gz(directory: str | Path) -> Arrays:
    """Read the four MNIST-style idx ``.gz`` files in ``directory``; images get a channel axis (N,28,28,1)."""
    d = Path(directory)
    x_train = _read_idx(d / "train-images-idx3-ubyte.gz")[..., None]
    x_test = _read_idx(d / "t10k-images-idx3-ubyte.gz")[..., None]
    return {
        "x_train": np.ascontiguousarray(x_train), "y_train": _read_idx(d / "train-labels-idx1-ubyte.gz"),
        "x_test": np.ascontiguousarray(x_test), "y_test": _read_idx(d / "t10k-labels-idx1-ubyte.gz"),
    }
