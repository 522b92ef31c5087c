"""Collate runs and benchmarks into ``paper/generated/``: per experiment a table and a figure, plus
``numbers.tex`` (every number the paper's prose quotes, as ``\\newcommand`` macros), ``setup.tex`` (the
machine and software) and ``stats/`` (each experiment's tidy statistics tables as CSV, with provenance).

Each experiment (``lowbw.report.experiments.ALL``) is four plain functions: ``stats(ctx)`` selects the
measured data and computes its tidy tables (or returns None when the profile did not run it), and
``numbers``, ``table`` and ``figure`` render those tables. The prose that quotes the numbers lives in
``paper/sections/results.tex``; the macro names it may use are the explicit catalogue of
:mod:`lowbw.report.catalog`, and this module refuses to write a macro outside it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lowbw.report import claims, stores, table6
from lowbw.report.captions import check as check_caption
from lowbw.report.catalog import PREFIX, check_numbers, not_run_macros
from lowbw.report.experiment import Context, Experiment, MissingData, Stats
from lowbw.report.gpu import write as write_gpu
from lowbw.report.latex import booktabs, escape, numbers_tex
from lowbw.report.system import numbers as system_numbers
from lowbw.runs.io import atomic_write_text, provenance

__all__ = ["Context", "Stats", "Experiment", "Section", "BuildResult", "build"]


@dataclass
class Section:
    """What one experiment contributed to the paper."""

    key: str
    stats: Stats | None  # None: not run in this profile
    table: str
    numbers: dict[str, str]
    figure: Any = None
    incomplete: str | None = None  # why it was not reported though it has runs (MissingData's message)
    appendix: str | None = None  # its appendix table (Experiment.appendix), None: no appendix file


@dataclass
class BuildResult:
    out: Path
    sections: list[Section]
    files: list[Path]

    def summary(self) -> Any:
        import pandas as pd  # lazy: keeps `lowbw --help` free of pandas

        return pd.DataFrame([{"experiment": s.key, "ran": s.stats is not None, "numbers": len(s.numbers),
                              "stats_rows": sum(len(t) for t in s.stats.tables.values()) if s.stats else 0}
                             for s in self.sections])


def not_run(exp: Experiment, incomplete: str | None = None) -> Section:
    """An experiment without data in this profile, or whose data lacks what its numbers need (``incomplete``
    says what): the paper says so (the ``...NotRun`` macro) rather than fake it."""
    from lowbw.report.figures import note_figure  # lazy: keeps `lowbw --help` free of matplotlib, pandas, seaborn

    why = incomplete or exp.missing
    table = booktabs([[escape(why)]], [escape(exp.title)], f"{escape(exp.title)}: no results in this "
                     "profile.", f"tab:{exp.key}", align="l")
    return Section(exp.key, None, table, {m: escape(why) for m in not_run_macros(exp.key)},
                   note_figure(f"{exp.title}: not run\n({why})"), incomplete)


def run_experiment(exp: Experiment, ctx: Context) -> Section:
    before = set(ctx.stores)  # a store read by an experiment that is then not reported is no evidence of the paper
    try:
        st = exp.stats(ctx)
    except MissingData as e:
        ctx.stores.intersection_update(before)
        return not_run(exp, str(e))
    if st is None:
        ctx.stores.intersection_update(before)
        return not_run(exp)
    numbers = exp.numbers(st)
    check_numbers(exp.key, numbers)
    table = exp.table(st)
    check_caption(exp.key, table, ctx.config.get("profile"))
    return Section(exp.key, st, table, numbers, exp.figure(st),
                   appendix=exp.appendix(st) if exp.appendix is not None else None)


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
    import matplotlib.pyplot as plt  # lazy: keeps `lowbw --help` free of matplotlib

    paths = []
    for ext in ("pdf", "png"):
        final = out / f"fig_{key}.{ext}"
        tmp = out / f".fig_{key}.tmp.{ext}"
        fig.savefig(tmp, bbox_inches="tight", dpi=150 if ext == "png" else None)
        tmp.replace(final)
        paths.append(final)
    plt.close(fig)
    return paths


def _stats_csv(st: Stats, key: str, out: Path) -> list[Path]:
    """Each tidy table as ``stats/<key>_<name>.csv``, its first lines ``# name: value`` comments holding
    ``meta`` (read back with ``pandas.read_csv(path, comment="#")``)."""
    (out / "stats").mkdir(exist_ok=True)
    head = "".join(f"# {k}: {json.dumps(v, default=str)}\n" for k, v in st.meta.items())
    return [atomic_write_text(out / "stats" / f"{key}_{name}.csv", head + df.to_csv(index=False))
            for name, df in st.tables.items()]


def _kept_numbers(path: Path, rebuilt: list[str]) -> dict[str, str]:
    """The macros of an existing numbers.tex that belong to no experiment in ``rebuilt`` (by its prefix)."""
    if not path.exists():
        return {}
    mine = re.compile("|".join(rf"{PREFIX[k]}[A-Z]" for k in rebuilt))
    found = re.findall(r"^\\newcommand\{\\([A-Za-z]+)\}\{(.*)\}$", path.read_text(encoding="utf-8"), re.M)
    return {name: value for name, value in found if not mine.match(name)}


def _key_words(key: str) -> str:
    """A clock key's model and compressor (the key itself where it is not such JSON)."""
    try:
        d = json.loads(key)
        return f"{d['model']} {d['compressor']}"
    except (ValueError, KeyError, TypeError):
        return key


