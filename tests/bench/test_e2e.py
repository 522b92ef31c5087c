"""E8's benchmark (lowbw.bench.e2e): method presets, the per-cell row from two run directories, the summary,
and bad flags rejected before any work. The real sim-vs-testbed run is exercised by the tiny workflow."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from lowbw.bench import e2e
from lowbw.bench.e8 import calibration as e8_calibration
from lowbw.bench.e8 import grid as e8_grid
from lowbw.bench.e8 import rows as e8_rows
from lowbw.measure import presets
from lowbw.runs.io import append_jsonl
from tests.helpers import refused, usage_error


def _write_run(d, lines):
    d.mkdir(parents=True)
    for x in lines:
        append_jsonl(d / "metrics.jsonl", x)


def _line(step, t, comm, meta=0.0, loss=1.0, acc=None, alpha=0.0, beta=0.0):
    x = {"step": step, "loss": loss, "bytes_sent": 1000 * step,
         "t_virtual": t, "t_virtual_compute": 0.2 * t, "t_virtual_compress": 0.1 * t, "t_virtual_comm": comm,
         "t_step": t, "t_meta": meta, "t_compute": 0.2 * t, "t_compress": 0.1 * t, "t_comm": comm,
         "comm_alpha_terms": alpha, "comm_beta_bytes": beta}
    if acc is not None:
        x["test_acc"] = acc
    return x


def test_method_presets_and_ddp_suffix():
    methods = {"dense": {"compressor": "none"}, "fp16": {"compressor": "fp16"}}
    assert presets.method_config("fp16", methods) == {"compressor": "fp16"}
    assert presets.method_config("fp16+ddp", methods) == {"compressor": "fp16", "ddp_hook": True}
    with pytest.raises(ValueError, match="'nope' is not a preset"):
        presets.method_config("nope", methods)
    with pytest.raises(ValueError, match="only suffix is \\+ddp"):
        presets.method_config("fp16+x", methods)
    twin = e8_grid.sim_twin({"ddp_hook": True, "compressor": "fp16", "backend": "procs"})
    assert twin == {"compressor": "fp16", "backend": "sim", "granularity": "flat"}


def test_cell_row_from_two_runs(tmp_path):
    # sim: 0.1 s/step; procs: 0.125 s/step of which 0.005 s bookkeeping -> measured 0.12, err -1/6
    sim = [_line(0, 0.0, 0.0), _line(10, 1.0, 0.5, alpha=20, beta=1e5), _line(20, 2.0, 1.0, acc=0.9, alpha=40,
                                                                              beta=2e5)]
    procs = [_line(0, 0.0, 0.0), _line(10, 1.25, 0.6, meta=0.05), _line(20, 2.5, 1.2, meta=0.1, acc=0.9)]
    _write_run(tmp_path / "sim", sim)
    _write_run(tmp_path / "procs", procs)
    cfg = {"clock_compute_scale": 1.5, "latency_ms": 0.0}
    row = e8_rows.cell_row(tmp_path / "sim", tmp_path / "procs", method="topk1", workers=2, rate=10.0, steps=20,
                       target=0.8, probe_res={"overhead_ms": 1.0, "emulation": "netns-tc"}, cfg=cfg)
    assert row["window"] == [10, 20]
    assert row["predicted_step_s"] == pytest.approx(0.1)
    assert row["measured_step_s"] == pytest.approx(0.12)
    assert row["err_step"] == pytest.approx(0.1 / 0.12 - 1)
    assert row["predicted_comm_s"] == pytest.approx(0.05) and row["measured_comm_s"] == pytest.approx(0.06)
    assert row["bookkeeping_s"] == pytest.approx(0.005)
    # uncalibrated: compute+compress without the 1.5 factor, comm from the coefficients at the nominal rate
    nominal = (0.02 + 0.01) / 1.5 + 1e4 * 8 / 10e6
    assert row["nominal_step_s"] == pytest.approx(nominal)
    assert row["predicted_ttt_s"] == 2.0 and row["measured_ttt_s"] == pytest.approx(2.4)
    assert row["err_ttt"] == pytest.approx(2.0 / 2.4 - 1)
    assert row["loss_identical"] and row["max_loss_diff"] == 0.0
    assert row["shaper_burst_bytes"] == 0.0  # the config had no bucket
    # 1e4 bytes a step at 10 Mbit/s x 1448/1514 take 8.4 ms of the 0.1 s step: not link-bound, although the
    # step's communication (0.05 s, per-message costs) is half of it
    assert row["predicted_wire_s"] == pytest.approx(1e4 * 8 / (10e6 * 1448 / 1514))
    assert row["link_bound"] is False
    s = e8_rows.summarise([row])
    assert s["worst_abs_err_step_by_method"]["topk1"] == pytest.approx(abs(row["err_step"]))
    assert s["target"]["met"] is False and s["target"]["n"] == 1


def test_sim_side_models_the_testbeds_token_bucket():
    import argparse

    from lowbw.net.link import LinkSpec

    args = argparse.Namespace(model="mlp", dataset="mnist", batch_size=128, seed=0, target=0.8)
    burst = LinkSpec().tbf_params(100e6)["burst"]  # what the testbed's shapers get at 100 Mbit/s
    pr = {"overhead_ms": 1.0, "compute_scale": 1.0, "shaper_burst_bytes": burst}
    cfg = e8_grid.cell_config({"compressor": "topk"}, 2, 100.0, 20, args, pr)
    assert cfg["clock_shaper_burst_bytes"] == burst and e8_grid.sim_twin(cfg)["clock_shaper_burst_bytes"] == burst
    # a probe without a shaped testbed (loopback emulation, old files): a plain link
    assert e8_grid.cell_config({}, 2, 100.0, 20, args, e8_grid.UNCALIBRATED)["clock_shaper_burst_bytes"] == 0.0


def test_cell_row_refuses_mismatched_logs(tmp_path):
    _write_run(tmp_path / "sim", [_line(10, 1.0, 0.5), _line(20, 2.0, 1.0)])
    _write_run(tmp_path / "procs", [_line(10, 1.0, 0.5), _line(25, 2.0, 1.0)])
    with pytest.raises(RuntimeError, match="different steps"):
        e8_rows.cell_row(tmp_path / "sim", tmp_path / "procs", method="m", workers=2, rate=10.0, steps=20, target=0.9,
                     probe_res={"overhead_ms": 0.0}, cfg={"clock_compute_scale": 1.0, "latency_ms": 0.0})


@refused({
    "--methods dense,bogus": "bogus",
    "--rates 0mbit": "--rates",
    "--rates 10": "--rates '10'",
    "--rates 100mbps": "--rates '100mbps'",
    "--workers 1": "--workers",
    "--steps 5": "--steps 5",
    "--target 1.5": "--target 1.5",
    "--model gpt-small --target 'val_loss>>2'": "--target val_loss>>2",
    "--realtime 100": "--realtime 100",
})
def test_bad_flags_fail_before_any_work(argv, culprit, capsys, tmp_path):
    out = tmp_path / "e2e.json"
    assert culprit in usage_error(e2e.main, [*argv, "--out", str(out)], capsys)
    assert not out.exists()


@refused({
    "--workers 1": "--workers 1",
    "--rate 0mbit": "--rate '0mbit'",
    "--rate 100": "--rate '100'",
    "--rate 100mbps": "--rate '100mbps'",
    "--gaps 0 -1": "--gaps -1",
    "--calls -2": "--calls -2",
    "--method topk9": "--method topk9",
    "--method topk1 --compute-ms -1": "--compute-ms -1",
    "--realtime -3": "--realtime -3",
})
def test_probe_bad_flags_fail_before_any_work(argv, culprit, capsys, tmp_path):
    from lowbw.bench import e2e_probe

    out = tmp_path / "probe.json"
    assert culprit in usage_error(e2e_probe.main, [*argv, "--out", str(out)], capsys)
    assert not out.exists()


def test_every_listed_benchmark_has_a_main():
    import importlib

    from lowbw.bench.cli import benchmarks

    names = benchmarks()
    assert "e2e" in names and "e2e_probe" in names and "collectives_model" not in names and "e2e_cell" not in names
    for name in names:
        assert callable(getattr(importlib.import_module(f"lowbw.bench.{name}"), "main", None)), name


def test_bench_command_lists_e2e(capsys):
    from lowbw.cli import main

    with pytest.raises(SystemExit):
        main(["bench", "--help"])
    assert "e2e" in capsys.readouterr().out


def test_report_section_from_rows(tmp_path):
    from lowbw.report.build import build

    rows = []
    for m, n, r, err, bound in (("dense", 2, 10.0, -0.02, True), ("topk1", 2, 10.0, 0.05, False),
                                ("topk1", 4, 10.0, 0.3, False), ("dense", 2, 1000.0, 0.04, True),
                                ("topk1", 2, 1000.0, -0.2, False)):
        rows.append({"method": m, "workers": n, "rate_mbit": r, "err_step": err, "err_step_nominal": err - 0.3,
                     "predicted_step_s": 1 + err, "measured_step_s": 1.0, "predicted_ttt_s": None,
                     "measured_ttt_s": None, "err_ttt": None, "link_bound": bound, "loss_identical": n == 2,
                     "emulation": "netns-tc"})
    (tmp_path / "runs" / "bench").mkdir(parents=True)
    (tmp_path / "runs" / "bench" / "e2e.json").write_text(json.dumps({
        "provenance": {"date": "2026-11-23T21:00:00+00:00", "commit": "abc"}, "rows": rows,
        "probes": [{"workers": 2, "overhead_ms": 0.9, "compute_scale": 1.1},
                   {"workers": 4, "overhead_ms": 1.2, "compute_scale": 2.2}]}))
    res = build({"profile": "tiny", "seeds": [0]}, tmp_path / "runs", tmp_path / "gen", only=["e8"])
    numbers = (tmp_path / "gen" / "numbers.tex").read_text()
    # the target: N = 2 at 10 Mbit/s, and at 1000 only the link-bound dense cell (top-k's -20 % is CPU time)
    assert r"\newcommand{\EEightTargetWorst}{5" in numbers
    assert r"\newcommand{\EEightTargetCells}{3}" in numbers
    assert r"\newcommand{\EEightFastLinkBound}{dense}" in numbers
    assert r"\newcommand{\EEightFastCPUBound}{topk1}" in numbers
    assert r"\newcommand{\EEightComputeScaleFour}{2.2}" in numbers
    assert r"\newcommand{\EEightLossIdentical}{4}" in numbers
    assert (tmp_path / "gen" / "fig_e8.pdf").is_file() and res.sections[0].key == "e8"


def test_report_reads_the_language_models_cells(tmp_path):
    """runs/bench/e2e_lm.json beside e2e.json: its cells are a row group of E8's table and have their own
    numbers (errors per method, the machine's load, DiLoCo's compute factor over its 16 steps)."""
    from lowbw.report.build import build

    def row(m, err, **kw):
        return {"method": m, "workers": 2, "rate_mbit": 100.0, "err_step": err, "err_step_nominal": err,
                "predicted_step_s": 1 + err, "measured_step_s": 1.0, "predicted_ttt_s": None, "measured_ttt_s": None,
                "err_ttt": None, "link_bound": False, "loss_identical": True, "emulation": "netns-tc",
                "predicted_compute_s": 0.1 + err, "measured_compute_s": 0.1, **kw}

    (tmp_path / "runs" / "bench").mkdir(parents=True)
    prov = {"date": "2026-11-26T03:00:00+00:00", "commit": "abc"}
    (tmp_path / "runs" / "bench" / "e2e.json").write_text(json.dumps({"provenance": prov,
                                                                      "rows": [row("dense", 0.02)]}))
    cond = {"busy": False, "load1_mean": 1.5, "load1_max": 2.25, "cores": 2, "load_before": [1.0, 1.0, 1.0],
            "load_after": [1.2, 1.0, 1.0], "host": "vm", "date": "2026-11-26T03:00:00+00:00"}
    (tmp_path / "runs" / "bench" / "e2e_lm.json").write_text(json.dumps({
        "provenance": prov, "args": {"model": "gpt-small"}, "conditions": cond,
        "rows": [row("dense", -0.12, steps_per_sync=1, compute_scale=1.2, compute_scale_per_step=1.2),
                 row("diloco16", 0.05, steps_per_sync=15, compute_scale=1.05, compute_scale_per_step=1.3),
                 # a per-layer cell whose probes made its exchange in situ
                 row("topk1", 0.04, steps_per_sync=1, compute_scale=1.1, compute_scale_per_step=1.1,
                     overhead_in_situ_ms=1.43, overhead_sequence_ms=1.21, implied_overhead_ms=1.3,
                     compress_scale=1.7, compress_scale_apart=1.25)]}))
    build({"profile": "tiny", "seeds": [0]}, tmp_path / "runs", tmp_path / "gen", only=["e8"])
    numbers = (tmp_path / "gen" / "numbers.tex").read_text()
    assert r"\newcommand{\EEightLmCells}{3}" in numbers and r"\newcommand{\EEightLmWithin}{2}" in numbers
    assert r"\newcommand{\EEightCells}{1}" in numbers  # the MLP's numbers stay the MLP's
    assert r"\newcommand{\EEightLmInSituMethods}{topk1}" in numbers
    assert r"\newcommand{\EEightLmInSituMs}{1.43}" in numbers and r"\newcommand{\EEightLmReplayMs}{1.21}" in numbers
    assert r"\newcommand{\EEightLmInSituCompress}{1.70}" in numbers
    assert r"\newcommand{\EEightLmApartCompress}{1.25}" in numbers
    assert r"\newcommand{\EEightLmInSituVsImplied}{less}" in numbers  # 1.3 ms implied against 1.43 probed
    assert r"\newcommand{\EEightLmSyncMethods}{diloco16}" in numbers
    assert r"\newcommand{\EEightLmScaleOverSync}{1.05}" in numbers
    assert r"\newcommand{\EEightLmScalePerStep}{1.30}" in numbers
    assert r"\newcommand{\EEightLmSyncComputePred}{150}" in numbers  # DiLoCo's compute, ms per step
    assert r"\newcommand{\EEightLmLoadMax}{2.25}" in numbers and r"\newcommand{\EEightLmBusy}{not busy}" in numbers
    table = (tmp_path / "gen" / "tab_e8.tex").read_text()
    assert "diloco16 (gpt-small)" in table and "dense (gpt-small)" in table
    # the language model's cells alone (the MLP's not measured on this host): E8 has them, not "not run"
    (tmp_path / "runs" / "bench" / "e2e.json").unlink()
    build({"profile": "tiny", "seeds": [0]}, tmp_path / "runs", tmp_path / "gen2", only=["e8"])
    numbers = (tmp_path / "gen2" / "numbers.tex").read_text()
    assert r"\newcommand{\EEightLmCells}{3}" in numbers
    assert r"\EEightNotRun}" not in numbers and r"\EEightCells}" not in numbers
    assert "diloco16 (gpt-small)" in (tmp_path / "gen2" / "tab_e8.tex").read_text()
    assert r"\newcommand{\EEightLmScheduling}{under the fair scheduler}" in numbers


def test_report_sets_the_lm_cells_under_sched_rr_beside_the_fair_schedulers(tmp_path):
    """e2e_lm.json measured under the fair scheduler and e2e_lm_realtime.json with --realtime: the paper says
    how the workers were scheduled, how many SCHED_RR cells (their median repeats) are within the tolerance,
    and the per-layer cells' per-message cost both ways (in situ, and the range the testbed runs implied over
    every repeat)."""
    from lowbw.report.build import build

    def row(m, err, implied=None, situ=None, repeat=0):
        return {"method": m, "workers": 2, "rate_mbit": 100.0, "err_step": err, "err_step_nominal": err,
                "predicted_step_s": 1 + err, "measured_step_s": 1.0, "predicted_ttt_s": None, "measured_ttt_s": None,
                "err_ttt": None, "link_bound": False, "loss_identical": True, "emulation": "netns-tc",
                "predicted_compute_s": 0.1, "measured_compute_s": 0.1, "implied_overhead_ms": implied,
                "overhead_in_situ_ms": situ, "compress_scale": 1.2, "repeat": repeat}

    bench = tmp_path / "runs" / "bench"
    bench.mkdir(parents=True)
    prov = {"date": "2026-11-26T03:00:00+00:00", "commit": "abc"}
    rt = [row("dense", -0.03), row("topk1", -0.04, 0.30, 0.25), row("topk1", 0.02, 0.22, 0.26, 1),
          row("topk1", -0.19, 0.37, 0.27, 2)]
    fair = [row("dense", 0.01), row("topk1", 0.24, 1.15, 1.50), row("topk1", 0.05, 1.37, 1.48, 1),
            row("topk1", 0.08, 1.51, 1.55, 2)]
    # grown by --append: the load sentence covers every run (mean weighted by their seconds, the highest load)
    cond = {"busy": False, "load1_mean": 1.0, "load1_max": 1.5, "cores": 2, "wall_s": 100.0, "host": "vm",
            "load_before": [1.0, 1.0, 1.0], "load_after": [1.2, 1.0, 1.0], "date": "2026-11-26T03:00:00+00:00"}
    later = {"conditions": {**cond, "load1_mean": 2.0, "load1_max": 3.25, "wall_s": 300.0}}
    (bench / "e2e_lm.json").write_text(json.dumps({"provenance": prov, "args": {"model": "gpt-small"},
                                                   "conditions": cond, "appended": [later], "rows": fair}))
    (bench / "e2e_lm_realtime.json").write_text(json.dumps({"provenance": prov,
                                                            "args": {"model": "gpt-small", "realtime": 10},
                                                            "rows": rt}))
    build({"profile": "tiny", "seeds": [0]}, tmp_path / "runs", tmp_path / "gen", only=["e8"])
    numbers = (tmp_path / "gen" / "numbers.tex").read_text()
    assert r"\newcommand{\EEightLmScheduling}{under the fair scheduler}" in numbers
    assert r"\newcommand{\EEightLmLoadMean}{1.75}" in numbers and r"\newcommand{\EEightLmLoadMax}{3.25}" in numbers
    assert r"\newcommand{\EEightLmWithin}{2}" in numbers  # topk1's median repeat: +8 %
    assert r"\newcommand{\EEightLmRtCells}{2}" in numbers and r"\newcommand{\EEightLmRtWithin}{2}" in numbers
    assert r"\newcommand{\EEightLmRepeats}{3}" in numbers
    assert r"topk1 $-$4" in numbers  # the SCHED_RR cell's median repeat
    # in situ: the median repeats' 1.55 ms (fair) against 0.25 ms (SCHED_RR); implied over every repeat
    assert r"\newcommand{\EEightLmRtInSituMs}{0.250}" in numbers
    assert r"\newcommand{\EEightLmRtCostRatio}{6.2}" in numbers
    assert r"\newcommand{\EEightLmImpliedMin}{1.15}" in numbers and r"\newcommand{\EEightLmImpliedMax}{1.51}" in numbers
    assert r"\newcommand{\EEightLmRtImpliedMin}{0.220}" in numbers
    assert r"\newcommand{\EEightLmRtImpliedMax}{0.370}" in numbers
    # a SCHED_RR file beside an e2e_lm.json that is itself SCHED_RR says nothing more
    (bench / "e2e_lm.json").write_text(json.dumps({"provenance": prov,
                                                   "args": {"model": "gpt-small", "realtime": 10}, "rows": rt}))
    build({"profile": "tiny", "seeds": [0]}, tmp_path / "runs", tmp_path / "gen2", only=["e8"])
    numbers = (tmp_path / "gen2" / "numbers.tex").read_text()
    assert r"\EEightLmRt" not in numbers
    assert r"\newcommand{\EEightLmScheduling}{under SCHED\_RR (priority 10)}" in numbers


def test_calibrated_clock_fills_model_runs_from_the_table(tmp_path):
    from lowbw.bench.clock import clock_key
    from lowbw.workflow.grid import run_config

    run = {"model": "mlp", "dataset": "mnist", "batch_size": 64, "workers": 2, "compressor": "topk",
           "compressor_args": {"ratio": 0.01}, "error_feedback": "on", "clock": "model"}
    key = clock_key(run)
    table = tmp_path / "clock.json"
    table.write_text(json.dumps({"entries": {key: {"clock_sample_s": 1e-3, "clock_compress_mbyte_s": 50.0}}}))
    config = {"clock_calibration": str(table), "train_defaults": {}, "methods": {},
              "experiments": {"e": {"base": run, "grid": {"seed": [0]}}}}
    cfg = run_config(config, "e", {"seed": 0})
    assert cfg["clock_sample_s"] == 1e-3 and cfg["clock_compress_mbyte_s"] == 50.0
    # another local batch is another key: a clear error naming the run and the command that writes the table
    config["experiments"]["e"]["base"] = {**run, "batch_size": 128}
    with pytest.raises(ValueError, match="run e/seed~0: .* has no calibration .*python -m lowbw bench clock"):
        run_config(config, "e", {"seed": 0})
    # clock: measured runs are left alone
    config["experiments"]["e"]["base"] = {**run, "clock": "measured"}
    assert "clock_sample_s" not in run_config(config, "e", {"seed": 0})


def test_committed_clock_tables_cover_their_grids():
    """config/config.yaml and config/tiny.yaml name calibration tables that hold every model-clock run."""
    from pathlib import Path

    import yaml

    from lowbw.workflow.grid import decode, run_config, run_dirs

    root = Path(__file__).resolve().parents[2]
    for name in ("config.yaml", "tiny.yaml"):
        config = yaml.safe_load((root / "config" / name).read_text())
        config["clock_calibration"] = str(root / config["clock_calibration"])
        for d in run_dirs(config):
            _, exp, rest = d.split("/", 2)
            cfg = run_config(config, exp, decode(rest))
            assert cfg["clock"] == "model" and cfg["clock_sample_s"] > 0, d


def test_probe_summary_curve_pools_gaps_and_reads_old_files():
    # N = 3: a message is one of 2 (N-1) = 4 steps; per-call samples in seconds, per gap (ms) as strings
    new = {"allgather_by_gap_s": {"0": [0.004, 0.004, 0.008], "1": [0.008, 0.008]},
           "compute_alone_s": [1.0], "compute_together_s": [1.5]}
    old = {"allgather_s": [0.004], "compute_alone_s": [1.0], "compute_together_s": [1.5]}
    pr = e8_calibration.probe_summary([new, old], workers=3)
    # means (a step's time is a sum): 5 ms and 8 ms per call, over 4 steps
    assert pr["overhead_curve"] == [[0.0, pytest.approx(1.25)], [1.0, pytest.approx(2.0)]]
    assert pr["overhead_ms"] == pytest.approx(1.25)  # back to back
    assert pr["compute_scale"] == 1.5


def test_overhead_at_interpolates_and_clamps():
    curve = [[0.0, 0.5], [0.5, 1.5], [2.0, 2.0]]
    assert e8_calibration.overhead_at(curve, 0.0) == 0.5
    assert e8_calibration.overhead_at(curve, 0.25) == pytest.approx(1.0)
    assert e8_calibration.overhead_at(curve, 1.25) == pytest.approx(1.75)
    assert e8_calibration.overhead_at(curve, 9.0) == 2.0  # flat beyond the probed gaps
    assert e8_calibration.overhead_at(curve, float("inf")) == 2.0
    with pytest.raises(ValueError, match="empty"):
        e8_calibration.overhead_at([], 1.0)


def test_cell_calibration_reads_the_gap_off_the_sim_run(tmp_path):
    # N = 2: a call is 2 latency terms; 20 terms per 10 steps = 1 call/step; compute + compress = 0.3 of
    # t_virtual's 0.1 s/step -> gap 30 ms/call: flat beyond the curve
    sim = [_line(0, 0.0, 0.0), _line(10, 1.0, 0.5, alpha=20), _line(20, 2.0, 1.0, alpha=40)]
    _write_run(tmp_path / "sim", sim)
    assert e8_calibration.cell_gap_ms(tmp_path / "sim", 20, 2) == pytest.approx(30.0)
    pr = {"overhead_ms": 0.5, "overhead_curve": [[0.0, 0.5], [2.0, 1.8]], "compute_scale": 1.0}
    pc = e8_calibration.cell_calibration(pr, tmp_path / "sim", 20, 2)
    assert pc["overhead_ms"] == 1.8 and pc["overhead_gap_ms"] == pytest.approx(30.0)
    assert pr["overhead_ms"] == 0.5  # the group's calibration is not changed
    # N = 3: 4000 latency terms per 10 steps = 100 calls/step -> 0.3 ms of work before each call
    _write_run(tmp_path / "sim3", [_line(0, 0.0, 0.0), _line(10, 1.0, 0.5, alpha=4000),
                                   _line(20, 2.0, 1.0, alpha=8000)])
    assert e8_calibration.cell_gap_ms(tmp_path / "sim3", 20, 3) == pytest.approx(0.3)
    pc3 = e8_calibration.cell_calibration(pr, tmp_path / "sim3", 20, 3)
    assert pc3["overhead_ms"] == pytest.approx(0.5 + 1.3 * 0.15)
    # a cell without calls (every step local): no gap to read, the curve's end
    _write_run(tmp_path / "simL", [_line(0, 0.0, 0.0), _line(10, 1.0, 0.0), _line(20, 2.0, 0.0)])
    assert e8_calibration.cell_gap_ms(tmp_path / "simL", 20, 2) == float("inf")


def test_cell_sequence_scales_the_compressors_gaps_to_the_sim_run(tmp_path):
    # N = 2, 1 call per step (20 terms per 10 steps); compute 0.02 s and compression 0.01 s per step
    _write_run(tmp_path / "sim", [_line(0, 0.0, 0.0), _line(10, 1.0, 0.5, alpha=20), _line(20, 2.0, 1.0, alpha=40)])
    # an exchange of 2 calls (one every 2 steps): 40 ms of compute and 20 ms of compression per exchange; the
    # compressor's own gaps 1 : 3 share the compression, the first call comes after the compute too
    seq = e8_calibration.cell_sequence([("all_gather", 1.0), ("all_reduce", 3.0)], tmp_path / "sim", 20, 2)
    assert [op for op, _ in seq] == ["all_gather", "all_reduce"]
    assert [g for _, g in seq] == pytest.approx([40.0 + 5.0, 15.0])
    # no bytes in these runs; 1 MB per 10 steps at 1000 Mbit/s: 0.1 MB a step, 0.8 ms plus TCP's framing
    assert e8_calibration.cell_wire_s(tmp_path / "sim", 20, 2, 1000.0) == 0.0
    _write_run(tmp_path / "simB", [_line(0, 0.0, 0.0), _line(10, 1.0, 0.5, beta=1e6), _line(20, 2.0, 1.0, beta=2e6)])
    assert e8_calibration.cell_wire_s(tmp_path / "simB", 20, 2, 1000.0) == pytest.approx(0.8e-3 * 1514 / 1448)
    # the mean of the gaps is the cell's mean gap
    assert sum(g for _, g in seq) / 2 == pytest.approx(e8_calibration.cell_gap_ms(tmp_path / "sim", 20, 2))
    # an exchange without compression work; a cell without calls
    assert e8_calibration.cell_sequence([("all_reduce", 0.0)], tmp_path / "sim", 20, 2) == [("all_reduce", 20.0)]
    _write_run(tmp_path / "simL", [_line(0, 0.0, 0.0), _line(10, 1.0, 0.0), _line(20, 2.0, 0.0)])
    assert e8_calibration.cell_sequence([("all_reduce", 0.0)], tmp_path / "simL", 20, 2) == []


def test_cell_calibration_takes_the_replayed_sequence(tmp_path):
    _write_run(tmp_path / "sim", [_line(0, 0.0, 0.0), _line(10, 1.0, 0.5, alpha=20), _line(20, 2.0, 1.0, alpha=40)])
    s = {"allgather_by_gap_s": {"0": [0.002], "30": [0.004]}, "compute_alone_s": [1.0], "compute_together_s": [1.0],
         "sequence_s": [0.003, 0.005], "sequence_by_call_s": [0.002, 0.006], "sequence_last_in_s": [0.002, 0.002]}
    pr = e8_calibration.probe_summary([s, s], workers=2)
    assert pr["overhead_sequence_ms"] == pytest.approx(2.0)  # (3 + 5) / 2 ms per call, / 2 (N-1) rounds
    assert pr["overhead_sequence_last_in_ms"] == pytest.approx(1.0)
    assert pr["overhead_by_call_ms"] == pytest.approx([1.0, 3.0])
    pc = e8_calibration.cell_calibration(pr, tmp_path / "sim", 20, 2)
    assert pc["overhead_ms"] == pytest.approx(2.0)
    assert pc["overhead_at_gap_ms"] == pytest.approx(2.0)  # the curve at the 30 ms gap, recorded beside it
    s.pop("sequence_s")  # a probe without the replay: the curve at the gap
    pc = e8_calibration.cell_calibration(e8_calibration.probe_summary([s], workers=2), tmp_path / "sim", 20, 2)
    assert pc["overhead_ms"] == pytest.approx(2.0) and pc["overhead_at_gap_ms"] == pytest.approx(2.0)
    s["allgather_by_gap_s"] = {"0": [0.002], "30": [0.008]}
    pc = e8_calibration.cell_calibration(e8_calibration.probe_summary([s], workers=2), tmp_path / "sim", 20, 2)
    assert pc["overhead_ms"] == pytest.approx(4.0)


def test_cell_calibration_prefers_the_exchange_in_situ(tmp_path):
    """A probe that made the cell's exchange in situ: its calls' per-message cost beats the replayed sequence's
    and the curve's, and its work (compression between real messages) sets the compression factor against
    compression alone; the factor of compressing with no messages in between is kept beside it."""
    _write_run(tmp_path / "sim", [_line(0, 0.0, 0.0), _line(10, 1.0, 0.5, alpha=20), _line(20, 2.0, 1.0, alpha=40)])
    s = {"allgather_by_gap_s": {"0": [0.002], "30": [0.004]}, "compute_alone_s": [1.0], "compute_together_s": [1.0],
         "sequence_s": [0.003, 0.005], "compress_alone_s": [0.010, 0.010], "compress_together_s": [0.012, 0.012],
         # 4 calls per exchange: 24 and 40 ms inside them -> 6 and 10 ms per call, / 2 (N-1) rounds
         "exchange_work_s": [0.020, 0.030], "exchange_calls_s": [0.024, 0.040], "exchange_calls": 4}
    pr = e8_calibration.probe_summary([s], workers=2)
    assert pr["overhead_exchange_ms"] == pytest.approx(4.0)
    assert pr["compress_scale"] == pytest.approx(2.5) and pr["compress_scale_apart"] == pytest.approx(1.2)
    pc = e8_calibration.cell_calibration(pr, tmp_path / "sim", 20, 2)
    assert pc["overhead_ms"] == pytest.approx(4.0)
    assert pr["overhead_sequence_ms"] == pytest.approx(2.0)  # still recorded
    # without it (files before it, or a dense cell): the replayed sequence and compression apart, as before
    old = {k: v for k, v in s.items() if not k.startswith("exchange_")}
    pr = e8_calibration.probe_summary([old], workers=2)
    assert pr["overhead_exchange_ms"] is None and pr["compress_scale"] == pytest.approx(1.2)
    assert e8_calibration.cell_calibration(pr, tmp_path / "sim", 20, 2)["overhead_ms"] == pytest.approx(2.0)


@pytest.mark.parametrize("method, ops", [("topk1", {"all_gather"}), ("powersgd", {"all_reduce"})])
def test_call_sequence_records_a_compressors_calls(method, ops):
    from lowbw.bench.e8.calls import call_sequence

    cfg = {"dataset": "synthetic", "model": "mlp", "batch_size": 128, "workers": 2,
           **presets.load_methods()[method]}
    seq = call_sequence(cfg, 2, ([3, 16, 16], 10), reps=3)
    assert {op for op, _ in seq} == ops
    assert all(g >= 0 for _, g in seq) and sum(g for _, g in seq) > 0
    if method == "topk1":  # the trainer's default: one bucket, one all-gather of every layer's payload
        assert len(seq) == 1
        # per layer (3 weights, 3 biases) its values and its indices, back to back
        seq = call_sequence({**cfg, "granularity": "layer"}, 2, ([3, 16, 16], 10), reps=3)
        assert len(seq) == 12
        assert max(g for _, g in seq[1::2]) < min(g for _, g in seq[0::2])
    dense = {**cfg, "compressor": "none", "compressor_args": {}, "error_feedback": "auto"}
    assert call_sequence(dense, 2, ([3, 16, 16], 10)) == [("all_reduce", 0.0)]


def test_cell_calls_per_step_from_the_sim_run(tmp_path):
    # N = 2: 20 latency terms over 10 steps = 1 call per step; N = 3: 4000 terms over 10 steps = 100 calls
    _write_run(tmp_path / "sim", [_line(0, 0.0, 0.0), _line(10, 1.0, 0.5, alpha=20), _line(20, 2.0, 1.0, alpha=40)])
    assert e8_calibration.cell_calls_per_step(tmp_path / "sim", 20, 2) == pytest.approx(1.0)
    _write_run(tmp_path / "sim3", [_line(0, 0.0, 0.0), _line(10, 1.0, 0.5, alpha=4000),
                                   _line(20, 2.0, 1.0, alpha=8000)])
    assert e8_calibration.cell_calls_per_step(tmp_path / "sim3", 20, 3) == pytest.approx(100.0)


def test_probe_summary_compute_factor_is_a_ratio_of_means():
    # a step's compute is summed by the clock: one slow rep of the N at once counts (a median would drop it),
    # and the cell's path may compute faster than the sim's (a factor below 1 is kept)
    s = {"allgather_by_gap_s": {"0": [0.002]}, "compute_alone_s": [1.0, 1.0, 1.0, 1.0],
         "compute_together_s": [1.0, 1.0, 1.0, 3.0]}
    assert e8_calibration.probe_summary([s], workers=2)["compute_scale"] == pytest.approx(1.5)
    s = {**s, "compute_together_s": [0.8] * 4}
    assert e8_calibration.probe_summary([s], workers=2)["compute_scale"] == pytest.approx(0.8)
    # compression has its own factor where probed, None where not (the clock then takes compute's)
    assert e8_calibration.probe_summary([s], workers=2)["compress_scale"] is None
    s = {**s, "compress_alone_s": [0.01, 0.01], "compress_together_s": [0.011, 0.013]}
    assert e8_calibration.probe_summary([s], workers=2)["compress_scale"] == pytest.approx(1.2)
    import argparse

    args = argparse.Namespace(model="mlp", dataset="mnist", batch_size=128, seed=0, target=0.8)
    cfg = e8_grid.cell_config({}, 2, 100.0, 20, args,
                               {"overhead_ms": 1.0, "compute_scale": 1.5, "compress_scale": 1.2})
    assert cfg["clock_compute_scale"] == 1.5 and cfg["clock_compress_scale"] == 1.2


def test_compute_factor_of_workers_that_meet_every_h_steps(tmp_path):
    """Two workers whose slow steps alternate (a third process takes one core at a time): a synchronous step
    waits for the slow one every step (x2), DiLoCo's workers meet every 16 steps and wait only for the larger
    16-step sum (x1.5). The clock of a DiLoCo cell must take the second, read off its sim run's calls."""
    by_rank = [[2.0 if k % 2 == 0 else 1.0 for k in range(40)], [1.0 if k % 2 == 0 else 2.0 for k in range(40)]]
    s = {"allgather_by_gap_s": {"0": [0.002]}, "compute_alone_s": [1.0] * 40,
         "compute_together_s": [max(a, b) for a, b in zip(*by_rank)], "compute_together_by_rank_s": by_rank}
    pr = e8_calibration.probe_summary([s], workers=2)
    assert pr["compute_scale"] == pytest.approx(2.0)
    assert e8_calibration.compute_scale_over([s], 1) == pytest.approx(2.0)  # the per-step factor, by rank
    assert e8_calibration.compute_scale_over([s], 16) == pytest.approx(1.5)
    assert e8_calibration.compute_scale_over([s], 3) == pytest.approx(5 / 3)  # windows 2+1+2 or 1+2+1: max 5
    # one exchange (a single all-reduce) every 16 steps: 2 latency terms per 16 steps at N = 2
    _write_run(tmp_path / "sim", [_line(0, 0.0, 0.0), _line(10, 1.0, 0.0, alpha=2 * 10 / 16),
                                  _line(42, 4.2, 0.0, alpha=2 * 42 / 16)])
    H = e8_calibration.cell_steps_per_sync(tmp_path / "sim", 42, 2, 1)
    assert H == 16
    pc = e8_calibration.cell_calibration({**pr, "steps_per_sync": H}, tmp_path / "sim", 42, 2)
    assert pc["compute_scale"] == pytest.approx(1.5) and pc["compute_scale_per_step"] == pytest.approx(2.0)
    # a synchronous cell keeps the per-step factor; so does a probe from before per-rank times
    assert e8_calibration.cell_calibration(pr, tmp_path / "sim", 42, 2)["compute_scale"] == pytest.approx(2.0)
    old = {k: v for k, v in s.items() if k != "compute_together_by_rank_s"}
    pc = e8_calibration.cell_calibration({**e8_calibration.probe_summary([old], 2), "steps_per_sync": 16},
                                          tmp_path / "sim", 42, 2)
    assert pc["compute_scale"] == pytest.approx(2.0)
    with pytest.raises(ValueError, match="period 0"):
        e8_calibration.compute_scale_over([s], 0)


