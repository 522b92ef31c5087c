"""The reference build kept in the repository: the paper PDF of one full workflow run, with its provenance,
and the comparison of every new build against it.

A reader sees what ``make`` will produce before running it: ``paper/reference/paper.pdf``, and beside it
``BUILD.json``: the commit it was built from (and whether the tree had uncommitted changes), when, the profile,
the machine and its load, the workflow run's job count and wall time (the progress plugin's
``runs/.progress/last_run.json``), the PDF's pages and sha256.

    python -m lowbw.workflow.reference save         # make reference: paper/build/paper.pdf -> paper/reference/
    python -m lowbw.workflow.reference compare REF NEW --out F  # the workflow's rule compare_reference

The comparison extracts both PDFs' text (``pdftotext``), cuts it into sentences and pairs the sentences that are
the same but for their numbers: those are reported as the generated numbers that changed (old -> new); the
others as text added or removed. It reports and exits 0 whatever moved: a rebuilt paper's numbers differ
from the reference whenever a measurement of this machine does, and that is not an error of the build.
"""

from __future__ import annotations

import argparse
import difflib
import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from lowbw.workflow.progress import HISTORY, LAST_RUN

__all__ = ["TextDiff", "diff_text", "sentences", "pdf_text", "compare", "save", "main", "REFERENCE"]

REFERENCE = Path("paper/reference")
_NUM = re.compile(r"(?<![A-Za-z])[-+\u2212]?\d[\d,]*(?:\.\d+)?(?:\s?%)?")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z(\[\u201c\"])")


def _drop_page_number(page: str) -> str:
    lines = page.rstrip().split("\n")
    return "\n".join(lines[:-1] if lines and lines[-1].strip().isdigit() else lines)


def sentences(text: str) -> list[str]:
    """The text's sentences: pages joined without their page numbers (a page's last line when it is a bare
    number), whitespace collapsed, words hyphenated across lines joined."""
    text = "\n".join(_drop_page_number(p) for p in text.split("\f"))
    text = re.sub(r"(\w)-\n(\w)", r"\1\2", text)
    text = re.sub(r"\s+", " ", text).strip()
    return [s for s in _SENTENCE_END.split(text) if s]


def _shape(sentence: str) -> str:
    return _NUM.sub("#", sentence)


@dataclass
class TextDiff:
    """Sentences of the new text against the reference's: same text, numbers changed, added, removed."""

    same: int = 0
    numbers: list[tuple[str, list[str], list[str]]] = field(default_factory=list)  # (shape, old, new)
    added: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)

    @property
    def identical(self) -> bool:
        return not (self.numbers or self.added or self.removed)


def diff_text(reference: str, new: str) -> TextDiff:
    """Pair the sentences of ``new`` with those of ``reference`` (difflib over their shapes: the sentence with
    every number replaced by ``#``) and sort them into same, numbers changed, added and removed."""
    ref_s, new_s = sentences(reference), sentences(new)
    out = TextDiff()
    matcher = difflib.SequenceMatcher(None, [_shape(s) for s in ref_s], [_shape(s) for s in new_s], autojunk=False)
    for op, i1, i2, j1, j2 in matcher.get_opcodes():
        if op == "equal":
            for a, b in zip(ref_s[i1:i2], new_s[j1:j2]):
                if a == b:
                    out.same += 1
                else:
                    old, now = _NUM.findall(a), _NUM.findall(b)
                    changed = [(x, y) for x, y in zip(old, now) if x != y]
                    out.numbers.append((_shape(b), [x for x, _ in changed], [y for _, y in changed]))
        else:
            out.removed += ref_s[i1:i2]
            out.added += new_s[j1:j2]
    return out


def pdf_text(pdf: str | Path) -> tuple[str, int]:
    """(text, pages) of a PDF through poppler's ``pdftotext``; pages are its form feeds."""
    text = subprocess.run(["pdftotext", "-enc", "UTF-8", str(pdf), "-"], capture_output=True, text=True,
                          check=True).stdout
    return text, text.count("\f") or (1 if text.strip() else 0)


