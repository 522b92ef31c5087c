"""The machine's conditions beside each measured table: a caption sentence (host, date, load, other processes'
CPU, steal; :mod:`lowbw.measure.conditions` records them) and a mark on every cell measured while the machine
was busy, so that a timing taken under contention is never printed as the machine's own; and the clause that
names where and at which commit stored training runs ran (:func:`runs_provenance`)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from lowbw.report.latex import escape
from lowbw.workflow.hoststore import commit_of

__all__ = ["MARK", "mark", "origin", "caption", "busy_testbeds", "runs_provenance"]

MARK = r"$^\ddagger$"  # on a cell measured while the machine was busy


def mark(cond: dict[str, Any] | None) -> str:
    """``MARK`` where the cell's recorded conditions say busy, else '' (also for a cell without any: None, or
    NaN in a DataFrame column where other rows have them)."""
    return MARK if isinstance(cond, dict) and cond.get("busy") else ""


def busy_testbeds(b: dict[str, Any]) -> dict[tuple[int, float, float], bool]:
    """E1's benchmark: per testbed (workers, rate in Mbit/s, one-way delay in ms), whether it was measured while
    the machine was busy (testbeds without recorded conditions are left out)."""
    out = {}
    for t in b.get("testbeds") or []:
        c = t.get("conditions")
        if c is not None and t.get("workers") is not None and t.get("rate_bps") is not None:
            key = (int(t["workers"]), float(t["rate_bps"]) / 1e6, 1e3 * float(t.get("delay_s") or 0))
            out[key] = bool(c.get("busy"))
    return out


def short_commit(commit: str) -> str:
    """A commit's first 12 hex digits, keeping git's ``-dirty`` mark (uncommitted changes in the tree)."""
    commit = str(commit)
    return commit[:12] + ("-dirty" if commit.endswith("-dirty") else "")


def runs_provenance(run_dirs: Iterable[Path]) -> str:
    """Where and with what stored training runs ran, from each run's ``provenance.json`` (``lowbw store``): a
    caption's clause 'measured on <host> (<device>, torch <v>) on <days>, at commit <c>' (several commits: how
    many, the first and the last by time; ``-dirty``: uncommitted changes, the run's own config.json holds its
    settings); '' where no run has one."""
    docs = [json.loads(p.read_text(encoding="utf-8")) for d in run_dirs if (p := Path(d) / "provenance.json").is_file()]
    if not docs:
        return ""
    where = sorted({f"{d.get('host', '?')} ({d.get('gpu') or d.get('device', '?')}, "
                    f"torch {d.get('torch_version', '?')})" for d in docs})
    days = sorted({str(d.get("measured_date")) for d in docs if d.get("measured_date")})
    by_time = sorted((str(d.get("measured_at", "")), short_commit(d.get("git_commit", "?"))) for d in docs)
    commits = list(dict.fromkeys(c for _, c in by_time))
    at = (f"at commit {commits[0]}" if len(commits) == 1 else
          f"at {len(commits)} commits, the first {commits[0]}, the last {commits[-1]}")
    return escape(f"measured on {', '.join(where)}" + (f" on {', '.join(days)}" if days else "") + f", {at}")


def origin(provenance: dict[str, Any] | None) -> str:
    """Where the report read a host measurement (``provenance['origin']``, set by ``Context.bench``): a sentence
    for the caption, '' where it is not known (a file handed to an experiment directly)."""
    prov = provenance or {}
    if prov.get("origin") == "stored":
        return (f" Source: {escape(prov.get('path', 'paper/measured/host'))}, kept in the repository: measured "
                "on the machine named here, not by this build (make measure remeasures it).")
    if prov.get("origin") == "measured":
        return f" Source: {escape(prov.get('path', 'runs/bench'))}, measured on this build's machine."
    return ""


def caption(cond: dict[str, Any] | None, provenance: dict[str, Any] | None = None, marked: int = 0) -> str:
    """A LaTeX sentence for a measured table's caption: where and when it was measured and the machine's load
    before / highest / after, other processes' CPU and steal; whether the machine was busy; what ``MARK`` means
    when ``marked`` cells carry it. Files measured before the conditions were recorded say so."""
    prov = provenance or {}
    if not cond:
        where = ", ".join(escape(str(x)) for x in (prov.get("host"), str(prov.get("date") or "")[:10]) if x)
        return f" Machine load not recorded{f' ({where})' if where else ''}.{origin(prov)}"
    steal = "n/a" if cond.get("steal") is None else f"{100 * float(cond['steal']):.1f}" + r"\,\%"
    others = "n/a" if cond.get("others_cores") is None else f"{float(cond['others_cores']):.2f}"
    commit = f" (commit {escape(short_commit(commit_of(prov)))})" if commit_of(prov) else ""
    text = (f"{origin(prov)} Measured on {escape(cond.get('host', '?'))}{commit}, "
            f"{escape(str(cond.get('date', '?'))[:16])} UTC: "
            f"1-min load {float(cond['load_before'][0]):.2f}/{float(cond['load1_max']):.2f}/"
            f"{float(cond['load_after'][0]):.2f} (before/highest/after) on {cond.get('cores')} cores, "
            f"other processes {others} cores, steal {steal}")
    text += ("; the machine was busy (" + escape("; ".join(cond.get("reasons") or [])) + ")."
             if cond.get("busy") else ".")
    if marked:
        text += f" {MARK}: measured while the machine was busy ({marked} cells)."
    return text