@pytest.mark.netns
@pytest.mark.parametrize("ddp", [False, True])
def test_probe_computes_in_the_cells_conditions(ddp, tmp_path):
    """The probe on a real testbed: the N at once compute after the cell's calls of a step, through DDP
    with lowbw's hook for a DDP cell, and say so in their samples."""
    from lowbw.bench import e2e_probe

    out = tmp_path / "probe.json"
    assert e2e_probe.main(["--workers", "2", "--rate", "1000mbit", "--gaps", "0", "--calls", "3",
                           *(["--ddp"] if ddp else ["--method", "topk1"]), "--out", str(out)]) == 0
    res = json.loads(out.read_text())
    s = res["samples"][0]
    assert s["calls_per_step"] == 3 and s["ddp"] is ddp and s["ddp_cell_hook"] is False
    assert len(s["compute_together_s"]) == len(s["compute_alone_s"]) == e2e_probe.PROBE_COMPUTE_REPS
    assert all(t > 0 for t in s["compute_together_s"])
    # every rank's own times of the N at once; per rep the slowest of them is the synchronous step's
    by_rank = s["compute_together_by_rank_s"]
    assert len(by_rank) == 2 and all(len(t) == e2e_probe.PROBE_COMPUTE_REPS for t in by_rank)
    assert [max(ts) for ts in zip(*by_rank)] == pytest.approx(s["compute_together_s"])
    assert 0.2 < res["compute_scale"] < 20
    assert res["overhead_ms"] > 0
    if not ddp:  # topk1's one bucketed all-gather (the trainer's default) replayed after its CPU work, each rep timed
        assert [op for op, _ in s["sequence"]] == ["all_gather"]
        assert len(s["sequence_s"]) == len(s["sequence_last_in_s"]) == e2e_probe.PROBE_REPS
        assert len(s["sequence_by_call_s"]) == 1
        # the slowest worker's calls hold its waits for later peers: never below the calls alone
        assert res["overhead_sequence_ms"] >= res["overhead_sequence_last_in_ms"] > 0
        assert all(w > 0 for w in s["sequence_work_s"])
        # and topk1's compression alone and at once
        assert len(s["compress_alone_s"]) == len(s["compress_together_s"]) == e2e_probe.PROBE_COMPUTE_REPS
        assert 0.2 < res["compress_scale"] < 20
    else:
        assert res["overhead_sequence_ms"] is None


