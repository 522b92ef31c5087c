"""Snakemake logger plugin ``lowbw``: the workflow's progress line (:mod:`lowbw.workflow.progress`) in place of
the job log.

    PYTHONPATH=lowbw/snakemake_logger snakemake --cores 2 --logger lowbw

Snakemake finds logger plugins as top-level packages named ``snakemake_logger_plugin_*`` on ``sys.path``; an
editable install of lowbw does not put this directory there, so the Makefile adds it to ``PYTHONPATH``. The
handler writes to stderr in place of Snakemake's own stream handler: one progress line, redrawn in place on a
terminal and printed as a plain line at most every ``--logger-lowbw-every`` seconds (and at each end) when
stderr is not one (CI logs); warnings, errors and a failed job's message and log are printed in full as
Snakemake formats them. Snakemake's complete log is still written to ``.snakemake/log/``. A dry run prints
what Snakemake prints. A run that had jobs to do leaves its record (command, times, jobs, load) in
``last_run.json`` beside the durations, for the reference build's provenance (:mod:`lowbw.workflow.reference`).
"""

import json
import logging
import shutil
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from snakemake_interface_logger_plugins.base import LogHandlerBase
from snakemake_interface_logger_plugins.common import LogEvent
from snakemake_interface_logger_plugins.settings import LogHandlerSettingsBase

from lowbw.workflow.progress import HISTORY, LAST_RUN, Durations, Progress

__all__ = ["LogHandler", "LogHandlerSettings"]

_ERRORS = {LogEvent.JOB_ERROR, LogEvent.GROUP_ERROR, LogEvent.ERROR}
# plain messages worth a line of their own (the rest is in the complete log)
_SHOWN = ("Nothing to be done", "Complete log", "Will exit after finishing", "Cancelling", "Terminating")


@dataclass
class LogHandlerSettings(LogHandlerSettingsBase):
    history: str = field(default=HISTORY, metadata={
        "help": "JSON file keeping the measured job durations between runs", "env_var": False, "required": False})
    every: float = field(default=60.0, metadata={
        "help": "seconds between progress lines when stderr is not a terminal", "env_var": False,
        "required": False})


def _get(obj: Any, name: str, default: Any = None) -> Any:
    if isinstance(obj, dict):
        return obj.get(name, default)
    return getattr(obj, name, default)


class LogHandler(LogHandlerBase):
    def __post_init__(self) -> None:
        settings = self.settings if isinstance(self.settings, LogHandlerSettings) else LogHandlerSettings()
        self.every = float(settings.every)
        self.stream = sys.stderr
        self.tty = self.stream.isatty()
        self.dryrun = bool(getattr(self.common_settings, "dryrun", False))
        self.history = settings.history
        self.progress = Progress(Durations(settings.history))
        self.planned = False
        self.drawn = ""  # the line on screen (tty), to be cleared before other output
        self.printed_at = 0.0
        self.io = threading.Lock()
        self.stop = threading.Event()
        if self.tty and not self.dryrun:
            threading.Thread(target=self._tick, daemon=True, name="lowbw-progress").start()

    writes_to_stream = True
    writes_to_file = False
    has_filter = True
    has_formatter = False
    needs_rulegraph = False

    def _tick(self) -> None:
        while not self.stop.wait(2.0):
            if self.planned:
                self._show(force=False)

    def _write(self, text: str) -> None:
        with self.io:
            if self.drawn:
                self.stream.write("\r\x1b[K")
                self.drawn = ""
            self.stream.write(text if text.endswith("\n") else text + "\n")
            self.stream.flush()

    def _show(self, force: bool) -> None:
        line = self.progress.line()
        with self.io:
            if self.tty:
                line = line[: max(20, shutil.get_terminal_size().columns - 1)]  # a wrapped line is not redrawn
                self.stream.write("\r\x1b[K" + line)
                self.drawn = line
            elif force or time.monotonic() - self.printed_at >= self.every:
                self.stream.write(line + "\n")
                self.printed_at = time.monotonic()
            else:
                return
            self.stream.flush()

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self._emit(record)
        except Exception:  # a broken progress line must not stop the workflow
            self.handleError(record)

    def _emit(self, record: logging.LogRecord) -> None:
        event = getattr(record, "event", None)
        if self.dryrun:
            if record.levelno >= logging.INFO and (record.msg is not None or event is not None):
                self._write(self.format(record))
            return
        p = self.progress
        if event == LogEvent.RESOURCES_INFO:
            provided = getattr(record, "provided_resources", None) or {}
            p.cores = getattr(record, "cores", None) or p.cores
            nodes = getattr(record, "nodes", None)  # a cluster executor: --jobs at once
            p.remote = nodes if isinstance(nodes, int) and 0 < nodes < 2**31 else p.remote
            p.machine = _get(provided, "machine", None) or p.machine
        elif event == LogEvent.RUN_INFO:
            p.plan(getattr(record, "stats", {}) or {}, at=record.created)
            self.planned = True
            self._show(force=True)
        elif event == LogEvent.JOB_INFO:
            res = getattr(record, "resources", None) or {}
            p.started(int(record.jobid), record.rule_name, getattr(record, "wildcards", None),
                      threads=int(getattr(record, "threads", None) or _get(res, "_cores", 1) or 1),
                      machine=int(_get(res, "machine", 0) or 0), at=record.created)
            self._show(force=False)
        elif event == LogEvent.JOB_FINISHED:
            p.finished(int(record.job_id), at=record.created)
        elif event == LogEvent.PROGRESS:
            p.done, p.total = int(record.done), int(record.total)
            self._show(force=p.done >= p.total)
        elif event in _ERRORS or record.levelno >= logging.WARNING:
            self._write(self.format(record))
            if self.planned:
                self._show(force=True)
        elif event is None and isinstance(record.msg, str) and record.msg.startswith(_SHOWN):
            self._write(self.format(record))

    def close(self) -> None:
        self.stop.set()
        if self.planned and self.history:
            try:
                path = Path(self.history).with_name(LAST_RUN)
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(json.dumps(self.progress.record(sys.argv), indent=1) + "\n")
            except OSError:
                pass
        with self.io:
            if self.drawn:
                self.stream.write("\n")
                self.drawn = ""
                self.stream.flush()
        super().close()
