"""LaTeX output: booktabs tables, ``\\newcommand`` numbers, escaping. Pure string functions."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["escape", "numbers_tex", "booktabs", "page_rows", "fmt_num", "fmt_pm"]

_ESC = {"&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_", "{": r"\{", "}": r"\}",
        "~": r"\textasciitilde{}", "^": r"\textasciicircum{}", "\\": r"\textbackslash{}"}


def escape(text: Any) -> str:
    """Escape LaTeX special characters in plain text."""
    return "".join(_ESC.get(c, c) for c in str(text))


def fmt_num(x: float | int | None, digits: int = 3) -> str:
    """Compact number for prose/tables: ``digits`` significant digits, thousands grouped, '--' for missing."""
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "--"
    if isinstance(x, int) or (isinstance(x, float) and x.is_integer()):
        return f"{int(round(x)):,}".replace(",", "{,}")
    if x == 0:
        return "0"
    mag = int(math.floor(math.log10(abs(x))))
    decimals = max(0, digits - 1 - mag)
    s = f"{x:,.{decimals}f}"
    return s.replace(",", "{,}")


def fmt_pm(mean: float, std: float | None, digits: int = 3) -> str:
    """``mean \\pm std`` (std omitted when None or NaN)."""
    if std is None or not math.isfinite(std):
        return fmt_num(mean, digits)
    return f"{fmt_num(mean, digits)} $\\pm$ {fmt_num(std, max(1, digits - 1))}"


def numbers_tex(numbers: Mapping[str, str], header: str = "") -> str:
    """``\\newcommand{\\Name}{value}`` lines, sorted; values are inserted as given (already formatted)."""
    lines = [f"% {header}"] if header else []
    for name in sorted(numbers):
        if not re.fullmatch(r"[A-Za-z]+", name):
            raise ValueError(f"macro name {name!r} must be letters only")
        lines.append(f"\\newcommand{{\\{name}}}{{{numbers[name]}}}")
    return "\n".join(lines) + "\n"


def booktabs(rows: Sequence[Sequence[Any]], header: Sequence[str], caption: str, label: str,
             align: str | None = None, note: str | None = None, size: str = "\\small") -> str:
    """A complete ``table`` environment with booktabs rules. Cells are inserted as given (pre-formatted)."""
    if any(len(r) != len(header) for r in rows):
        raise ValueError(f"table {label}: every row needs {len(header)} cells")
    align = align or "l" + "r" * (len(header) - 1)
    body = "\n".join(" & ".join(str(c) for c in r) + r" \\" for r in rows)
    lines = [
        r"\begin{table}[t]", r"\centering", size,
        rf"\caption{{{caption}}}", rf"\label{{{label}}}",
        rf"\begin{{tabular}}{{{align}}}", r"\toprule",
        " & ".join(header) + r" \\", r"\midrule", body, r"\bottomrule", r"\end{tabular}",
    ]
    if note:
        lines.append(rf"\par\smallskip{{\footnotesize {note}}}")
    lines.append(r"\end{table}")
    return "\n".join(lines) + "\n"


def page_rows(rows: Sequence[Sequence[Any]], keys: Sequence[Any], limit: int) -> list[list[Sequence[Any]]]:
    """``rows`` in pieces of at most ``limit`` rows, one table each (a ``table`` float taller than the page runs
    off its bottom): a run of rows with the same key (``keys``, one per row, e.g. the method) stays in one piece
    unless it alone exceeds ``limit``, or keeping runs whole takes more pieces than filling each piece does."""
    if len(keys) != len(rows) or limit < 1:
        raise ValueError(f"page_rows: {len(keys)} keys for {len(rows)} rows, limit {limit}")
    runs: list[list[Sequence[Any]]] = []  # consecutive rows of one key
    for i, row in enumerate(rows):
        if i and keys[i] == keys[i - 1]:
            runs[-1].append(row)
        else:
            runs.append([row])
    pages: list[list[Sequence[Any]]] = [[]]
    for run in runs:
        while run:
            if pages[-1] and len(pages[-1]) + len(run) > limit:
                pages.append([])
            take = limit - len(pages[-1])
            pages[-1].extend(run[:take])
            run = run[take:]
    if len(pages) > -(-len(rows) // limit):  # whole runs cost a piece: fill each instead
        pages = [list(rows[i:i + limit]) for i in range(0, len(rows), limit)]
    return [page for page in pages if page]