@pytest.mark.netns
def test_probe_makes_a_per_layer_exchange_in_situ(tmp_path):
    """A synchronous top-k cell (its calls per step are one exchange's): the probe runs the compressor's real
    exchange between tiny real messages before each compute, on the slowest worker per rep (bucketed, the
    trainer's default: one all-gather a step)."""
    from lowbw.bench import e2e_probe

    out = tmp_path / "probe.json"
    assert e2e_probe.main(["--workers", "2", "--rate", "1000mbit", "--gaps", "0", "--calls", "1",
                           "--method", "topk1", "--out", str(out)]) == 0
    res = json.loads(out.read_text())
    s = res["samples"][0]
    assert s["exchange_calls"] == 1
    assert len(s["exchange_work_s"]) == len(s["exchange_calls_s"]) == e2e_probe.PROBE_COMPUTE_REPS
    assert all(w > 0 for w in s["exchange_work_s"]) and all(c > 0 for c in s["exchange_calls_s"])
    assert res["overhead_exchange_ms"] > 0 and res["compress_scale_apart"] > 0
    assert res["compress_scale"] == pytest.approx(
        sum(s["exchange_work_s"]) / len(s["exchange_work_s"])
        / (sum(s["compress_alone_s"]) / len(s["compress_alone_s"])))


