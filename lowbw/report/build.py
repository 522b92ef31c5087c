"""Collate runs and benchmarks into ``paper/generated/``: per experiment a table, a figure and findings,
plus ``numbers.tex`` (every number the prose quotes) and ``setup.tex`` (the machine and software).

Each experiment is a function ``eN(ctx) -> Section`` in ``lowbw.report.experiments``; this module only
gathers inputs, calls them, and writes their outputs atomically.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lowbw.report.latex import booktabs, escape, numbers_tex
from lowbw.runio import atomic_write_text, provenance

__all__ = ["Context", "Section", "BuildResult", "build"]


@dataclass
class Context:
    """Inputs of the report: the workflow config, the runs directory and the output directory."""

    config: dict[str, Any]
    runs_dir: Path
    out: Path
    _cache: dict[str, Any] = field(default_factory=dict)

    def bench(self, name: str) -> dict[str, Any] | None:
        """``runs/bench/<name>.json`` or None."""
        p = self.runs_dir / "bench" / f"{name}.json"
        if name not in self._cache:
            self._cache[name] = json.loads(p.read_text()) if p.is_file() else None
        return self._cache[name]

    def runs(self, experiment: str):
        """All completed runs of one experiment as a DataFrame (one row per run)."""
        from lowbw.results import load_runs

        key = f"runs:{experiment}"
        if key not in self._cache:
            d = self.runs_dir / experiment
            self._cache[key] = load_runs(d) if d.is_dir() else None
        return self._cache[key]


@dataclass
class Section:
    """What one experiment contributes to the paper."""

    key: str  # "e1" .. "e7"
    table: str  # complete LaTeX table environment (label tab:<key>)
    findings: str  # prose with numbers (LaTeX)
    numbers: dict[str, str] = field(default_factory=dict)  # macro name -> formatted value
    figure: Any = None  # a matplotlib Figure, saved as fig_<key>.pdf/.png


@dataclass
class BuildResult:
    out: Path
    sections: list[Section]
    files: list[Path]

    def summary(self) -> Any:
        import pandas as pd

        return pd.DataFrame([{"experiment": s.key, "numbers": len(s.numbers), "has_figure": s.figure is not None,
                              "findings_chars": len(s.findings)} for s in self.sections])


def missing_section(key: str, title: str, why: str) -> Section:
    """An experiment without data in this profile: say so in the paper rather than fake it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(3.2, 1.2))
    ax.axis("off")
    ax.text(0.5, 0.5, f"{title}: not run\n({why})", ha="center", va="center", fontsize=8)
    table = booktabs([[escape(why)]], [escape(title)], f"{escape(title)}: no results in this profile.",
                     f"tab:{key}", align="l")
    return Section(key, table, f"{escape(title)} was not run in this profile ({escape(why)}).", {}, fig)


def _setup_tex(prov: dict[str, Any], config: dict[str, Any]) -> str:
    rows = [
        ["CPU", escape(prov.get("cpu"))],
        ["Cores / torch threads", f"{prov.get('cpu_count')} / {prov.get('torch_threads')}"],
        ["GPU", escape(prov.get("cuda") or "none")],
        ["Python / PyTorch", f"{escape(prov.get('python_version'))} / {escape(prov.get('torch_version'))}"],
        ["lowbw commit", escape(str(prov.get("git_commit"))[:12])],
        ["Profile / seeds", f"{escape(config.get('profile'))} / {len(config.get('seeds', []))}"],
    ]
    return booktabs(rows, ["Item", "Value"], "Machine and software of the reported measurements.",
                    "tab:setup", align="ll")


def _save_figure(fig: Any, out: Path, key: str) -> list[Path]:
    import matplotlib.pyplot as plt

    paths = []
    for ext in ("pdf", "png"):
        final = out / f"fig_{key}.{ext}"
        tmp = out / f".fig_{key}.tmp.{ext}"
        fig.savefig(tmp, bbox_inches="tight", dpi=150 if ext == "png" else None)
        tmp.replace(final)
        paths.append(final)
    plt.close(fig)
    return paths


def build(config: dict[str, Any], runs_dir: str | Path = "runs", out: str | Path = "paper/generated",
          only: list[str] | None = None) -> BuildResult:
    """Write every generated file of the paper. ``only`` limits to some experiment keys (e.g. ["e1"])."""
    import matplotlib

    matplotlib.use("Agg")
    from lowbw.report import experiments

    ctx = Context(config=config, runs_dir=Path(runs_dir), out=Path(out))
    ctx.out.mkdir(parents=True, exist_ok=True)
    sections: list[Section] = []
    files: list[Path] = []
    numbers: dict[str, str] = {}
    for key, fn in experiments.ALL.items():
        if only and key not in only:
            continue
        sec = fn(ctx)
        sections.append(sec)
        clash = set(sec.numbers) & set(numbers)
        if clash:
            raise ValueError(f"experiment {key} redefines macros {sorted(clash)}")
        numbers.update(sec.numbers)
        files.append(atomic_write_text(ctx.out / f"tab_{key}.tex", sec.table))
        files.append(atomic_write_text(ctx.out / f"findings_{key}.tex", sec.findings.rstrip() + "\n"))
        if sec.figure is not None:
            files.extend(_save_figure(sec.figure, ctx.out, key))
    prov = provenance()
    files.append(atomic_write_text(ctx.out / "setup.tex", _setup_tex(prov, config)))
    header = f"generated by lowbw.report from {ctx.runs_dir} at commit {prov['git_commit']}; do not edit"
    files.append(atomic_write_text(ctx.out / "numbers.tex", numbers_tex(numbers, header)))
    return BuildResult(ctx.out, sections, files)
