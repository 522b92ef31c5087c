"""Results -> paper: per experiment tidy statistics tables (``Stats``), rendered into tables (booktabs),
figures (seaborn, PDF + PNG) and ``numbers.tex`` (the macros of :mod:`lowbw.report.catalog`)."""

from lowbw.report.build import BuildResult, Context, Experiment, Section, Stats, build

__all__ = ["build", "BuildResult", "Context", "Experiment", "Section", "Stats"]
