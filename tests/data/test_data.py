"""Dataset loaders: every source path (download, mirror archive, mirror npz, cache) on tiny fake archives,
checksum failures, truncated files, and the real mirror files when present."""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import http.server
import io
import pickle
import struct
import tarfile
import threading
from pathlib import Path

import numpy as np
import pytest

from lowbw.data import SPECS, ArchiveFile, ChecksumError, DownloadError, load, load_arrays
from lowbw.data.specs import DatasetSpec
from tests.conftest import real_mirror


def md5(p: Path) -> str:
    return hashlib.md5(p.read_bytes()).hexdigest()


def make_cifar_tar(path: Path, n_train_per_batch=4, n_test=3, seed=0) -> dict[str, np.ndarray]:
    """A tiny archive with the real layout: cifar-10-batches-py/data_batch_1..5 + test_batch (pickles)."""
    rng = np.random.default_rng(seed)
    xs, ys = [], []
    with tarfile.open(path, "w:gz") as tar:
        for name, n in [(f"data_batch_{i}", n_train_per_batch) for i in range(1, 6)] + [("test_batch", n_test)]:
            data = rng.integers(0, 256, (n, 3072), dtype=np.uint8)
            labels = rng.integers(0, 10, n).tolist()
            blob = pickle.dumps({b"data": data, b"labels": labels, b"batch_label": name.encode()})
            info = tarfile.TarInfo(f"cifar-10-batches-py/{name}")
            info.size = len(blob)
            tar.addfile(info, io.BytesIO(blob))
            xs.append(data)
            ys.append(labels)
    x_tr = np.concatenate(xs[:5]).reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)
    x_te = xs[5].reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)
    return {"x_train": x_tr, "y_train": np.concatenate(ys[:5]), "x_test": x_te, "y_test": np.array(ys[5])}


def idx_bytes(a: np.ndarray) -> bytes:
    return struct.pack(">HBB", 0, 8, a.ndim) + struct.pack(f">{a.ndim}I", *a.shape) + a.tobytes()


def make_idx_dir(d: Path, n_train=5, n_test=2, seed=1) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    arrays = {
        "train-images-idx3-ubyte.gz": rng.integers(0, 256, (n_train, 28, 28), dtype=np.uint8),
        "train-labels-idx1-ubyte.gz": rng.integers(0, 10, n_train, dtype=np.uint8),
        "t10k-images-idx3-ubyte.gz": rng.integers(0, 256, (n_test, 28, 28), dtype=np.uint8),
        "t10k-labels-idx1-ubyte.gz": rng.integers(0, 10, n_test, dtype=np.uint8),
    }
    d.mkdir(parents=True, exist_ok=True)
    for name, a in arrays.items():
        (d / name).write_bytes(gzip.compress(idx_bytes(a), mtime=0))
    return arrays


@pytest.fixture
def fake_cifar(tmp_path, monkeypatch):
    """A fake 'cifar10' spec (20 train / 3 test images) whose archive sits in tmp/src."""
    src = tmp_path / "src"
    src.mkdir()
    expected = make_cifar_tar(src / "cifar-10-python.tar.gz")
    spec = dataclasses.replace(
        SPECS["cifar10"], train_size=20, test_size=3, npz_sha256=None,
        files=(ArchiveFile("cifar-10-python.tar.gz", md5(src / "cifar-10-python.tar.gz"),
                           ("http://127.0.0.1:9/unused",)),),
    )
    monkeypatch.setitem(SPECS, "cifar10", spec)
    monkeypatch.delenv("LOWBW_DATA_MIRROR", raising=False)
    return src, spec, expected


@pytest.fixture
def http_dir():
    """Serve a directory on 127.0.0.1 (a real HTTP download path). Yields (set_root, base_url)."""
    state = {"root": Path(".")}

    class Handler(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *a, **k):
            super().__init__(*a, directory=str(state["root"]), **k)

        def log_message(self, *a):
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    th = threading.Thread(target=srv.serve_forever, daemon=True)
    th.start()
    yield (lambda p: state.__setitem__("root", p)), f"http://127.0.0.1:{srv.server_address[1]}/"
    srv.shutdown()
    srv.server_close()


def assert_same(ds, expected):
    assert ds.x_train.dtype.is_floating_point is False
    np.testing.assert_array_equal(ds.x_train.numpy(), expected["x_train"])
    np.testing.assert_array_equal(ds.y_train.numpy(), expected["y_train"])
    np.testing.assert_array_equal(ds.x_test.numpy(), expected["x_test"])
    np.testing.assert_array_equal(ds.y_test.numpy(), expected["y_test"])


