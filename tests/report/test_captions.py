"""A caption describes its own table or figure (lowbw.report.captions): the hand-written figure captions of
paper/sections name no profile (every profile renders them), and a generated table's caption names no profile
but the build's and defines only rows the table holds; the report refuses a table whose caption does not."""

from __future__ import annotations

from pathlib import Path

import pytest

from lowbw.report import captions as cap
from lowbw.report.latex import booktabs

SECTIONS = Path(__file__).resolve().parents[2] / "paper" / "sections"


def test_section_captions_name_no_profile():
    bad = {p.name: b for p in sorted(SECTIONS.glob("*.tex")) for c in cap.captions(p.read_text())
           if (b := cap.profile_problems(c, None))}
    assert not bad, bad


def _table(caption: str, rows: list[str]) -> str:
    return booktabs([[r, "1"] for r in rows], ["method", "x"], caption, "tab:x")


def test_defined_rows_must_be_in_the_table():
    ok = _table("Schemes: b128 = constant batch; adam* = with Adam; dyn = dynamic.", ["b128", "adam128", "dyn"])
    assert cap.problems(ok, "quick") == []
    missing = _table("Schemes (3 seeds): sync = synchronous; local4 = local SGD with $L_W$ = 4.", ["sync", "local16"])
    assert cap.problems(missing, "quick") == [
        "defines row 'local4', which the table does not hold (rows: sync, local16)"]
    # a prefix is not the row: hh2 is not held by hh2overlap; a row 'disjoint, sync' holds sync
    assert cap.problems(_table("x: hh2 = households.", ["disjoint, hh2overlap"]), None)
    assert not cap.problems(_table("x: sync = synchronous.", ["disjoint, sync"]), None)
    # capitalised quantities (Ratio = a / b) are definitions of columns, not rows
    assert not cap.problems(_table("Ratio = advisor / Charles; speed-up = DP / DiLoCo.", ["1B"]), None)


def test_profiles_other_than_the_builds():
    t = _table("The default profile runs four; the quick profile's runs.", ["a"])
    got = cap.problems(t, "quick")
    assert len(got) == 1 and got[0].startswith("names the default profile in a quick build")
    assert cap.problems(_table("As the medium profile runs it.", ["a"]), "medium") == []
    assert cap.problems(_table("As the medium profile runs it.", ["a"]), "quick")


def test_report_refuses_a_caption_that_describes_another_table(tmp_path):
    from lowbw.report.build import run_experiment
    from lowbw.report.experiment import Context, Experiment, Stats

    exp = Experiment("e5", "E5", lambda ctx: Stats({}, {}), lambda st: {},
                     lambda st: _table("b128 = constant; b4096 = huge.", ["b128"]), lambda st: None, "absent")
    with pytest.raises(ValueError, match="defines row 'b4096'"):
        run_experiment(exp, Context({"profile": "quick"}, tmp_path, tmp_path))
