"""Getting bytes onto disk safely: checksums, downloads, and a mirror (directory or URL).

A file is trusted only after its checksum matches; a bad file is reported with both checksums and is
never cached. Downloads stream into a temp file next to the target and are renamed into place only
after verification.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

__all__ = ["ChecksumError", "DownloadError", "file_digest", "verify", "download", "mirror_get", "MIRROR_ENV"]

MIRROR_ENV = "LOWBW_DATA_MIRROR"
_CHUNK = 1 << 20


class ChecksumError(ValueError):
    """A file whose md5/sha256 is not the published one."""


class DownloadError(OSError):
    """Every URL for a file failed (network error, HTTP error, or truncated transfer)."""


def file_digest(path: str | Path, algorithm: str) -> str:
    """Hex digest of a file, read in 1 MiB chunks."""
    h = hashlib.new(algorithm)
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def verify(path: str | Path, expected: str, algorithm: str, label: str | None = None) -> None:
    """Raise ``ChecksumError`` naming the file and both checksums unless ``path`` hashes to ``expected``."""
    actual = file_digest(path, algorithm)
    if actual != expected.lower():
        raise ChecksumError(
            f"{label or path}: {algorithm} mismatch: expected {expected.lower()}, got {actual} "
            f"(file {path}, {os.path.getsize(path)} bytes). The file is corrupt or truncated; it was not used."
        )


def download(urls: tuple[str, ...] | list[str], dest: str | Path, md5: str | None = None,
             sha256: str | None = None, timeout_s: float = 60.0, progress: bool = True) -> Path:
    """Fetch the first URL that works into ``dest``; verify before the final rename.

    A checksum mismatch is final (raises ``ChecksumError``: the server serves a wrong file); a network
    error or a short read moves on to the next URL. Raises ``DownloadError`` if all URLs fail.
    """
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    errors: list[str] = []
    for url in urls:
        fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".part", dir=dest.parent)
        try:
            with os.fdopen(fd, "wb") as out, urllib.request.urlopen(url, timeout=timeout_s) as resp:
                total = int(resp.headers.get("Content-Length") or 0)
                bar = _bar(total, f"download {dest.name}") if progress else None
                got = 0
                while chunk := resp.read(_CHUNK):
                    out.write(chunk)
                    got += len(chunk)
                    if bar is not None:
                        bar.update(len(chunk))
                if bar is not None:
                    bar.close()
            if total and got != total:
                raise DownloadError(f"truncated transfer: {got} of {total} bytes")
            if md5:
                verify(tmp, md5, "md5", label=url)
            if sha256:
                verify(tmp, sha256, "sha256", label=url)
            os.replace(tmp, dest)
            return dest
        except ChecksumError:
            raise
        except (urllib.error.URLError, OSError, TimeoutError) as e:
            errors.append(f"{url}: {e}")
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    raise DownloadError(f"could not download {dest.name}: " + "; ".join(errors))


def _bar(total: int, desc: str):
    try:
        from tqdm.auto import tqdm
    except ImportError:  # tqdm is a core dependency, but a download must not fail for a progress bar
        return None
    return tqdm(total=total or None, unit="B", unit_scale=True, desc=desc, leave=False)


def mirror_get(mirror: str, filename: str, workdir: str | Path) -> Path | None:
    """Return a local path to ``filename`` in ``mirror`` (a directory, ``file://`` or ``http(s)://`` URL).

    Directories are read in place (no copy). A URL mirror is fetched into ``workdir`` *without* checksum
    (the caller verifies). Returns ``None`` when the mirror does not have the file.
    """
    parsed = urllib.parse.urlparse(mirror)
    if parsed.scheme in ("", "file"):
        base = Path(urllib.parse.unquote(parsed.path) if parsed.scheme == "file" else mirror).expanduser()
        p = base / filename
        return p if p.is_file() else None
    url = mirror.rstrip("/") + "/" + urllib.parse.quote(filename)
    dest = Path(workdir) / filename
    try:
        return download([url], dest, progress=False)
    except DownloadError:
        return None


def copy_into(src: Path, dest: Path) -> Path:
    """Copy ``src`` to ``dest`` atomically (temp + rename)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", dir=dest.parent)
    os.close(fd)
    try:
        shutil.copyfile(src, tmp)
        os.replace(tmp, dest)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return dest
