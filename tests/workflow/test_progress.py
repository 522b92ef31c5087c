"""lowbw.workflow.progress (the estimator, the kept durations) and its Snakemake logger plugin on a toy workflow."""

import json
import os
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path

import pytest

from lowbw.workflow.progress import KEEP, Durations, Progress, estimate, format_seconds, split_pending

ROOT = Path(__file__).resolve().parents[2]
PLUGIN_DIR = ROOT / "lowbw" / "snakemake_logger"


def _durations(tmp_path, seconds):
    d = Durations(tmp_path / "h.json")
    for key, values in seconds.items():
        for v in values:
            d.add(key, v)
    return d


def test_like_jobs_are_timed_by_their_own_key_then_their_rule(tmp_path):
    d = _durations(tmp_path, {("train", "e9_lm"): [20.0, 16.0], ("train", "e4_compression"): [2.0, 4.0]})
    assert d.per_job(("train", "e9_lm")) == 18.0
    assert d.per_job(("train", "e4_compression")) == 3.0
    assert d.per_job(("train", "e5_batch")) == pytest.approx(10.5)  # no like job: the rule's mean
    assert d.per_job(("report", "")) is None


def test_estimate_divides_each_rules_work_by_its_parallelism(tmp_path):
    d = _durations(tmp_path, {("train", "e9_lm"): [18.0], ("train", "e4_compression"): [3.0],
                              ("bench_e2e", ""): [100.0]})
    pending = {("train", "e9_lm"): 10, ("train", "e4_compression"): 20, ("bench_e2e", ""): 1, ("paper", ""): 1}
    slots = {"train": 2, "bench_e2e": 1}
    seconds, untimed = estimate(pending, [], d.per_job, lambda r: slots.get(r, 1))
    assert seconds == pytest.approx((10 * 18 + 20 * 3) / 2 + 100)
    assert untimed == 1  # the paper was never timed
    # a running job counts what it is expected to have left, never less than nothing
    seconds2, _ = estimate({}, [(("train", "e9_lm"), 5.0), (("train", "e9_lm"), 60.0)], d.per_job, lambda r: 2)
    assert seconds2 == pytest.approx((18 - 5) / 2)


def test_split_pending_uses_the_declared_experiments():
    counts = {"train": 5, "report": 1}
    declared = {"train": Counter({"e9_lm": 2, "e4_compression": 3})}
    assert split_pending(counts, declared) == Counter({("train", "e9_lm"): 2, ("train", "e4_compression"): 3,
                                                      ("report", ""): 1})
    # more jobs than declared (reruns for changed code): the rest is timed by the rule's mean
    assert split_pending({"train": 7}, declared) == Counter({("train", "e9_lm"): 2, ("train", "e4_compression"): 3,
                                                            ("train", ""): 2})
    # fewer (a subset was asked for): scaled in proportion, adding up to the plan
    got = split_pending({"train": 2}, {"train": Counter({"a": 10, "b": 10})})
    assert sum(got.values()) == 2 and got == Counter({("train", "a"): 1, ("train", "b"): 1})


def test_durations_are_kept_between_runs(tmp_path):
    path = tmp_path / "runs" / ".progress" / "durations.json"
    d = Durations(path)
    for i in range(KEEP + 5):
        d.add(("train", "e4_compression"), float(i))
    d.demand["train"] = {"threads": 1, "machine": 1}
    d.save()
    again = Durations(path)
    assert again.seconds[("train", "e4_compression")] == [float(i) for i in range(5, KEEP + 5)]
    assert again.demand == {"train": {"threads": 1, "machine": 1}}
    assert "train/e4_compression" in json.loads(path.read_text())["seconds"]
    path.write_text("{broken")
    assert Durations(path).seconds == {}  # an unreadable history is started afresh, not an error


