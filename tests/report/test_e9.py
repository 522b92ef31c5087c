"""E9's report on the language model: the methods with numbers of their own (catalog.E9_METHODS: diloco16 and
its overlapped and gossip variants) get their final loss and, in words, whether they reached the target with
every seed, after how many MB and in what time at 10 Mbit/s."""

from __future__ import annotations

from lowbw.report.catalog import check_numbers


def _run(root, method, sync, seed, step_s, step_bytes, final_loss, losses=(3.0, 2.4)):
    """A completed language-model run: evaluations at steps 10 and 20 (val_loss ``losses``); every step
    ``step_s`` virtual seconds of communication-free compute and ``step_bytes`` bytes in all."""
    from lowbw.runs.io import append_jsonl, atomic_write_json

    d = root / "e9_lm" / f"method~{method}" / f"seed~{seed}"
    d.mkdir(parents=True)
    atomic_write_json(d / "config.json", {"config": {"dataset": "shakespeare", "model": "gpt-mini", "workers": 4,
                                                     "seed": seed, "sync": sync, "bandwidth_mbit": 10.0}})
    for step, loss in zip((10, 20), losses):
        append_jsonl(d / "metrics.jsonl", {"step": step, "val_loss": loss, "t_virtual": step * step_s,
                                           "t_virtual_compute": step * step_s, "t_virtual_compress": 0.0,
                                           "comm_alpha_terms": 0.0, "comm_beta_bytes": 0.0,
                                           "bytes_sent": step * step_bytes})
    atomic_write_json(d / "summary.json", {"complete": True, "final_val_loss": final_loss, "step": 20,
                                           "t_virtual": 20 * step_s, "bytes_sent_total": 20 * step_bytes,
                                           "bytes_sent_per_worker": 20 * step_bytes / 4})


def test_the_overlapped_and_gossip_methods_have_their_own_numbers(tmp_path):
    from lowbw.report.build import Context
    from lowbw.report.e9 import E9LM

    for seed in (0, 1):
        _run(tmp_path, "dense", "sync", seed, 1.0, 4e6, 2.30)
        _run(tmp_path, "diloco16", "diloco", seed, 1.0, 4e6 / 16, 2.35)
        _run(tmp_path, "diloco16_eager", "diloco", seed, 1.0, 4e6 / 16, 2.36 + 0.02 * seed)
        _run(tmp_path, "noloco16", "noloco", seed, 1.0, 4e6 / 32, 2.45)
    st = E9LM.stats(Context({"targets": {"shakespeare": "val_loss<=2.5"}}, tmp_path, tmp_path / "out"))
    fam = st.tables["accuracy"].set_index("method")["family"]
    assert fam["noloco16"] == fam["diloco16_eager"] == "rare" and fam["dense"] == "per step"
    n = E9LM.numbers(st)
    check_numbers("e9lm", n)
    assert n["ENineLmEagerLoss"] == "2.37" and n["ENineLmNolocoLoss"] == "2.45"
    # 20 steps x 125 kB in all, over 4 workers, until step 20
    assert n["ENineLmNolocoReached"].startswith("reaches the target after 0.625\\,MB per worker, in ")
    assert n["ENineLmDilocoReached"].startswith("reaches the target after 1.25\\,MB per worker")
    assert n["ENineLmEagerReached"].split(", in ")[1] == n["ENineLmDilocoReached"].split(", in ")[1]
    assert "ENineLmDelayedLoss" not in n  # a method the grid did not run writes nothing
    tab = E9LM.table(st)
    assert r"noloco16" in tab and r"diloco16\_eager" in tab


def test_a_method_that_sent_nothing_before_the_target_has_no_point_on_the_log_axes(tmp_path):
    """The tiny profile's runs can reach the target before any exchange (0 bytes): the log-log figure leaves that
    point out instead of failing on log10(0)."""
    from lowbw.report.e9 import E9LM
    from lowbw.report.experiment import Context

    for seed in (0, 1):
        _run(tmp_path, "dense", "sync", seed, 1.0, 4e6, 2.30)
        _run(tmp_path, "sparta", "sparta", seed, 1.0, 0.0, 2.40)
    st = E9LM.stats(Context({"targets": {"shakespeare": "val_loss<=2.5"}}, tmp_path, tmp_path / "out"))
    fig = E9LM.figure(st)
    assert fig is not None