def _clip(s: str, n: int = 160) -> str:
    return s if len(s) <= n else s[: n - 3] + "..."


def compare(reference: str | Path, new: str | Path, build: str | Path | None = None, limit: int = 200) -> str:
    """The report of ``new`` against ``reference`` (and the reference's BUILD.json, if any), as text."""
    reference, new = Path(reference), Path(new)
    head = [f"{new} against the reference build {reference}"]
    build = Path(build) if build else reference.with_name("BUILD.json")
    if build.is_file():
        b = json.loads(build.read_text())
        w = b.get("workflow") or {}
        dirty = " (with uncommitted changes)" if b.get("dirty") else ""
        head.append(f"reference: commit {str(b.get('commit'))[:12]}{dirty}, built {b.get('built')}, profile "
                    f"{b.get('profile')}, {w.get('jobs')} jobs in {w.get('wall_s')} s on "
                    f"{(b.get('machine') or {}).get('host')}")
    if not reference.is_file():
        head.append("no reference PDF in the repository yet (make reference keeps one); nothing compared")
        return "\n".join(head) + "\n"
    if not shutil.which("pdftotext"):
        return "\n".join(head + ["pdftotext (poppler-utils) is not installed; the texts were not compared"]) + "\n"
    (ref_text, ref_pages), (new_text, new_pages) = pdf_text(reference), pdf_text(new)
    d = diff_text(ref_text, new_text)
    lines = head + [f"pages: {new_pages} (reference {ref_pages})",
                    f"sentences: {d.same} the same, {len(d.numbers)} with changed numbers, {len(d.added)} added, "
                    f"{len(d.removed)} removed"]
    if d.identical:
        lines.append("the text is the reference's, number for number")
    if d.numbers:
        lines.append("numbers changed (reference -> this build), in:")
        for shape, old, now in d.numbers[:limit]:
            lines.append(f"  {_clip(shape)}\n    " + "; ".join(f"{a} -> {b}" for a, b in zip(old, now)))
    for title, items, mark in (("text removed", d.removed, "-"), ("text added", d.added, "+")):
        if items:
            lines.append(f"{title}:")
            lines += [f"  {mark} {_clip(s)}" for s in items[:limit]]
    hidden = max(0, len(d.numbers) - limit) + max(0, len(d.removed) - limit) + max(0, len(d.added) - limit)
    if hidden:
        lines.append(f"({hidden} more not listed)")
    return "\n".join(lines) + "\n"


