"""One config on the sim backend (worker threads in one process) and on procs (one process per worker, gloo)
gives the same run: the helpers the tests of each sync scheme and compressor share to check it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from lowbw.runs.io import read_jsonl
from lowbw.train.launch import run

QUALITY = ("loss", "acc", "val_loss", "test_loss", "test_acc")  # compared on the lines where sim logged them


def sim_and_procs(make_cfg: Callable[..., Any], out: Path, **kw: Any) -> tuple[list[dict], list[dict]]:
    """The metrics lines of ``make_cfg(backend=<backend>, **kw)`` run on sim and on procs, in ``out/<backend>``."""
    lines = []
    for backend in ("sim", "procs"):
        run(make_cfg(backend=backend, **kw), out / backend, quiet=True)
        lines.append(read_jsonl(out / backend / "metrics.jsonl"))
    return lines[0], lines[1]


def assert_same_metrics(a: list[dict], b: list[dict]) -> None:
    """Line by line: the same step, samples and bytes sent; the quality metrics to 1e-5 and the virtual clock to
    a relative 1e-12 (clock=model: no measured time in it). 1e-5, not equality: sim's default dense average
    (``sim_dense: direct``) adds the workers' rows in rank order where procs' ring adds each segment from its
    own rank on, which differs in float32's last bits from three workers on (README, "The language-model
    workload"); over a few steps that stays far below 1e-5, over a whole run it does not."""
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert (x["step"], x["samples"], x["bytes_sent"]) == (y["step"], y["samples"], y["bytes_sent"])
        for k in QUALITY:
            if x.get(k) is not None:
                assert y[k] == pytest.approx(x[k], abs=1e-5), (x["step"], k)
        assert y["t_virtual"] == pytest.approx(x["t_virtual"], rel=1e-12), x["step"]