def _report(tmp_path, capsys) -> tuple[int, list[str]]:
    """``lowbw report --only e9lm`` on ``tmp_path/runs`` into ``tmp_path/out``: (exit status, stderr lines)."""
    from lowbw.cli import main

    cfg = tmp_path / "config.yaml"
    cfg.write_text("targets:\n  shakespeare: val_loss<=2.5\n")
    rc = main(["report", "--config", str(cfg), "--runs", str(tmp_path / "runs"), "--out", str(tmp_path / "out"),
               "--only", "e9lm"])
    return rc, capsys.readouterr().err.splitlines()


def test_a_grid_without_its_dense_runs_is_reported_as_not_run_naming_them(tmp_path, capsys):
    """Every number of E9 compares with dense at the same number of workers: without a completed dense run the
    report says so in one line and writes the NotRun macro with that reason, so the paper still builds."""
    for seed in (0, 1):
        _run(tmp_path / "runs", "diloco16", "diloco", seed, 1.0, 4e6 / 16, 2.35)
    rc, err = _report(tmp_path, capsys)
    assert rc == 0
    assert err == ["lowbw report: e9lm reported as not run: runs/e9_lm has no completed run of its baseline "
                   "method=dense with workers=4"]
    numbers = (tmp_path / "out" / "numbers.tex").read_text()
    assert "\\newcommand{\\ENineLmNotRun}{runs/e9\\_lm has no completed run of its baseline" in numbers
    assert "ENineLmDiloco" not in numbers


def test_an_incomplete_run_fails_the_report_in_one_line_before_writing_anything(tmp_path, capsys):
    for seed in (0, 1):
        _run(tmp_path / "runs", "dense", "sync", seed, 1.0, 4e6, 2.30)
    (tmp_path / "runs" / "e9_lm" / "method~dense" / "seed~1" / "summary.json").unlink()
    rc, err = _report(tmp_path, capsys)
    assert rc == 2
    assert len(err) == 1 and "e9_lm/method~dense/seed~1: summary.json is missing" in err[0]
    assert not (tmp_path / "out").exists()


def test_mb_to_target_counts_every_seed_not_the_survivors(tmp_path):
    """Table 16's "MB to target": with one of three seeds never at the target, the cell is the median over all
    three with the arrivals (2/3), not the mean of the two that arrived; with two of three never, "--"."""
    from lowbw.report.e9 import E9LM
    from lowbw.report.experiment import Context

    for seed in (0, 1, 2):
        _run(tmp_path, "dense", "sync", seed, 1.0, 4e6, 2.30)
        # seed 0 arrives at step 10 (0.1 MB per worker), seed 1 at step 20 (0.2 MB), seed 2 never
        _run(tmp_path, "diloco16", "diloco", seed, 1.0, 4e4, 2.35, [(2.4, 2.4), (3.0, 2.4), (3.0, 2.6)][seed])
        _run(tmp_path, "noloco16", "noloco", seed, 1.0, 4e4, 2.35, [(2.4, 2.4), (3.0, 2.6), (3.0, 2.6)][seed])
    st = E9LM.stats(Context({"targets": {"shakespeare": "val_loss<=2.5"}}, tmp_path, tmp_path / "out"))
    a = st.tables["accuracy"].set_index("method")
    assert (a.loc["diloco16", "bytes_reached"], a.loc["diloco16", "bytes_seeds"]) == (2, 3)
    assert a.loc["diloco16", "bytes_median"] == 0.2e6  # median of {0.1, 0.2, inf} MB, not the survivors' 0.15
    rows = {line.split("&")[0].strip(): line for line in E9LM.table(st).splitlines() if "&" in line}
    assert "median 0.200 (2/3)" in rows["diloco16"] and "-- (1/3)" in rows["noloco16"]
    assert "& 20 &" in rows["dense"]  # every seed arrived: the mean, 20 steps x 4 MB over 4 workers
