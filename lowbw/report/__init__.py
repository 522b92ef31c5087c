"""Results -> paper: tables (booktabs), figures (seaborn, PDF + PNG), ``numbers.tex`` and findings."""

from lowbw.report.build import BuildResult, Context, Section, build

__all__ = ["build", "BuildResult", "Context", "Section"]
