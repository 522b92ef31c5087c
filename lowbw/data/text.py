"""Text corpora for character-level language models: the verified file from the cache, a mirror, or its URL.

A corpus is one plain-text file, pinned by its published md5. ``load_text(name)`` returns the whole text as
character ids over its sorted distinct characters (the vocabulary), and the split point: the first
``train_fraction`` of the characters train, the rest validate (nanoGPT's ``shakespeare_char`` convention).

Cache layout: ``<cache>/<name>/<filename>`` (``$LOWBW_DATA_DIR``), verified against the md5 once per process.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from lowbw.data.fetch import MIRROR_ENV, copy_into, download, file_digest, mirror_get, verify
from lowbw.data.loader import cache_dir

if TYPE_CHECKING:  # annotations only: the module loads without torch
    import torch

__all__ = ["TextSpec", "TEXT_SPECS", "TextCorpus", "load_text", "text_available"]


@dataclass(frozen=True)
class TextSpec:
    """A text corpus: its file, the published checksum, where to download it, and its known shape."""

    name: str
    filename: str  # the file's name on disk and in a mirror
    md5: str  # as published (nanoGPT/char-rnn); checked on every first use in a process
    urls: tuple[str, ...]  # tried in order
    chars: int  # length of the text in characters (checked after loading)
    vocab_size: int  # distinct characters (checked after loading)
    train_fraction: float = 0.9  # first 90% train, last 10% validation (nanoGPT)
    pretty: str = ""  # its name in the paper (lowbw.train.workload_specs.pretty_dataset; "": its name)


TEXT_SPECS: dict[str, TextSpec] = {
    "shakespeare": TextSpec(
        name="shakespeare",
        pretty="Tiny Shakespeare",
        filename="tinyshakespeare.txt",
        md5="6fb458f1232090904fb40fe944165e91",
        urls=("https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt",),
        chars=1_115_394,
        vocab_size=65,
    ),
}


@dataclass(frozen=True)
class TextCorpus:
    """A whole corpus as character ids. ``ids`` is ``uint8 [chars]`` (vocabularies of at most 256)."""

    name: str
    ids: torch.Tensor  # uint8 [chars]: index into ``vocab``
    vocab: str  # the sorted distinct characters; id i is vocab[i]
    split: int  # ids[:split] train, ids[split:] validate
    source: str  # "cache" | "mirror" | "download"

    @property
    def vocab_size(self) -> int:
        return len(self.vocab)

    def decode(self, ids) -> str:
        return "".join(self.vocab[int(i)] for i in ids)


def text_available() -> list[str]:
    return sorted(TEXT_SPECS)


_VERIFIED: set[tuple[str, int, int]] = set()  # (path, size, mtime_ns) verified in this process


def _fetch(spec: TextSpec, root: str | Path | None, mirror: str | None, download_ok: bool) -> tuple[Path, str]:
    """The verified corpus file in the cache, copied from a mirror or downloaded on first use."""
    entry = cache_dir(root) / spec.name
    path = entry / spec.filename
    if path.is_file():
        st = path.stat()
        key = (str(path), st.st_size, st.st_mtime_ns)
        if key in _VERIFIED or file_digest(path, "md5") == spec.md5:
            _VERIFIED.add(key)
            return path, "cache"
        path.unlink()  # corrupt: fetched again below
    entry.mkdir(parents=True, exist_ok=True)
    mirror = mirror if mirror is not None else os.environ.get(MIRROR_ENV)
    if mirror:
        with tempfile.TemporaryDirectory(dir=entry) as work:
            got = mirror_get(mirror, spec.filename, work)
            if got is not None:
                verify(got, spec.md5, "md5")
                copy_into(got, path)
                return path, "mirror"
    if not download_ok:
        raise FileNotFoundError(f"dataset {spec.name}: not in the cache {entry}"
                                + (f" nor the mirror {mirror}" if mirror else "")
                                + f", and downloading is disabled (set {MIRROR_ENV} or allow downloads)")
    download(spec.urls, path, md5=spec.md5)
    return path, "download"


def load_text(name: str, root: str | Path | None = None, mirror: str | None = None,
              download_ok: bool = True) -> TextCorpus:
    """Corpus ``name`` (``text_available()``) as character ids; sources in the order cache, mirror, URL."""
    if name not in TEXT_SPECS:
        raise ValueError(f"dataset={name!r} is not a text corpus; allowed: {', '.join(text_available())}")
    spec = TEXT_SPECS[name]
    path, source = _fetch(spec, root, mirror, download_ok)
    text = path.read_text(encoding="utf-8")
    vocab = "".join(sorted(set(text)))
    if len(text) != spec.chars or len(vocab) != spec.vocab_size or len(vocab) > 256:
        raise ValueError(f"{path}: {len(text)} characters over {len(vocab)} distinct, expected {spec.chars} "
                         f"over {spec.vocab_size}")
    import torch  # lazy: `lowbw data` and `lowbw --help` import this module for its specs, not its tensors

    lut = {c: i for i, c in enumerate(vocab)}
    ids = torch.tensor(bytearray(lut[c] for c in text), dtype=torch.uint8)
    return TextCorpus(name=name, ids=ids, vocab=vocab, split=int(len(text) * spec.train_fraction),
                      source=source)