@pytest.mark.netns
def test_probe_computes_through_the_cells_own_hook(tmp_path):
    """A DDP cell with a short exchange: the probe's workers compute through DDP with the cell's compressor
    as the hook (fp16 here), so that they wait for an exchange as the cell's do."""
    from lowbw.bench import e2e_probe

    base = {"dataset": "synthetic", "model": "mlp", "batch_size": 128, "workers": 2, "bandwidth_mbit": 1000.0,
            "optimizer": "sgd", "collective": "ring"}
    res = e2e_probe.probe(base, 2, 1000.0, ([3, 16, 16], 10), gaps_ms=(0.0,), calls_per_step=1, ddp=True,
                          hook_method={"compressor": "fp16", "ddp_hook": True})
    assert res["ddp"] is True and res["ddp_cell_hook"] is True
    assert len(res["compute_together_s"]) == e2e_probe.PROBE_COMPUTE_REPS
    assert all(t > 0 for t in res["compute_together_s"])


def test_cells_take_the_median_repeat():
    rows = [{"method": "topk1", "workers": 2, "rate_mbit": 10.0, "err_step": e, "link_bound": False}
            for e in (0.12, -0.03, 0.05)]
    rows.append({"method": "dense", "workers": 2, "rate_mbit": 10.0, "err_step": -0.02, "link_bound": True})
    (topk, dense) = e8_rows.cells(rows)
    assert topk["repeats"] == 3 and topk["err_step"] == 0.05
    assert (topk["err_step_min"], topk["err_step_max"]) == (-0.03, 0.12)
    assert dense["repeats"] == 1 and dense["err_step"] == -0.02
    s = e8_rows.summarise(rows)
    assert s["worst_abs_err_step_by_method"] == {"topk1": 0.05, "dense": 0.02}
    assert s["target"]["met"] and s["target"]["n"] == 2 and s["repeats"] == 3
    # an even count: the lower middle one (a repeat that was measured, not an average of two)
    assert e8_rows.cells(rows[:2])[0]["err_step"] == -0.03


