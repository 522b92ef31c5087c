"""The interface an experiment of the paper is written against: :class:`Context` (the report's inputs),
:class:`Stats` (an experiment's tidy tables and the scalars they were computed with) and :class:`Experiment`
(its four functions: ``stats``, ``numbers``, ``table``, ``figure``) and :class:`MissingData` (what ``stats``
raises when the runs it found lack one it cannot go without). :mod:`lowbw.report.build` runs them;
``lowbw.report.experiments.ALL`` lists them. Nothing here imports an experiment or the build.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lowbw.workflow.hoststore import locate

__all__ = ["Context", "Stats", "Experiment", "MissingData"]


class MissingData(LookupError):
    """An experiment's runs are present but lack one its numbers cannot go without (e.g. the baseline every
    method is compared with); the message names the runs and what they lack. The build reports the experiment
    as not run, with the message as the reason, instead of comparing against nothing."""


@dataclass
class Context:
    """Inputs of the report: the workflow config, the runs directory and the output directory."""

    config: dict[str, Any]
    runs_dir: Path
    out: Path
    _cache: dict[str, Any] = field(default_factory=dict)
    # the repository's measurement stores (lowbw.report.stores.STORES) whose contents entered this build's numbers
    stores: set[str] = field(default_factory=set)

    def read_store(self, name: str) -> None:
        """Record that this build's numbers rest on the repository's store ``name`` (the abstract lists them)."""
        self.stores.add(name)

    @property
    def host_store(self) -> Path | None:
        """The repository's stored host measurements the profile reads (``bench: stored``), or None."""
        s = (self.config.get("bench") or {}).get("stored")
        return Path(s) if s else None

    def bench(self, name: str) -> dict[str, Any] | None:
        """The host measurement ``name``: ``runs/bench/<name>.json``, else the stored one of ``bench: stored``
        (:func:`lowbw.workflow.hoststore.locate`), else None. Its ``provenance`` gains ``origin`` ("measured" or
        "stored") and ``path`` (the file read), which the tables' captions state."""
        if name not in self._cache:
            loc = locate(name, self.runs_dir, self.host_store)
            doc = json.loads(loc.path.read_text()) if loc else None
            if doc is not None:
                doc["provenance"] = {**(doc.get("provenance") or {}), "origin": loc.origin, "path": str(loc.path)}
            self._cache[name] = doc
        doc = self._cache[name]
        if doc is not None and doc["provenance"]["origin"] == "stored":
            self.read_store("host")
        return doc


@dataclass(frozen=True)
class Stats:
    """An experiment's statistics: tidy tables (one row per observation or group; units in the column names)
    and the scalars they were computed with (``meta``: settings such as the target accuracy, and provenance:
    the source files and the machine that measured them)."""

    tables: dict[str, Any]  # name -> pandas DataFrame
    meta: dict[str, Any]


@dataclass(frozen=True)
class Experiment:
    """One experiment of the paper: how its data is selected and summarised, and how it is rendered."""

    key: str  # "e1" .. "e8"
    title: str
    # None: the profile has no data for it (``missing`` says why); raises MissingData where the data is incomplete
    stats: Callable[[Context], Stats | None]
    numbers: Callable[[Stats], dict[str, str]]  # macro name (from the catalogue) -> formatted value
    table: Callable[[Stats], str]  # a complete LaTeX table environment, label tab:<key>
    figure: Callable[[Stats], Any]  # a matplotlib Figure
    missing: str  # why there is no data, e.g. "runs/bench/collectives.json absent"
    # a table for the paper's appendix (generated/appendix_<key>.tex; None: none, or nothing to put there)
    appendix: Callable[[Stats], str | None] | None = None