def _git(*args: str) -> str | None:
    try:
        return subprocess.run(["git", *args], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def _profile(command: list[str]) -> str | None:
    """The ``profile`` key of the config a workflow command ran with (--configfile, else --profile's, else the
    Snakefile's default config/config.yaml)."""
    import yaml

    config = None
    for i, arg in enumerate(command):
        if arg.startswith("--configfile"):
            config = arg.split("=", 1)[1] if "=" in arg else (command[i + 1] if i + 1 < len(command) else None)
        elif arg == "--profile" and i + 1 < len(command) and config is None:
            prof = Path(command[i + 1]) / "config.yaml"
            if prof.is_file():
                config = (yaml.safe_load(prof.read_text()) or {}).get("configfile")
    path = Path(config or "config/config.yaml")
    return (yaml.safe_load(path.read_text()) or {}).get("profile") if path.is_file() else None


def _mem_gib() -> float | None:
    try:
        kb = next(int(ln.split()[1]) for ln in Path("/proc/meminfo").read_text().splitlines()
                  if ln.startswith("MemTotal:"))
        return round(kb / 2**20, 1)
    except (OSError, StopIteration, ValueError):
        return None


def save(pdf: str | Path = "paper/build/paper.pdf", to: str | Path = REFERENCE,
         last_run: str | Path | None = None, force: bool = False) -> dict:
    """Copy the built ``pdf`` into ``to`` with ``BUILD.json``. Refuses (ValueError) a missing PDF, a workflow
    run not on record or whose jobs did not all finish, and a PDF older than that run's start, unless
    ``force``."""
    pdf, to = Path(pdf), Path(to)
    last_run = Path(last_run) if last_run else Path(HISTORY).with_name(LAST_RUN)
    if not pdf.is_file():
        raise ValueError(f"{pdf} does not exist: run make first")
    run = json.loads(last_run.read_text()) if last_run.is_file() else None
    built = datetime.fromtimestamp(pdf.stat().st_mtime, UTC)
    if not force:
        if run is None:
            raise ValueError(f"no workflow run on record ({last_run}: make writes it); --force keeps the PDF "
                             "without the run's job count and time")
        if run.get("done") != run.get("jobs"):
            raise ValueError(f"the last workflow run ({run.get('started')}) did {run.get('done')} of its "
                             f"{run.get('jobs')} jobs: finish it (make) first")
        if run.get("started") and built < datetime.fromisoformat(run["started"]):
            raise ValueError(f"{pdf} ({built:%Y-%m-%d %H:%M}) is older than the last workflow run "
                             f"({run['started']}), so that run did not build it")
    try:
        pages = pdf_text(pdf)[1] if shutil.which("pdftotext") else None
    except subprocess.CalledProcessError:
        pages = None  # not a PDF poppler can read: kept as it is, its pages unknown
    info = {
        "commit": _git("rev-parse", "HEAD"),
        "dirty": bool(_git("status", "--porcelain", "--untracked-files=no")),
        "built": built.isoformat(timespec="seconds"),
        "saved": datetime.now(UTC).isoformat(timespec="seconds"),
        "profile": _profile((run or {}).get("command") or []),
        "machine": {"host": platform.node(), "cpus": os.cpu_count(), "memory_gib": _mem_gib(),
                    "platform": platform.platform(), "python": platform.python_version()},
        "workflow": run,
        "pdf": {"pages": pages, "sha256": hashlib.sha256(pdf.read_bytes()).hexdigest(), "bytes": pdf.stat().st_size},
    }
    to.mkdir(parents=True, exist_ok=True)
    tmp = to / f".paper.pdf.{os.getpid()}"
    shutil.copyfile(pdf, tmp)
    os.replace(tmp, to / "paper.pdf")
    (to / "BUILD.json").write_text(json.dumps(info, indent=1) + "\n")
    return info


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m lowbw.workflow.reference", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("save", help="keep paper/build/paper.pdf as the reference build, with its provenance")
    s.add_argument("--pdf", default="paper/build/paper.pdf")
    s.add_argument("--to", default=str(REFERENCE))
    s.add_argument("--last-run", default=None, help=f"the workflow run's record (default {Path(HISTORY).parent}/"
                                                    f"{LAST_RUN})")
    s.add_argument("--force", action="store_true", help="keep the PDF even without a complete run on record")
    c = sub.add_parser("compare", help="report a build's pages, text and numbers against the reference")
    c.add_argument("reference")
    c.add_argument("new")
    c.add_argument("--out", help="write the report here (default: stdout)")
    a = ap.parse_args(argv)
    if a.cmd == "save":
        try:
            info = save(a.pdf, a.to, a.last_run, a.force)
        except ValueError as e:
            print(f"lowbw reference: {e}", file=sys.stderr)
            return 2
        w = info["workflow"] or {}
        print(f"kept {a.pdf} as {a.to}/paper.pdf: commit {str(info['commit'])[:12]}"
              f"{' + uncommitted changes' if info['dirty'] else ''}, profile {info['profile']}, "
              f"{w.get('jobs')} jobs in {w.get('wall_s')} s; commit {a.to}/ to publish it")
        return 0
    t0 = time.monotonic()
    report = compare(a.reference, a.new)
    if a.out:
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.out).write_text(report)
        print(report.splitlines()[0] + f" ... {a.out} ({time.monotonic() - t0:.1f} s)")
    else:
        sys.stdout.write(report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
