import math

import pytest

from lowbw.report.latex import booktabs, escape, fmt_num, fmt_pm, numbers_tex
from lowbw.report.stats import mean_std, welch


def test_escape():
    assert escape("top_k 50% & #1") == r"top\_k 50\% \& \#1"


def test_macro_names_come_from_the_catalogue_only():
    """A setting outside the explicit word maps and a name outside the catalogue are errors naming them."""
    from lowbw.report.catalog import E7_DENSITIES, MACROS, check_numbers, word

    assert word(E7_DENSITIES, 0.01, "E7 density") == "One"
    with pytest.raises(ValueError, match="E7 density 0.05 has no macro word"):
        word(E7_DENSITIES, 0.05, "E7 density")
    check_numbers("e4", {"EFourTarget": "90"})
    with pytest.raises(ValueError, match="EFourTttTopkOne"):
        check_numbers("e4", {"EFourTttTopkOne": "1 s"})
    with pytest.raises(ValueError, match="EOneSettings"):  # another experiment's name
        check_numbers("e4", {"EOneSettings": "3"})
    assert all(name.isalpha() for name in MACROS)


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


def test_e1_section_reports_the_targets_from_the_rows(tmp_path):
    import json

    from lowbw.report.build import Context
    from lowbw.report.e1 import E1

    def row(alg, n, rate, size, t, err):
        bound = 2 * (n - 1) / n * size * 8 / rate
        return {"workers": n, "rate_mbit": rate, "size_mb": size, "algorithm": alg, "ok": True, "time_s": t,
                "frac_of_bound": bound / t, "model_s": t * (1 + err), "model_rel_err": err, "timing": "measured",
                "emulation": "netns-tc"}

    rows = [row("ring", 2, 100, 10, 0.88, -0.01), row("native", 2, 100, 10, 0.90, 0.02),
            row("ps", 2, 100, 10, 1.68, -0.12), row("ring", 2, 10, 10, 8.6, 0.03),
            row("native", 2, 10, 10, 8.5, 0.04), row("ps", 2, 10, 10, 16.8, 0.01)]
    (tmp_path / "bench").mkdir()
    (tmp_path / "bench" / "collectives.json").write_text(json.dumps({"rows": rows}))
    st = E1.stats(Context({}, tmp_path, tmp_path / "out"))
    n = E1.numbers(st)
    assert n["EOneRingBoundFracMin"] == fmt_num(100 * 0.8 / 0.88, 3)
    assert n["EOneRingOverNativeMax"] == fmt_num(8.6 / 8.5, 3)
    assert n["EOneModelWorstAlg"] == "ps" and n["EOneModelWorstAlgErr"] == fmt_num(12.0, 2)
    assert (n["EOneModelAlgsWithinTen"], n["EOneModelAlgs"]) == ("2", "3")
    assert "tab:e1" in E1.table(st)
    assert list(st.tables["settings"].columns[:5]) == ["algorithm", "workers", "rate_mbit", "size_mb", "time_s"]
