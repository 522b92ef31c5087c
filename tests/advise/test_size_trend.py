"""lowbw.advise.size_trend: the power-law fit and its intervals, the step multiplier, the trends' points, Charles
et al.'s law, and the advisor's hook (a row beyond the measured sizes marked ``extrapolated (size)``, the law it
used and the spread printed)."""

from __future__ import annotations

import argparse
import json
import math
import random

import pytest

from lowbw.advise import cli as advise_cli
from lowbw.advise import size_trend as st


def test_fit_power_recovers_a_law_and_its_interval_covers_it():
    n = [3e4, 1e5, 3e5, 1e6]
    exact = st.fit_power(n, [18.0 * x ** -0.095 for x in n])
    assert pytest.approx(18.0, rel=1e-9) == exact.A and exact.alpha == pytest.approx(-0.095, abs=1e-12)
    rng = random.Random(0)
    noisy = st.fit_power(n * 3, [18.0 * x ** -0.095 * math.exp(rng.gauss(0, 0.01)) for x in n * 3])
    assert noisy.alpha_lo < -0.095 < noisy.alpha_hi and noisy.alpha_hi - noisy.alpha_lo < 0.05
    joint = st.fit_power(n * 2, [19.0 * x ** -0.1 * m ** 0.012 for x, m in zip(n * 2, [1] * 4 + [8] * 4)],
                         [1] * 4 + [8] * 4)
    assert joint.beta == pytest.approx(0.012, abs=1e-9)
    assert joint(1e5, 8) == pytest.approx(19 * 1e5 ** -0.1 * 8 ** 0.012)


def test_fit_power_refuses_what_it_cannot_fit():
    with pytest.raises(ValueError, match="positive"):
        st.fit_power([1e4, 1e5], [2.0, -1.0])
    with pytest.raises(ValueError, match="do not determine"):
        st.fit_power([1e4, 1e4, 1e4], [2.0, 2.1, 2.2])


def test_step_multiplier_both_ways():
    dense = [(0, 4.0), (100, 3.0), (200, 2.5), (400, 2.0)]
    # ends at 2.5: dense got there at step 200 of 400 -> the method needed 2x dense's steps
    assert st.step_multiplier(dense, [(0, 4.0), (200, 3.0), (400, 2.5)]) == pytest.approx(2.0)
    # ends at 2.75: dense's running minimum crosses it halfway between 100 and 200
    assert st.step_multiplier(dense, [(0, 4.0), (400, 2.75)]) == pytest.approx(400 / 150)
    # ends below dense: the method reached dense's final 2.0 at step 300 of dense's 400
    assert st.step_multiplier(dense, [(0, 4.0), (200, 2.2), (400, 1.8)]) == pytest.approx(300 / 400)


def _records():
    """DP and DiLoCo M=4 at three sizes whose gap to DP shrinks as N^-0.01, two seeds."""
    out = []
    for n in (3e4, 1e5, 3e5):
        for seed in (0, 1):
            dp = 20 * n ** -0.1
            for fam, w, final in (("dense", 1, dp), ("diloco", 4, dp * 1.1 * n ** -0.01)):
                out.append({"family": fam, "workers": w, "params": n, "seed": seed,
                            "curve": [(0, 4.2), (50, final + 0.3), (100, final)]})
    return out


def test_points_and_trend():
    pts = st.points(_records())
    assert [(p["family"], p["params"]) for p in pts] == [("diloco", 30000), ("diloco", 100000), ("diloco", 300000)]
    assert all(p["seeds"] == 2 and p["dense_seeds"] == 2 for p in pts)
    f = st.trend(pts, "diloco", 4, "loss_ratio")
    assert f.alpha == pytest.approx(-0.01, abs=1e-9) and pytest.approx(1.1, rel=1e-9) == f.A
    assert st.trend(pts, "sparsify", 4, "loss_ratio") is None


def test_charles_law_is_their_fits_ratio():
    assert st.charles_ratio(35e6, 4) == pytest.approx(19.762 / 18.129 * 35e6 ** (-0.0992 + 0.0953))
    # their fits reproduce their Table 4's M=4 gap at 2.4B within a percent
    row = st.CHARLES_TABLE4[2.4e9]
    assert st.charles_ratio(2.4e9, 4) == pytest.approx(row[3] / row[0], rel=0.01)
    joint = 19.226 * 1e9 ** -0.0985 * 16 ** 0.0116 / (18.129 * 1e9 ** -0.0953)
    assert st.charles_ratio(1e9, 16) == pytest.approx(joint)


def test_answer_inside_and_beyond_the_measured_sizes():
    pts = st.points(_records())
    inside = st.answer(pts, "diloco", 1e5, 4)
    assert not inside.extrapolated and inside.used == "ours" and inside.loss_ratio == pytest.approx(1.1 * 1e5 ** -0.01)
    beyond = st.answer(pts, "diloco", 1e9, 4)
    assert beyond.extrapolated and beyond.used == "Charles et al."
    assert beyond.spread == pytest.approx(abs(1.1 * 1e9 ** -0.01 - st.charles_ratio(1e9, 4)))
    assert "used Charles et al.'s law" in beyond.words() and "spread" in beyond.words()
    assert st.answer(pts, "lowrank", 1e9, 4) is None


def test_read_writes_nothing_and_reads_the_reports_table(tmp_path):
    f = tmp_path / "e12_trends.csv"
    f.write_text("# source: test\nfamily,workers,params,loss_ratio,step_multiplier,seeds,dense_seeds\n"
                 "diloco,4,30000,1.05,1.4,3,3\ndiloco,4,300000,1.03,\n")
    rows = st.read(f)
    assert rows[0] == {"family": "diloco", "workers": 4, "params": 30000.0, "loss_ratio": 1.05,
                       "step_multiplier": 1.4}
    assert math.isnan(rows[1]["step_multiplier"])
    with pytest.raises(ValueError, match="nosuch.csv"):
        st.read(tmp_path / "nosuch.csv")


@pytest.mark.slow  # the advisor's bytes for a 1.3B-parameter transformer: ~25 s of CPU
def test_advise_marks_rows_beyond_the_measured_sizes(tmp_path, monkeypatch, capsys):
    pts = st.points(_records())
    f = tmp_path / "trend.csv"
    f.write_text("family,workers,params,loss_ratio,step_multiplier,seeds,dense_seeds\n" + "".join(
        f"{p['family']},{p['workers']},{p['params']},{p['loss_ratio']},{p['step_multiplier']},2,2\n" for p in pts))
    monkeypatch.setattr(st, "GENERATED", f)
    parser = argparse.ArgumentParser()
    advise_cli.add_parser(parser.add_subparsers())
    # a 1.3B-parameter transformer lies beyond the measured 3e4-3e5; gpt-mini (106,880) inside them
    for model, marked in ((["--params", "1.3e9"], True), (["--model", "gpt-mini"], False)):
        args = parser.parse_args(["advise", *model, "--workers", "4", "--rate", "100mbit", "--step-ms", "50",
                                  "--json"])
        assert advise_cli.main(args) == 0
        out = json.loads(capsys.readouterr().out)
        conf = {r["method"]: r["confidence"] for r in out["ranking"]}
        if marked:
            assert conf["diloco16"] == st.EXTRAPOLATED and conf["dense"] != st.EXTRAPOLATED
            assert any("used Charles et al.'s law" in ln for ln in out["size_trend"])
        else:
            assert st.EXTRAPOLATED not in conf.values() and out["size_trend"] == []