def test_download_verifies_converts_and_caches(fake_cifar, data_cache, http_dir):
    src, spec, expected = fake_cifar
    set_root, base = http_dir
    set_root(src)
    SPECS["cifar10"] = dataclasses.replace(spec, files=(dataclasses.replace(
        spec.files[0], urls=(base + "missing.tar.gz", base + "cifar-10-python.tar.gz")),))
    ds = load("cifar10")  # first URL 404s, second works
    assert ds.source == "download"
    assert_same(ds, expected)
    assert ds.x_train.shape == (20, 32, 32, 3) and ds.y_train.dtype.is_signed
    assert (data_cache / "cifar10" / "manifest.json").is_file()
    # the server is gone for the second load: it must come from the cache
    set_root(src / "nonexistent")
    assert load("cifar10").source == "cache"


def test_download_with_bad_checksum_is_named_and_not_cached(fake_cifar, data_cache, http_dir):
    src, spec, _ = fake_cifar
    set_root, base = http_dir
    set_root(src)
    wrong = "0" * 32
    SPECS["cifar10"] = dataclasses.replace(spec, files=(ArchiveFile(
        "cifar-10-python.tar.gz", wrong, (base + "cifar-10-python.tar.gz",)),))
    with pytest.raises(ChecksumError) as e:
        load("cifar10")
    msg = str(e.value)
    assert "cifar-10-python.tar.gz" in msg and wrong in msg and md5(src / "cifar-10-python.tar.gz") in msg
    assert not (data_cache / "cifar10" / "manifest.json").exists()
    assert not list((data_cache / "cifar10").rglob("*.tar.gz"))


def test_all_urls_failing_is_a_download_error(fake_cifar, data_cache):
    with pytest.raises(DownloadError, match="cifar-10-python.tar.gz"):
        load("cifar10")


def test_mirror_with_original_archive(fake_cifar, data_cache, monkeypatch):
    src, _, expected = fake_cifar
    monkeypatch.setenv("LOWBW_DATA_MIRROR", str(src))
    ds = load("cifar10")
    assert ds.source == "mirror-archive"
    assert_same(ds, expected)


