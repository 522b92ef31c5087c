"""The abstract's list of the measurement stores kept in the repository names exactly those a build's reported
numbers rest on (lowbw.report.stores, Context.read_store)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest

from lowbw.report.build import run_experiment
from lowbw.report.experiment import Context, Experiment, Stats
from lowbw.report.stores import STORES, words

ROOT = Path(__file__).resolve().parents[2]
HOST = ROOT / "paper" / "measured" / "host"


def test_words_follow_the_papers_order_and_an_unknown_store_is_an_error():
    assert words({"host", "gpu"}) == "GPU training runs and host benchmarks a build does not repeat"
    assert words({"system"}) == STORES["system"]
    assert words({"anchor", "lm", "scaling"}) == ("the language model's runs near convergence, the scaling "
                                                  "campaign's runs and the nanoGPT anchor's runs")
    with pytest.raises(ValueError, match=r"unknown measurement store\(s\) \['tapes'\]"):
        words({"gpu", "tapes"})


def test_every_store_of_the_repository_has_words():
    """A new directory under paper/measured/ needs its words here, or the abstract could not name it."""
    kept = {p.stem for p in (ROOT / "paper" / "measured").iterdir()}
    assert kept <= set(STORES), sorted(kept - set(STORES))


def _experiment(reads: str, result):
    def stats(ctx):
        ctx.read_store(reads)
        return result

    return Experiment("e11", "E11 test", stats, lambda st: {}, lambda st: "", lambda st: None, "nothing")


def test_a_store_read_by_an_experiment_that_is_not_reported_is_not_listed(tmp_path):
    ctx = Context({}, tmp_path / "runs", tmp_path / "out")
    run_experiment(_experiment("lm", None), ctx)  # read, then found nothing to report: not the paper's evidence
    assert ctx.stores == set()


def test_host_benchmarks_are_listed_only_when_read_from_the_store(tmp_path):
    stored = Context({"bench": {"stored": str(HOST)}}, tmp_path / "runs", tmp_path / "out")
    assert stored.bench("models")["provenance"]["origin"] == "stored"
    assert stored.stores == {"host"}
    (tmp_path / "runs" / "bench").mkdir(parents=True)
    shutil.copy(HOST / "models.json", tmp_path / "runs" / "bench" / "models.json")  # measured by this build
    measured = Context({"bench": {"stored": str(HOST)}}, tmp_path / "runs", tmp_path / "out")
    assert measured.bench("models")["provenance"]["origin"] == "measured"
    assert measured.stores == set()


def test_a_reported_experiment_lists_its_store(tmp_path):
    ctx = Context({}, tmp_path / "runs", tmp_path / "out")
    st = Stats({"t": pd.DataFrame({"x": [1]})}, {})
    exp = _experiment("scaling", st)
    run_experiment(exp, ctx)
    assert ctx.stores == {"scaling"}
