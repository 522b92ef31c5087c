import math

import pytest

from lowbw.report.latex import booktabs, escape, fmt_num, fmt_pm, numbers_tex, page_rows
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


def test_long_tables_are_paged_between_groups_and_a_group_longer_than_a_page_is_split():
    rows = [[k, i] for i, k in enumerate("aaabbbbcc")]
    keys = [r[0] for r in rows]
    assert [[r[1] for r in p] for p in page_rows(rows, keys, 4)] == [[0, 1, 2], [3, 4, 5, 6], [7, 8]]
    assert [len(p) for p in page_rows(rows, keys, 3)] == [3, 3, 3]  # b split 3 + 1; c joins its 1
    assert [len(p) for p in page_rows(rows, keys, 5)] == [5, 4]  # whole runs would take 3 pieces: filled
    assert page_rows(rows, keys, 100) == [rows] and page_rows([], [], 5) == []
    with pytest.raises(ValueError, match="limit 0"):
        page_rows(rows, keys, 0)


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


def _training_run(d, method, seed, acc_at, final_acc, ratio=None, adaptive="off", bytes_per_step=1e6):
    """A completed sim run with evaluations at steps 10 and 20: compute 0.1 s and 1 MB on the critical path
    per step (so re-timed at b Mbit/s a step takes 0.1 + 8/b s, latency 0)."""
    from lowbw.runs.io import append_jsonl, atomic_write_json

    d.mkdir(parents=True)
    cfg = {"dataset": "mnist", "workers": 2, "seed": seed, "adaptive": adaptive}
    if ratio is not None:
        cfg["compressor_args"] = {"ratio": ratio}
    atomic_write_json(d / "config.json", {"config": cfg})
    for step, acc in ((10, acc_at[0]), (20, acc_at[1])):
        append_jsonl(d / "metrics.jsonl", {"step": step, "test_acc": acc, "t_virtual": step * 1.0,
                                           "t_virtual_compute": 0.1 * step, "t_virtual_compress": 0.0,
                                           "comm_alpha_terms": 0.0, "comm_beta_bytes": bytes_per_step * step})
    atomic_write_json(d / "summary.json", {"complete": True, "final_test_acc": final_acc, "step": 20,
                                           "t_virtual": 20.0, "bytes_sent_per_worker": bytes_per_step * 20})


def test_e4_tidy_tables_and_numbers_from_runs(tmp_path):
    from lowbw.report.build import Context
    from lowbw.report.e4 import E4

    root = tmp_path / "e4_compression"
    for seed in (0, 1):
        _training_run(root / "method~dense" / f"seed~{seed}", "dense", seed, (0.5, 0.95), 0.95 + seed / 100)
        _training_run(root / "method~topk1" / f"seed~{seed}", "topk1", seed, (0.92, 0.93), 0.90 + seed / 100,
                      bytes_per_step=1e4)
    cfg = {"report": {"bandwidths_mbit": [10, 1000], "latency_ms": 0.0, "focus_mbit": 10}, "targets": {"mnist": 0.9}}
    st = E4.stats(Context(cfg, tmp_path, tmp_path / "out"))
    assert list(st.tables["runs"].columns) == ["method", "seed", "run", "bandwidth_mbit", "ttt_s"]
    assert {"test_acc_mean", "test_acc_std", "bytes_per_worker_step", "p_vs_baseline"} <= set(st.tables["accuracy"])
    t = st.tables["times"].set_index(["method", "bandwidth_mbit"])
    # dense reaches 0.9 at step 20: 20 * (0.1 + 8e6 / 10e6) = 18 s; top-k at step 10 with 1e4 bytes a step
    assert math.isclose(t.loc[("dense", 10.0), "ttt_mean_s"], 18.0)
    assert math.isclose(t.loc[("topk1", 10.0), "ttt_mean_s"], 10 * (0.1 + 8e4 / 10e6))
    n = E4.numbers(st)
    assert n["EFourTttDense"] == "18 s" and n["EFourBest"] == "topk1"
    assert n["EFourBestSpeedup"] == fmt_num(18.0 / 1.08, 3)
    assert n["EFourBestPerMbit"] == r"10\,Mbit/s: topk1; 1{,}000\,Mbit/s: topk1"
    assert n["EFourSigWorse"] == "1" and n["EFourSigWorseList"] == "topk1"


def test_e7_names_follow_the_density_not_the_preset(tmp_path):
    """Renaming E7's presets keeps every macro name; a density without a catalogued word is an error naming it."""
    from lowbw.report.build import Context
    from lowbw.report.e7 import E7

    root = tmp_path / "e7_fluctuating"
    runs = {"coarse": 0.1, "mid": 0.01, "fine": 0.001, "chooser": 0.01}
    for name, ratio in runs.items():
        for seed in (0, 1):
            _training_run(root / f"method~{name}" / f"seed~{seed}", name, seed, (0.5 + seed / 10, 0.95), 0.9,
                          ratio=ratio, adaptive="moo" if name == "chooser" else "off")
    ctx = Context({"targets": {"mnist": 0.9}}, tmp_path, tmp_path / "out")
    n = E7.numbers(E7.stats(ctx))
    assert {"ESevenTttAdaptive", "ESevenTttFixedTen", "ESevenTttFixedOne", "ESevenTttFixedTenth",
            "ESevenAdaptiveVsBest", "ESevenSignificance"} <= set(n)
    assert n["ESevenDensityFixedTenth"] == "0.001" and n["ESevenBestFixed"] == "coarse"
    _training_run(root / "method~odd" / "seed~0", "odd", 0, (0.5, 0.95), 0.9, ratio=0.05)
    with pytest.raises(ValueError, match="E7 fixed top-k density of 'odd' 0.05"):
        E7.stats(Context({"targets": {"mnist": 0.9}}, tmp_path, tmp_path / "out"))


def test_report_command_names_a_bad_argument_before_any_work(tmp_path, capsys):
    from lowbw.cli import main

    cfg = tmp_path / "c.yaml"
    cfg.write_text("profile: tiny\n")
    (tmp_path / "runs").mkdir()
    out = tmp_path / "gen"
    assert main(["report", "--config", str(cfg), "--runs", str(tmp_path / "runs"), "--out", str(out),
                 "--only", "e99"]) == 2
    assert "--only e99 is unknown" in capsys.readouterr().err and not out.exists()
    assert main(["report", "--config", str(tmp_path / "none.yaml")]) == 2
    assert main(["report", "--config", str(cfg), "--runs", str(tmp_path / "runs"), "--out", str(out),
                 "--only", "e1"]) == 0
    assert r"\newcommand{\EOneNotRun}" in (out / "numbers.tex").read_text()


def test_report_of_some_experiments_keeps_the_others_numbers(tmp_path):
    from lowbw.report.build import build

    gen = tmp_path / "gen"
    gen.mkdir()
    (gen / "numbers.tex").write_text("% old\n\\newcommand{\\EOneSettings}{42}\n\\newcommand{\\ENineTarget}{90}\n"
                                     "\\newcommand{\\ETenTarget}{85}\n")
    (tmp_path / "runs").mkdir()
    build({"profile": "tiny", "seeds": [0]}, tmp_path / "runs", gen, only=["e9"])
    text = (gen / "numbers.tex").read_text()
    assert "\\newcommand{\\EOneSettings}{42}" in text and "\\newcommand{\\ETenTarget}{85}" in text
    assert "ENineTarget" not in text and "\\ENineNotRun" in text  # E9 rebuilt: no runs now