def test_truncated_mirror_archive_fails_checksum(fake_cifar, data_cache, tmp_path, monkeypatch):
    src, _, _ = fake_cifar
    bad = tmp_path / "bad"
    bad.mkdir()
    blob = (src / "cifar-10-python.tar.gz").read_bytes()
    (bad / "cifar-10-python.tar.gz").write_bytes(blob[: len(blob) // 2])
    monkeypatch.setenv("LOWBW_DATA_MIRROR", str(bad))
    with pytest.raises(ChecksumError, match="md5 mismatch"):
        load("cifar10")
    assert not (data_cache / "cifar10" / "manifest.json").exists()


def test_mirror_npz_with_sha256sums_over_http(fake_cifar, data_cache, tmp_path, http_dir, monkeypatch):
    _, _, expected = fake_cifar
    m = tmp_path / "npzmirror"
    m.mkdir()
    np.savez(m / "cifar10.npz", **expected)
    digest = hashlib.sha256((m / "cifar10.npz").read_bytes()).hexdigest()
    (m / "SHA256SUMS").write_text(f"{digest}  cifar10.npz\n")
    set_root, base = http_dir
    set_root(m)
    monkeypatch.setenv("LOWBW_DATA_MIRROR", base)
    ds = load("cifar10")
    assert ds.source == "mirror-npz"
    assert_same(ds, expected)


def test_mirror_npz_without_any_checksum_is_refused(fake_cifar, data_cache, tmp_path, monkeypatch):
    _, _, expected = fake_cifar
    m = tmp_path / "npzmirror"
    m.mkdir()
    np.savez(m / "cifar10.npz", **expected)
    monkeypatch.setenv("LOWBW_DATA_MIRROR", str(m))
    with pytest.raises(ChecksumError, match="no sha256"):
        load("cifar10")


def test_mirror_npz_wrong_sha256(fake_cifar, data_cache, tmp_path, monkeypatch):
    _, spec, expected = fake_cifar
    m = tmp_path / "npzmirror"
    m.mkdir()
    np.savez(m / "cifar10.npz", **expected)
    SPECS["cifar10"] = dataclasses.replace(spec, npz_sha256="f" * 64)
    monkeypatch.setenv("LOWBW_DATA_MIRROR", str(m))
    with pytest.raises(ChecksumError) as e:
        load("cifar10")
    assert "f" * 64 in str(e.value) and "cifar10.npz" in str(e.value)


def test_idx_archives_parse_with_channel_axis(tmp_path, data_cache, monkeypatch):
    src = tmp_path / "idx"
    arrays = make_idx_dir(src)
    spec = dataclasses.replace(SPECS["mnist"], train_size=5, test_size=2, npz_sha256=None, files=tuple(
        ArchiveFile(f, md5(src / f), ()) for f in arrays))
    monkeypatch.setitem(SPECS, "mnist", spec)
    monkeypatch.setenv("LOWBW_DATA_MIRROR", str(src))
    ds = load("mnist")
    assert ds.x_train.shape == (5, 28, 28, 1)
    np.testing.assert_array_equal(ds.x_train[..., 0].numpy(), arrays["train-images-idx3-ubyte.gz"])
    np.testing.assert_array_equal(ds.y_test.numpy(), arrays["t10k-labels-idx1-ubyte.gz"])


def test_truncated_idx_payload_is_a_format_error(tmp_path, data_cache, monkeypatch):
    from lowbw.data import FormatError

    src = tmp_path / "idx"
    arrays = make_idx_dir(src)
    raw = idx_bytes(arrays["train-images-idx3-ubyte.gz"])[:-100]
    (src / "train-images-idx3-ubyte.gz").write_bytes(gzip.compress(raw, mtime=0))
    spec = dataclasses.replace(SPECS["mnist"], train_size=5, test_size=2, npz_sha256=None, files=tuple(
        ArchiveFile(f, md5(src / f), ()) for f in arrays))  # checksums match the truncated file
    monkeypatch.setitem(SPECS, "mnist", spec)
    monkeypatch.setenv("LOWBW_DATA_MIRROR", str(src))
    with pytest.raises(FormatError, match="expected 3920 bytes"):
        load("mnist")


def test_damaged_cache_is_rebuilt(fake_cifar, data_cache, monkeypatch):
    src, _, expected = fake_cifar
    monkeypatch.setenv("LOWBW_DATA_MIRROR", str(src))
    load("cifar10")
    (data_cache / "cifar10" / "x_train.npy").write_bytes(b"garbage")
    ds = load("cifar10")
    assert ds.source == "mirror-archive"
    assert_same(ds, expected)


def test_unknown_dataset_names_the_value():
    with pytest.raises(ValueError, match=r"dataset='imagenet22k'.*allowed: .*cifar10"):
        load("imagenet22k")


def test_no_source_and_downloads_disabled(fake_cifar, data_cache):
    with pytest.raises(FileNotFoundError, match="downloading is disabled"):
        load_arrays("cifar10", download_ok=False)


def test_spec_md5s_are_the_published_ones():
    assert SPECS["cifar10"].files[0].md5 == "c58f30108f718f92721af3b95e74349a"
    mn = {f.filename: f.md5 for f in SPECS["mnist"].files}
    assert mn["t10k-images-idx3-ubyte.gz"] == "9fb629c4189551a2d022fa330f9573f3"
    assert isinstance(SPECS["cifar100"], DatasetSpec) and SPECS["cifar100"].label_key == "fine_labels"


# ---- the real files (exact MNIST and CIFAR-10), when a mirror is present --------------------------------
MIRROR = real_mirror()
needs_mirror = pytest.mark.skipif(MIRROR is None, reason="no real dataset mirror (set LOWBW_DATA_MIRROR)")


@pytest.fixture(scope="module")
def real_cache(tmp_path_factory):
    return tmp_path_factory.mktemp("realcache")


@needs_mirror
def test_real_mnist(real_cache):
    ds = load("mnist", root=real_cache, mirror=MIRROR)
    assert ds.x_train.shape == (60000, 28, 28, 1) and ds.x_test.shape == (10000, 28, 28, 1)
    assert ds.y_train.bincount().tolist() == [5923, 6742, 5958, 6131, 5842, 5421, 5918, 6265, 5851, 5949]
    assert ds.y_test.bincount().tolist() == [980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009]


def _mapped_file(address: int) -> str:
    """The file mapped at ``address`` in this process ("" if none), from /proc/self/maps."""
    for line in Path("/proc/self/maps").read_text().splitlines():
        fields = line.split(maxsplit=5)
        lo, hi = (int(x, 16) for x in fields[0].split("-"))
        if lo <= address < hi:
            return fields[5].strip() if len(fields) > 5 else ""
    return ""


@needs_mirror
@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="reads /proc/self/maps (Linux)")
def test_real_cifar10_exact_pixels_and_mapped_reload(real_cache):
    ds = load("cifar10", root=real_cache, mirror=MIRROR)
    assert ds.x_train.shape == (50000, 32, 32, 3) and ds.x_train.dtype.itemsize == 1
    assert ds.y_train.bincount().tolist() == [5000] * 10 and ds.y_test.bincount().tolist() == [1000] * 10
    # sha256 of the raw pixel bytes as recorded in shared/data/README (exact original CIFAR-10)
    assert hashlib.sha256(ds.x_train.numpy().tobytes()).hexdigest().startswith("47af8b02cfcfb6cd")
    assert hashlib.sha256(ds.x_test.numpy().tobytes()).hexdigest().startswith("f9b1e2130bab680d")
    again = load("cifar10", root=real_cache, mirror=MIRROR)
    # a reload is fast because it decodes nothing: its pixels are the cache file itself, memory-mapped
    assert again.source == "cache" and _mapped_file(again.x_train.data_ptr()).endswith("/cifar10/x_train.npy")
    small = load("cifar10_small", root=real_cache, mirror=MIRROR)
    assert small.x_train.shape == (10000, 32, 32, 3) and small.y_test.bincount().tolist() == [200] * 10