def test_append_refuses_a_missing_or_partial_file(tmp_path, capsys):
    out = tmp_path / "e2e.json"
    with pytest.raises(SystemExit) as ei:
        e2e.main(["--append", "--out", str(out), "--methods", "dense"])
    assert ei.value.code == 2 and "--append" in capsys.readouterr().err.strip().splitlines()[-1]
    out.write_text(json.dumps({"complete": False, "rows": [], "args": {"runs_dir": "runs/bench/e2e"}}))
    with pytest.raises(SystemExit):
        e2e.main(["--append", "--out", str(out), "--methods", "dense"])
    assert "not a complete" in capsys.readouterr().err
    out.write_text(json.dumps({"complete": True, "rows": [], "args": {"runs_dir": str(tmp_path / "elsewhere")}}))
    with pytest.raises(SystemExit):
        e2e.main(["--append", "--out", str(out), "--methods", "dense"])
    assert "--runs-dir" in capsys.readouterr().err
    # a cell's repeats share their scheduling: fair-scheduler rows do not take SCHED_RR repeats
    out.write_text(json.dumps({"complete": True, "rows": [], "args": {"runs_dir": "runs/bench/e2e"}}))
    with pytest.raises(SystemExit):
        e2e.main(["--append", "--out", str(out), "--methods", "dense", "--realtime"])
    assert "--realtime 10 differs from the file's 0" in capsys.readouterr().err.strip().splitlines()[-1]
    assert json.loads(out.read_text())["complete"] is True  # nothing written over


