"""The report prints the machine's conditions beside each measured table and marks the cells measured while the
machine was busy (lowbw.report.conditions), from what lowbw.measure.conditions recorded."""

from __future__ import annotations

import json

from lowbw.report.build import Context
from lowbw.report.conditions import MARK, busy_testbeds, caption, mark, runs_provenance

IDLE = {"busy": False, "reasons": []}
BUSY = {"busy": True, "reasons": ["other processes used 1.40 of 2 cores"]}
RUN = {"host": "box", "cores": 2, "date": "2026-11-25T12:34:56+00:00", "load_before": [0.25, 0.2, 0.1],
       "load_after": [3.5, 1.0, 0.4], "load1_max": 6.75, "steal": 0.012, "others_cores": 1.4, **BUSY}


def test_caption_states_the_load_and_what_the_mark_means():
    c = caption(RUN, None, marked=2)
    assert "box, 2026-11-25T12:34 UTC" in c
    assert "1-min load 0.25/6.75/3.50 (before/highest/after) on 2 cores" in c
    assert r"other processes 1.40 cores, steal 1.2\,\%" in c
    assert "the machine was busy (other processes used 1.40 of 2 cores)" in c
    assert f"{MARK}: measured while the machine was busy (2 cells)" in c
    calm = caption({**RUN, **IDLE}, None, marked=0)
    assert "busy" not in calm and MARK not in calm
    legacy = caption(None, {"host": "old", "date": "2026-01-02T00:00:00"})
    assert legacy == " Machine load not recorded (old, 2026-01-02)."
    assert mark(BUSY) == MARK and mark(IDLE) == "" and mark(None) == "" and mark(float("nan")) == ""


def test_busy_testbeds_keyed_by_setting():
    b = {"testbeds": [{"workers": 3, "rate_bps": 1e8, "delay_s": 0.005, "conditions": BUSY},
                      {"workers": 2, "rate_bps": 1e9, "conditions": IDLE}, {"workers": 4, "rate_bps": 1e7}]}
    assert busy_testbeds(b) == {(3, 100.0, 5.0): True, (2, 1000.0, 0.0): False}


def _e2_row(method, params, busy):
    return {"input": "resnet20", "method": method, "params": params, "baseline": False, "numel": 1000,
            "ratio": 4.0, "rel_l2_error": 0.01, "bias": 0.0, "throughput_gbps": 1.5, "ok": True,
            "conditions": BUSY if busy else IDLE}


def test_e2_table_marks_the_busy_row_and_prints_the_load(tmp_path):
    from lowbw.report.e2 import E2

    (tmp_path / "bench").mkdir()
    (tmp_path / "bench" / "compressors.json").write_text(json.dumps({
        "rows": [_e2_row("fp16", "", False), _e2_row("topk", "k=0.01", True)], "config": {"numel": 1000},
        "provenance": {"cpu": "cpu", "host": "box"}, "conditions": RUN}))
    tab = E2.table(E2.stats(Context({}, tmp_path, tmp_path / "out")))
    lines = {ln.split(" & ")[0]: ln for ln in tab.splitlines() if " & " in ln}
    assert lines["topk (k=0.01)"].count(MARK) == 1 and MARK not in lines["fp16"]
    assert "1-min load 0.25/6.75/3.50" in tab and "(1 cells)" in tab


def test_e3_table_of_a_file_without_conditions_says_so(tmp_path):
    from lowbw.report.e3 import E3

    (tmp_path / "bench").mkdir()
    row = {"model": "resnet20", "params": 270000, "grad_bytes": 1080000, "sample_s": 0.01, "ref_global_batch": 128,
           "ref_steps": 64000}
    (tmp_path / "bench" / "models.json").write_text(json.dumps({"rows": [row], "provenance": {
        "cpu": "cpu", "host": "old", "date": "2026-01-02T00:00:00"}}))
    ctx = Context({"report": {"bandwidths_mbit": [10]}}, tmp_path, tmp_path / "out")
    tab = E3.table(E3.stats(ctx))
    assert "Machine load not recorded (old, 2026-01-02)." in tab and MARK not in tab
    (tmp_path / "bench" / "models.json").write_text(json.dumps({"rows": [{**row, "conditions": BUSY}], "provenance": {
        "cpu": "cpu"}, "conditions": RUN}))
    tab = E3.table(E3.stats(Context({"report": {"bandwidths_mbit": [10]}}, tmp_path, tmp_path / "out")))
    assert tab.count(MARK) == 2 and "1-min load 0.25/6.75/3.50" in tab  # the cell and the caption's key



def test_runs_provenance_names_machine_days_and_commits(tmp_path):
    """Stored runs' captions name where and at which commit they ran: one commit by itself, several by count
    with the first and last by time; a run without provenance.json adds nothing, and none gives ''."""
    def run(name, commit, at):
        d = tmp_path / name
        d.mkdir()
        (d / "provenance.json").write_text(json.dumps({
            "host": "vm", "device": "cpu", "torch_version": "2.13.0+cpu", "git_commit": commit,
            "measured_at": at, "measured_date": at[:10]}))
        return d

    a = run("a", "a" * 40, "2026-11-27T10:00:00+00:00")
    assert runs_provenance([a]) == ("measured on vm (cpu, torch 2.13.0+cpu) on 2026-11-27, at commit "
                                    + "a" * 12)
    b = run("b", "b" * 40 + "-dirty", "2026-11-28T09:00:00+00:00")
    c = run("c", "c" * 40, "2026-11-27T12:00:00+00:00")
    bare = tmp_path / "bare"
    bare.mkdir()
    words = runs_provenance([b, bare, a, c])
    assert words == ("measured on vm (cpu, torch 2.13.0+cpu) on 2026-11-27, 2026-11-28, at 3 commits, the first "
                     + "a" * 12 + ", the last " + "b" * 12 + "-dirty")
    assert runs_provenance([bare]) == ""