def check_clock(config: dict[str, Any]) -> None:
    """With ``report: clock_idle_only``, refuse (one line, naming them) when a ``clock_calibration`` entry that
    the config's runs use was last measured on a busy machine (:func:`lowbw.train.clock_table.busy_keys`): their
    virtual times would carry that load. Off by default: the default profile still has such an entry (gpt-small's
    anchor), which ``bench clock --strict`` could not remeasure on the shared machine."""
    path = config.get("clock_calibration")
    if not (config.get("report") or {}).get("clock_idle_only") or not path:
        return
    from lowbw.bench.clock import grid_configs  # lazy: imports torch
    from lowbw.train.clock_table import busy_keys

    busy = busy_keys(path)
    used = sorted(k for k in grid_configs(config) if k in busy)
    if used:
        names = "; ".join(f"{_key_words(k)} ({busy[k]})" for k in used)
        raise ValueError(f"{path}: {len(used)} clock entries this grid uses were measured on a busy machine: {names}; "
                         f"remeasure them with `python -m lowbw bench clock --strict --add --config <config> --out "
                         f"{path}` on an idle machine (report.clock_idle_only is set)")


def build(config: dict[str, Any], runs_dir: str | Path = "runs", out: str | Path = "paper/generated",
          only: list[str] | None = None) -> BuildResult:
    """Write every generated file of the paper. ``only`` limits to some experiment keys (e.g. ["e1"])."""
    import matplotlib  # lazy: keeps `lowbw --help` free of matplotlib

    matplotlib.use("Agg")
    # lazy: keeps `lowbw --help` free of matplotlib, pandas, scipy, seaborn, torch
    from lowbw.report.experiments import ALL

    unknown = sorted(set(only or []) - {e.key for e in ALL})
    if unknown:
        raise ValueError(f"unknown experiment(s) {unknown}; known: {[e.key for e in ALL]}")
    check_clock(config)
    ctx = Context(config=config, runs_dir=Path(runs_dir), out=Path(out))
    # every experiment is computed before a file is written: a run that cannot be read fails the build with the
    # output as it was, not with some experiments' tables newer than numbers.tex
    sections = [run_experiment(exp, ctx) for exp in ALL if not only or exp.key in only]
    ctx.out.mkdir(parents=True, exist_ok=True)
    files: list[Path] = []
    numbers: dict[str, str] = {}
    for sec in sections:
        numbers.update(sec.numbers)  # catalogue names carry the experiment's prefix: no clashes
        files.append(atomic_write_text(ctx.out / f"tab_{sec.key}.tex", sec.table))
        files.extend(_save_figure(sec.figure, ctx.out, sec.key))
        if sec.stats is not None:
            files.extend(_stats_csv(sec.stats, sec.key, ctx.out))
        appendix = ctx.out / f"appendix_{sec.key}.tex"  # \IfFileExists in paper.tex: absent, no appendix
        if sec.appendix:
            files.append(atomic_write_text(appendix, sec.appendix))
        elif appendix.exists():
            appendix.unlink()  # an older build's, whose data this build no longer has
    # GPU runs kept in the repository (lowbw.workflow.store), labelled with their GPU and date; none: no file
    if not only:
        gpu = write_gpu(ctx.out)
        files.extend(gpu)
        if gpu:
            ctx.read_store("gpu")
    prov = provenance()
    files.append(atomic_write_text(ctx.out / "setup.tex", _setup_tex(prov, config)))
    # Charles et al.'s Table 6 from the advisor's model: no runs needed, so whatever the profile ran
    files.append(atomic_write_text(ctx.out / "tab_table6.tex", table6.table()))
    header = f"generated by lowbw.report from {ctx.runs_dir} at commit {prov['git_commit']}; do not edit"
    if only:  # the other experiments' numbers stay as they were
        numbers = {**_kept_numbers(ctx.out / "numbers.tex", only), **numbers}
    numbers.update(system_numbers())  # the System section's recorded checks, whatever the profile ran
    ctx.read_store("system")
    if not only:  # the stores every experiment's numbers rest on (with --only, the full build's list stays)
        numbers["BuildStores"] = escape(stores.words(ctx.stores))
    numbers.update(table6.numbers())
    # the front sections' claims, from every number this numbers.tex holds (a kept claim is decided anew)
    numbers = {k: v for k, v in numbers.items() if not k.startswith(claims.PREFIX)}
    numbers.update(claims.numbers(numbers))
    files.append(atomic_write_text(ctx.out / "numbers.tex", numbers_tex(numbers, header)))
    return BuildResult(ctx.out, sections, files)
