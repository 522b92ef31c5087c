"""Keep the host's benchmark measurements in the repository, and find them again for the report.

E1 (collectives and their latency axis), E2 (compressors), E3 (models) and E8 (the simulator against the
testbed, the MLP's and the language model's cells) are timings of one machine: minutes to an hour each, some
needing root and the testbed. A fresh clone must still print them, so ``python -m lowbw store host`` copies
``runs/bench/<name>.json`` into ``paper/measured/host/<name>.json`` and lists each in ``index.json`` with its
provenance (host, CPU, cores, commit, date, the machine's load and busy verdict while it measured, when and
from where it was stored). The report then reads, per name (:func:`locate`):

1. ``runs/bench/<name>.json`` where the workflow (or a user by hand) measured it on this machine: origin
   ``measured``;
2. else the stored file, where the profile names the store (``bench: stored``): origin ``stored``;
3. else nothing: the experiment is not run.

A file is refused, with a one-line error naming it and before anything is written, when it is missing, not
JSON, or lacks the provenance (``provenance``'s host, date and commit) or the machine's conditions that
the paper's caption states.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from lowbw.runs.io import atomic_write_json

__all__ = ["HOST_STORE", "NAMES", "HostStoreError", "Located", "commit_of", "cores_of", "describe", "keep", "locate",
           "load_index"]

HOST_STORE = Path("paper/measured/host")
#: the host measurements the report reads (``runs/bench/<name>.json``), in the paper's order
NAMES = ("collectives", "collectives_latency", "compressors", "models", "e2e", "e2e_lm", "e2e_lm_realtime", "exchange",
         "exchange_realtime", "loss", "loss_train")


def commit_of(prov: dict[str, Any] | None) -> str | None:
    """The commit a benchmark's provenance names: ``git_commit`` (:func:`lowbw.runs.io.provenance`) or ``commit``
    (:func:`lowbw.bench.bench_provenance`, e.g. E8's e2e.json)."""
    prov = prov or {}
    return prov.get("git_commit") or prov.get("commit")


def cores_of(prov: dict[str, Any] | None) -> int | None:
    """The cores a benchmark's provenance names (``cpu_count`` or ``cores``, as :func:`commit_of`)."""
    prov = prov or {}
    return prov.get("cpu_count") or prov.get("cores")


class HostStoreError(ValueError):
    """A measurement the store refuses (one line, naming the file)."""


@dataclass(frozen=True)
class Located:
    """Where the report found one host measurement."""

    path: Path  # the JSON file read
    origin: str  # "measured" (runs/bench: this machine, this workflow or by hand) or "stored" (the repository's)
    entry: dict[str, Any]  # the store's index entry (provenance summary); {} for a measured file


def describe(doc: dict[str, Any]) -> dict[str, Any]:
    """The index entry of one benchmark file: host, CPU, cores, commit, date, and the machine's load over its
    measurement (1-min load before/highest/after, other processes' cores, busy and why); appended repeats
    (``--append``) widen the load to all of them."""
    prov = doc.get("provenance") or {}
    conds = [c for c in [doc.get("conditions"), *((a or {}).get("conditions") for a in doc.get("appended") or [])]
             if c]
    entry: dict[str, Any] = {
        "host": prov.get("host"), "cpu": prov.get("cpu"), "cores": cores_of(prov), "git_commit": commit_of(prov),
        "date": prov.get("date"), "repeats": 1 + len(doc.get("appended") or []),
    }
    if conds:
        entry.update(load1_before=conds[0]["load_before"][0], load1_max=max(float(c["load1_max"]) for c in conds),
                     load1_after=conds[-1]["load_after"][0],
                     others_cores_max=max((float(c["others_cores"]) for c in conds
                                           if c.get("others_cores") is not None), default=None),
                     busy=any(bool(c.get("busy")) for c in conds),
                     reasons=sorted({r for c in conds for r in c.get("reasons") or []}))
    return entry


def _read(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise HostStoreError(f"{path}: no such measurement (measure it first: python -m lowbw bench --help)")
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise HostStoreError(f"{path}: not a readable JSON file ({e})") from None
    prov = doc.get("provenance") if isinstance(doc, dict) else None
    missing = [k for k in ("host", "date") if not (prov or {}).get(k)] + ([] if commit_of(prov) else ["commit"])
    if missing:
        raise HostStoreError(f"{path}: its provenance lacks {', '.join(missing)}: the paper could not say where "
                             "and when it was measured")
    if not doc.get("conditions"):
        raise HostStoreError(f"{path}: no recorded machine conditions: the paper could not state the load")
    return doc


def load_index(store: str | Path = HOST_STORE) -> dict[str, Any]:
    """``index.json`` of a store: ``{name: entry}`` ({} where there is none)."""
    p = Path(store) / "index.json"
    return json.loads(p.read_text(encoding="utf-8")).get("files", {}) if p.is_file() else {}


def keep(names: list[str], src: str | Path = "runs/bench", to: str | Path = HOST_STORE, note: str = "") -> list[Path]:
    """Copy ``<src>/<name>.json`` of every name into ``<to>`` and record it in ``<to>/index.json`` (with
    ``note``, e.g. how the run was started, where the file itself cannot say). Every file is checked before any
    is written (:class:`HostStoreError` names the first bad one)."""
    src, to = Path(src), Path(to)
    unknown = [n for n in names if n not in NAMES]
    if unknown:
        raise HostStoreError(f"unknown host measurement(s) {unknown}; known: {list(NAMES)}")
    if not names:
        raise HostStoreError(f"no measurement named; known: {list(NAMES)}")
    docs = {n: _read(src / f"{n}.json") for n in names}
    to.mkdir(parents=True, exist_ok=True)
    index = load_index(to)
    now = datetime.now(UTC).isoformat(timespec="seconds")
    out = []
    for n, doc in docs.items():
        dst = to / f"{n}.json"
        tmp = to / f".{n}.json.tmp"
        shutil.copyfile(src / f"{n}.json", tmp)
        tmp.replace(dst)
        index[n] = {**describe(doc), "stored": now, "source": str(src / f"{n}.json")}
        if note:
            index[n]["note"] = note
        out.append(dst)
    atomic_write_json(to / "index.json", {"files": dict(sorted(index.items()))})
    return out


def locate(name: str, runs_dir: str | Path, store: str | Path | None) -> Located | None:
    """The file the report reads for ``name``: this machine's ``<runs_dir>/bench/<name>.json``, else the stored
    one when ``store`` is given, else None (module docstring)."""
    p = Path(runs_dir) / "bench" / f"{name}.json"
    if p.is_file():
        return Located(p, "measured", {})
    if store is not None:
        s = Path(store) / f"{name}.json"
        if s.is_file():
            return Located(s, "stored", load_index(store).get(name, {}))
    return None
