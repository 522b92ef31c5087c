import math

import pytest

from lowbw.report.latex import booktabs, escape, fmt_num, fmt_pm, macro_name, numbers_tex
from lowbw.report.stats import mean_std, welch


def test_escape_and_macro_names():
    assert escape("top_k 50% & #1") == r"top\_k 50\% \& \#1"
    assert macro_name("e1", "ring", 100) == "EOneRingOneZeroZero"
    with pytest.raises(ValueError):
        macro_name("_", "")


def test_numbers_tex_sorted_and_checked():
    tex = numbers_tex({"B": "2", "A": "1"}, header="gen")
    assert tex.splitlines() == ["% gen", r"\newcommand{\A}{1}", r"\newcommand{\B}{2}"]
    with pytest.raises(ValueError, match="letters only"):
        numbers_tex({"A1": "x"})


def test_fmt_num():
    assert fmt_num(0.12345) == "0.123"
    assert fmt_num(12345) == "12{,}345"
    assert fmt_num(float("nan")) == "--" and fmt_num(None) == "--"
    assert fmt_num(3.0) == "3" and fmt_num(10.0) == "10"
    assert fmt_pm(0.9123, 0.0041) == r"0.912 $\pm$ 0.0041"


def test_booktabs_shape_checked():
    t = booktabs([["a", "1"]], ["x", "y"], "cap", "tab:x")
    assert r"\toprule" in t and r"\label{tab:x}" in t and "a & 1" in t
    with pytest.raises(ValueError, match="2 cells"):
        booktabs([["a"]], ["x", "y"], "cap", "tab:x")


def test_mean_std_and_welch():
    m = mean_std([1.0, 2.0, 3.0])
    assert m.mean == 2.0 and math.isclose(m.std, 1.0) and m.n == 3
    assert math.isnan(mean_std([1.0]).std)
    r = welch([0.90, 0.91, 0.92], [0.80, 0.81, 0.79])
    assert r.significant and r.p < 0.01
    r = welch([0.90, 0.91, 0.92], [0.905, 0.915, 0.91])
    assert not r.significant
    assert not welch([1.0], [2.0, 3.0]).significant