def test_repeats_go_to_their_own_run_directories(tmp_path):
    assert e8_grid.cell_dir(tmp_path, "topk1", 2, 10.0) == tmp_path / "topk1_n2_r10"
    assert e8_grid.cell_dir(tmp_path, "topk1", 2, 10.0, 2) == tmp_path / "topk1_n2_r10" / "rep2"


def test_report_takes_each_cells_median_repeat(tmp_path):
    from lowbw.report.build import build

    rows = [{"method": "topk1", "workers": 2, "rate_mbit": 10.0, "err_step": e, "err_step_nominal": -0.3,
             "predicted_step_s": 1 + e, "measured_step_s": 1.0, "predicted_ttt_s": None, "measured_ttt_s": None,
             "err_ttt": None, "link_bound": False, "loss_identical": True, "emulation": "netns-tc", "repeat": k}
            for k, e in enumerate((0.12, -0.03, 0.05))]
    (tmp_path / "runs" / "bench").mkdir(parents=True)
    (tmp_path / "runs" / "bench" / "e2e.json").write_text(json.dumps({
        "provenance": {"date": "2026-11-24T08:00:00+00:00", "commit": "abc"}, "rows": rows}))
    build({"profile": "tiny", "seeds": [0]}, tmp_path / "runs", tmp_path / "gen", only=["e8"])
    numbers = (tmp_path / "gen" / "numbers.tex").read_text()
    assert r"\newcommand{\EEightTargetWorst}{5" in numbers  # the median repeat, not the worst (12)
    assert r"\newcommand{\EEightRepeats}{3}" in numbers and r"\newcommand{\EEightRepeatCells}{1}" in numbers
    assert r"\newcommand{\EEightRepeatRange}{15" in numbers
    assert r"\newcommand{\EEightCells}{1}" in numbers


