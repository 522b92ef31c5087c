"""What each dataset is: its original archives, their published MD5s, and the pinned mirror files.

Sources: CIFAR-10/100 (Krizhevsky 2009, cs.toronto.edu/~kriz/cifar.html), MNIST (LeCun et al. 1998,
idx ``.gz`` files; MD5s as published and used by torchvision), Fashion-MNIST (Xiao et al. 2017).
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["ArchiveFile", "DatasetSpec", "SPECS"]


@dataclass(frozen=True)
class ArchiveFile:
    """One original file: name on disk, md5 as published, and the URLs to try in order."""

    filename: str
    md5: str
    urls: tuple[str, ...]


@dataclass(frozen=True)
class DatasetSpec:
    """A dataset: how to fetch and parse it, and what a correct copy looks like.

    ``npz_sha256`` pins the sha256 of a pre-converted ``<name>.npz`` that a mirror may hold in place of
    the archives (arrays ``x_train, y_train, x_test, y_test``; uint8, channel-last).
    ``train_size``/``test_size``/``image_shape`` are checked after every load.
    """

    name: str
    format: str  # "cifar" | "idx" | "derived"
    files: tuple[ArchiveFile, ...]
    num_classes: int
    image_shape: tuple[int, ...]  # (H, W, C)
    train_size: int
    test_size: int
    npz_sha256: str | None = None
    label_key: str = "labels"  # CIFAR-100: "fine_labels"
    pretty: str = ""  # its name in the paper (lowbw.train.workload_specs.pretty_dataset; "": its name)
    derived_from: str | None = None
    mean: tuple[float, ...] = field(default=())
    std: tuple[float, ...] = field(default=())


_TORONTO = "https://www.cs.toronto.edu/~kriz/"
_MNIST_URLS = ("https://ossci-datasets.s3.amazonaws.com/mnist/", "http://yann.lecun.com/exdb/mnist/")
_FASHION = ("http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/",)


def _idx_files(md5s: dict[str, str], bases: tuple[str, ...]) -> tuple[ArchiveFile, ...]:
    return tuple(ArchiveFile(f, m, tuple(b + f for b in bases)) for f, m in md5s.items())


SPECS: dict[str, DatasetSpec] = {
    "cifar10": DatasetSpec(
        name="cifar10",
        pretty="CIFAR-10",
        format="cifar",
        files=(ArchiveFile("cifar-10-python.tar.gz", "c58f30108f718f92721af3b95e74349a",
                           (_TORONTO + "cifar-10-python.tar.gz",)),),
        num_classes=10,
        image_shape=(32, 32, 3),
        train_size=50000,
        test_size=10000,
        npz_sha256="61286bb20924259c59bea42e16b46d46fab479b43fb83d4830cfc43bc422ede9",
        mean=(0.4914, 0.4822, 0.4465),
        std=(0.2470, 0.2435, 0.2616),
    ),
    "cifar100": DatasetSpec(
        name="cifar100",
        pretty="CIFAR-100",
        format="cifar",
        files=(ArchiveFile("cifar-100-python.tar.gz", "eb9058c3a382ffc7106e4002c42a8d85",
                           (_TORONTO + "cifar-100-python.tar.gz",)),),
        num_classes=100,
        image_shape=(32, 32, 3),
        train_size=50000,
        test_size=10000,
        label_key="fine_labels",
        mean=(0.5071, 0.4865, 0.4409),
        std=(0.2673, 0.2564, 0.2762),
    ),
    "mnist": DatasetSpec(
        name="mnist",
        pretty="MNIST",
        format="idx",
        files=_idx_files({
            "train-images-idx3-ubyte.gz": "f68b3c2dcbeaaa9fbdd348bbdeb94873",
            "train-labels-idx1-ubyte.gz": "d53e105ee54ea40749a09fcbcd1e9432",
            "t10k-images-idx3-ubyte.gz": "9fb629c4189551a2d022fa330f9573f3",
            "t10k-labels-idx1-ubyte.gz": "ec29112dd5afa0611ce80d1b7f02629c",
        }, _MNIST_URLS),
        num_classes=10,
        image_shape=(28, 28, 1),
        train_size=60000,
        test_size=10000,
        npz_sha256="06af5dfe73b70e3bc1c36439982b18a8d76803db9b544f6fdf838a37fbb01b64",
        mean=(0.1307,),
        std=(0.3081,),
    ),
    "fashion_mnist": DatasetSpec(
        name="fashion_mnist",
        pretty="Fashion-MNIST",
        format="idx",
        files=_idx_files({
            "train-images-idx3-ubyte.gz": "8d4fb7e6c68d591d4c3dfef9ec88bf0d",
            "train-labels-idx1-ubyte.gz": "25c81989df183df01b3e8a0aad5dffbe",
            "t10k-images-idx3-ubyte.gz": "bef4ecab320f06d8554ea6380940ec79",
            "t10k-labels-idx1-ubyte.gz": "bb300cfdad3c16e7a12a480ee83cd310",
        }, _FASHION),
        num_classes=10,
        image_shape=(28, 28, 1),
        train_size=60000,
        test_size=10000,
        mean=(0.2860,),
        std=(0.3530,),
    ),
    # Balanced 10k/2k subset of CIFAR-10 (recipe of shared/data/README: rng = default_rng(0); per class
    # 1000 train then per class 200 test indices, sorted). Derived locally from the verified cifar10.
    "cifar10_small": DatasetSpec(
        name="cifar10_small",
        pretty="CIFAR-10 (small)",
        format="derived",
        files=(),
        num_classes=10,
        image_shape=(32, 32, 3),
        train_size=10000,
        test_size=2000,
        derived_from="cifar10",
        mean=(0.4914, 0.4822, 0.4465),
        std=(0.2470, 0.2435, 0.2616),
    ),
}
