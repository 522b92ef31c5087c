"""A caption describes its own table or figure: it names no profile but the build's, and every row it defines
(``name = what it is``) is a row the table holds.

A caption is written once and rendered for every profile, so a sentence such as "the default profile runs
L_W = 4 or 16" is true of one build and false of the next. :func:`problems` reads a generated table (LaTeX, as
:func:`lowbw.report.latex.booktabs` writes it) and lists what its caption promises that the table does not
hold; the report refuses to write such a table (:func:`check`), and ``tests/report/test_captions.py`` applies
:func:`profile_problems` to the hand-written figure captions of ``paper/sections``, which must name no
profile at all since every profile renders them.
"""

from __future__ import annotations

import re

__all__ = ["PROFILES", "captions", "profile_problems", "row_labels", "defined_rows", "problems", "check"]

PROFILES = ("tiny", "quick", "medium", "full", "gpu")  # config/schema.yaml's profile names
_PROFILE_RE = re.compile(r"\b(default|" + "|".join(PROFILES) + r")(?:'s)?\s+profile", re.I)
# "name = what it is" after the caption's start or a ':', ';', '(' or ', ': a row the caption defines; a
# trailing '*' stands for every row starting with the name (adam* = ...)
_DEFINES_RE = re.compile(r"(?:^|[:;(]|,)\s*([a-z][a-z0-9_]*\*?)\s+=\s")


def captions(tex: str) -> list[str]:
    """The argument of every ``\\caption{...}`` in ``tex`` (braces matched)."""
    out = []
    for m in re.finditer(r"\\caption\{", tex):
        depth, i = 1, m.end()
        while i < len(tex) and depth:
            depth += {"{": 1, "}": -1}.get(tex[i], 0) if tex[i - 1] != "\\" else 0
            i += 1
        out.append(tex[m.end():i - 1])
    return out


def profile_problems(caption: str, profile: str | None) -> list[str]:
    """Profiles a caption names other than ``profile`` (None: any profile is one too many); "the default
    profile" is always one, as the default is a name only the README gives (say which profile)."""
    bad = []
    for m in _PROFILE_RE.finditer(caption):
        name = m.group(1).lower()
        if profile is None or name != profile:
            bad.append(f"names the {name} profile" + (f" in a {profile} build" if profile else "") +
                       f": '{caption[max(0, m.start() - 30):m.end() + 30]}'")
    return bad


def row_labels(table: str) -> list[str]:
    """The first cell of every body row of a booktabs table (between ``\\midrule`` and ``\\bottomrule``)."""
    body = table.split("\\midrule", 1)[-1].split("\\bottomrule", 1)[0]
    return [ln.split("&", 1)[0].strip() for ln in body.split("\\\\") if "&" in ln]


def defined_rows(caption: str) -> list[str]:
    """The row names a caption defines (``b128 = constant global batch 128``)."""
    plain = caption.replace("\\_", "_")
    return [m.group(1) for m in _DEFINES_RE.finditer(plain)]


def problems(table: str, profile: str | None) -> list[str]:
    """What the caption of a generated table promises that the table does not hold: a profile other than the
    build's, or a row it defines that no row label contains as a word."""
    out = []
    labels = [lab.replace("\\_", "_") for lab in row_labels(table)]
    for cap in captions(table):
        out += profile_problems(cap, profile)
        for name in defined_rows(cap):
            pat = re.compile(rf"(?<![A-Za-z0-9_]){re.escape(name.rstrip('*'))}" + ("" if name.endswith("*")
                                                                                else r"(?![A-Za-z0-9_])"))
            if labels and not any(pat.search(lab) for lab in labels):
                out.append(f"defines row '{name}', which the table does not hold (rows: {', '.join(labels)})")
    return out


def check(key: str, table: str, profile: str | None) -> None:
    """:func:`problems` as one ValueError naming the experiment, so that the report never writes a caption
    that describes another table."""
    bad = problems(table, profile)
    if bad:
        raise ValueError(f"the caption of {key}'s table {'; '.join(bad)}: let the report write it from the "
                         "table's rows (lowbw.report.captions)")