def test_a_time_to_target_can_be_a_loss(tmp_path):
    # a language model's cell reaches its target when val_loss falls to it (the first evaluation at or below)
    sim = [_line(0, 0.0, 0.0), _line(10, 1.0, 0.5), _line(20, 2.0, 1.0)]
    procs = [_line(0, 0.0, 0.0), _line(10, 1.25, 0.6), _line(20, 2.5, 1.2)]
    sim[1]["val_loss"], sim[2]["val_loss"], procs[1]["val_loss"], procs[2]["val_loss"] = 2.7, 2.4, 2.7, 2.4
    _write_run(tmp_path / "sim", sim)
    _write_run(tmp_path / "procs", procs)
    row = e8_rows.cell_row(tmp_path / "sim", tmp_path / "procs", method="dense", workers=2, rate=10.0, steps=20,
                       target="val_loss<=2.5", probe_res={"overhead_ms": 0.0},
                       cfg={"clock_compute_scale": 1.0, "latency_ms": 0.0})
    assert row["ttt_step_sim"] == row["ttt_step_procs"] == 20
    assert row["predicted_ttt_s"] == 2.0 and row["measured_ttt_s"] == 2.5 and row["err_ttt"] == pytest.approx(-0.2)


MIRROR = Path(os.environ.get("LOWBW_DATA_MIRROR", Path(__file__).resolve().parents[3] / "shared" / "data"))