def test_progress_line_counts_times_and_learns(tmp_path):
    now = [0.0]
    d = Durations(tmp_path / "h.json")
    p = Progress(d, declared={"train": Counter({"e9_lm": 2, "e4_x": 2})}, clock=lambda: now[0])
    p.cores, p.machine = 2, 100
    p.plan({"train": 4, "bench_e2e": 1, "total": 5})
    assert p.line() == "[lowbw] 0/5 jobs done, 5 left, time left not known yet (no like job timed)"
    p.started(1, "train", {"exp": "e9_lm", "params": "x"}, threads=1, machine=1)
    p.started(2, "train", {"exp": "e4_x"}, threads=1, machine=1)
    now[0] = 4.0
    p.finished(2)
    now[0] = 20.0
    p.finished(1)
    p.done = 2
    assert d.per_job(("train", "e9_lm")) == 20.0 and d.per_job(("train", "e4_x")) == 4.0
    # left: one e9_lm (20 s) and one e4_x (4 s) on 2 slots, the benchmark not timed yet; the last started kind
    assert p.line() == "[lowbw] 2/5 jobs done, 3 left, ~12 s left + 1 job not timed yet (train e4_x ~4.0 s/job)"
    p.started(3, "bench_e2e", {}, threads=2, machine=100)
    assert p.slots("bench_e2e") == 1 and p.slots("train") == 2
    p.remote = 64  # on a cluster: 64 jobs at once, but still one benchmark at a time
    assert p.slots("bench_e2e") == 1 and p.slots("train") == 64
    p.remote = None
    rec = p.record(["snakemake", "--cores", "2"])  # the run's record for the reference build's provenance
    assert (rec["jobs"], rec["done"], rec["wall_s"], rec["cores"]) == (5, 2, 20.0, 2)
    assert rec["command"] == ["snakemake", "--cores", "2"] and set(rec["load_1min"]) == {"start", "max", "end"}
    # a new run with the kept durations starts with an estimate for every job
    again = Progress(Durations(tmp_path / "h.json"), declared={"train": Counter({"e9_lm": 3})}, clock=lambda: 0.0)
    again.cores = 2
    again.plan({"train": 3, "total": 3})
    assert again.line() == "[lowbw] 0/3 jobs done, 3 left, ~30 s left"


def test_format_seconds():
    assert [format_seconds(s) for s in (0.24, 42, 14 * 60, 3 * 3600)] == ["0.2 s", "42 s", "14 min", "3.0 h"]


TOY = textwrap.dedent("""
    import os
    from lowbw.workflow.progress import expect

    EXPS = {"e1_fast": 0.1, "e2_slow": 0.8}
    RUNS = [f"out/{e}/{i}.txt" for e in EXPS for i in range(2)]
    expect("work", [p.split("/")[1] for p in RUNS if not os.path.exists(p)])

    rule all:
        input: RUNS

    rule work:
        output: "out/{exp}/{i}.txt"
        params: s=lambda w: EXPS[w.exp]
        shell: "sleep {params.s}; if [ -n '%(fail)s' ] && [ {wildcards.i} = 1 ]; then exit 3; fi; touch {output}"
""")


def _snakemake(tmp_path, *args, fail=""):
    (tmp_path / "Snakefile").write_text(TOY % {"fail": fail})
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(PLUGIN_DIR), os.environ.get("PYTHONPATH")]))}
    cmd = [sys.executable, "-m", "snakemake", "--cores", "2", "--logger", "lowbw", "--logger-lowbw-every", "0",
           "--logger-lowbw-history", "hist.json", *args]
    return subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)


def test_plugin_on_a_toy_workflow_prints_one_line_per_step_and_keeps_durations(tmp_path):
    r = _snakemake(tmp_path)
    assert r.returncode == 0, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("[lowbw]")]
    assert lines[0] == "[lowbw] 0/5 jobs done, 5 left, time left not known yet (no like job timed)"
    assert lines[-1].startswith("[lowbw] 5/5 jobs done in ")
    assert "Shell command" not in r.stderr and "rule work" not in r.stderr  # the job log is in .snakemake/log
    hist = json.loads((tmp_path / "hist.json").read_text())["seconds"]
    assert len(hist["work/e1_fast"]) == len(hist["work/e2_slow"]) == 2
    assert max(hist["work/e1_fast"]) < min(hist["work/e2_slow"])  # like jobs are told apart
    r2 = _snakemake(tmp_path, "--forceall")
    assert r2.returncode == 0, r2.stderr
    first = next(ln for ln in r2.stderr.splitlines() if ln.startswith("[lowbw]"))
    assert first.startswith("[lowbw] 0/5 jobs done, 5 left, ~") and "not timed" not in first, first


def test_plugin_prints_a_failed_job_in_full(tmp_path):
    r = _snakemake(tmp_path, fail="1")
    assert r.returncode != 0
    assert "Error in rule work" in r.stderr and "exit 3" in r.stderr
    assert any(ln.startswith("[lowbw]") for ln in r.stderr.splitlines())
