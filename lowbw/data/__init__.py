"""Datasets: the original archives (download + published checksums) or a local mirror, cached as uint8.

>>> from lowbw.data import load
>>> ds = load("cifar10")          # x_train uint8 [50000, 32, 32, 3], y_train int64 [50000]
"""

from lowbw.data.fetch import MIRROR_ENV, ChecksumError, DownloadError
from lowbw.data.loader import DATA_DIR_ENV, Dataset, available, cache_dir, load, load_arrays
from lowbw.data.parse import FormatError
from lowbw.data.specs import SPECS, ArchiveFile, DatasetSpec

__all__ = [
    "load", "load_arrays", "available", "cache_dir", "Dataset", "SPECS", "DatasetSpec", "ArchiveFile",
    "ChecksumError", "DownloadError", "FormatError", "MIRROR_ENV", "DATA_DIR_ENV",
]