@pytest.mark.skipif(not (MIRROR / "tinyshakespeare.txt").is_file(),
                    reason=f"no tinyshakespeare.txt in the data mirror {MIRROR}")
def test_a_language_model_cell_builds_and_its_sim_twin_runs(tmp_path, monkeypatch):
    """gpt-small's E8 cells (the headline methods, DiLoCo H=16 included) build for the testbed, the probe's
    model and batch are the language model's, and one cell's sim twin runs and gives a row (no testbed)."""
    import argparse

    from lowbw.bench.e8.calls import call_sequence, probe_batch, probe_model
    from lowbw.train.launch import run

    monkeypatch.setenv("LOWBW_DATA_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("LOWBW_DATA_MIRROR", str(MIRROR))
    steps = 15
    args = argparse.Namespace(model="gpt-small", dataset="shakespeare", batch_size=e8_grid.LM_BASE["batch_size"],
                              seed=0, target=e8_grid.DEFAULT_TARGET["text"], methods="dense,topk1,powersgd,diloco16",
                              workers=[2], rates=[100.0], steps=steps)
    mcfg, shape = e8_grid.plan(args)
    assert shape == ([64], 65) and list(mcfg) == ["dense", "topk1", "powersgd", "diloco16"]
    cfgs = {m: e8_grid.cell_config(mcfg[m], 2, 100.0, steps, args, e8_grid.UNCALIBRATED) for m in mcfg}
    assert all(c["dataset"] == "shakespeare" and c["optimizer"] == "adamw" for c in cfgs.values())
    assert cfgs["diloco16"]["sync"] == "diloco" and cfgs["diloco16"]["world_period"] == 16
    x, y = probe_batch(shape, 3)
    assert probe_model("gpt-small", shape)(x).shape == (3, 64, 65) and y.shape == (3, 64)
    seq = call_sequence(e8_grid.sim_twin(cfgs["topk1"]), 2, shape, reps=1)
    assert {op for op, _ in seq} == {"all_gather"} and len(seq) == 1  # bucketed: one packed all-gather
    sim = tmp_path / "sim"
    run(e8_grid.sim_twin(cfgs["topk1"]), sim, overwrite=True, quiet=True)
    assert e8_calibration.cell_calls_per_step(sim, steps, 2) == pytest.approx(len(seq))
    row = e8_rows.cell_row(sim, sim, method="topk1", workers=2, rate=100.0, steps=steps, target=args.target,
                       probe_res={"overhead_ms": 0.0}, cfg=cfgs["topk1"])
    assert row["predicted_step_s"] > 0 and row["loss_identical"] and row["bytes_per_step"] > 0
