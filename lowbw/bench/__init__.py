"""Benchmarks: scripts that measure, write runs/bench/<name>.json (with provenance) and print a table."""

from __future__ import annotations

from typing import Any

from lowbw.runs.io import provenance

__all__ = ["bench_provenance"]


def bench_provenance() -> dict[str, Any]:
    """Where and when a benchmark measured: host, cores, CPU, torch, commit, UTC date (ISO 8601), Python and
    platform -- the ``provenance`` record of every runs/bench/*.json."""
    p = provenance()
    return {"host": p["host"], "cores": p["cpu_count"], "cpu": p["cpu"], "torch": p["torch_version"],
            "commit": p["git_commit"], "date": p["date"],
            "python": p["python_version"], "platform": p["platform"], "cuda": p["cuda"]}
