"""examples/gpu (the next lent GPU's script): its sizing picks what fits one call, a run projected past the
deadline is stopped and an unfinished run never stored, and a CPU rehearsal of the whole script stores what
it finished, so that the next lend takes the next cells."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import MIRROR, needs_corpus

ROOT = Path(__file__).resolve().parents[2]

_spec = importlib.util.spec_from_file_location("gpu_lend", ROOT / "examples" / "gpu" / "lend.py")
lend = sys.modules["gpu_lend"] = importlib.util.module_from_spec(_spec)  # dataclasses look their module up
_spec.loader.exec_module(lend)


def _cells() -> list:
    return [lend.Cell(m, s, f"runs/x/method~{m}/seed~{s}") for s in lend.SEEDS for m in lend.METHODS]


def test_the_sizing_of_the_header_and_what_one_call_runs():
    """examples/gpu/lm_evidence.sh's arithmetic: one run alone 404 s, two at once 536 s, PowerSGD 610 s."""
    assert lend.estimate(["dense"], 5000) == pytest.approx(404, abs=1)
    assert lend.estimate(["dense", "diloco50"], 5000) == pytest.approx(536, abs=1)
    assert lend.estimate(["powersgd4"], 5000) == pytest.approx(610, abs=1)
    cells = _cells()
    todo = lend.plan(cells, 420, 0, 5000)
    assert [(c.method, c.seed) for c in todo] == [("dense", 0)]
    assert {(c.method, c.status) for c in cells if c.status == "skipped"} == {("powersgd4", "skipped")}
    assert "needs ~610 s" in next(c.note for c in cells if c.method == "powersgd4")
    assert [(c.method, c.seed) for c in lend.plan(_cells(), 540, 0, 5000)] == [("dense", 0), ("diloco50", 0)]
    assert len(lend.plan(_cells(), 420, 3, 5000)) == 3  # asked for: the deadline then stops what does not fit


def _env() -> dict:
    return {**os.environ, "PYTHONPATH": str(ROOT), "LOWBW_DATA_MIRROR": str(MIRROR), "PY": sys.executable}


@needs_corpus
def test_a_run_projected_past_the_deadline_is_stopped_and_nothing_unfinished_is_stored(tmp_path):
    r = subprocess.run([sys.executable, str(ROOT / "examples/gpu/lend.py"), str(tmp_path), "--cpu", "--steps",
                        "5000", "--train-s", "8", "--parallel", "2", "--poll-s", "1"], env=_env(), cwd=ROOT,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 1, r.stdout + r.stderr
    cells = {(c["method"], c["seed"]): c for c in json.loads((tmp_path / "lend.json").read_text())["cells"]}
    stopped = cells[("diloco50", 0)]
    assert stopped["status"] == "stopped" and "projected past the deadline" in stopped["note"]
    assert cells[("dense", 0)]["status"] == "timed out" and 0 < cells[("dense", 0)]["steps_done"] < 5000
    assert not (tmp_path / "store_cpu").exists()


@needs_corpus
@pytest.mark.slow
def test_a_cpu_rehearsal_of_the_script_stores_its_runs_and_the_next_lend_takes_the_next_cells(tmp_path):
    out = tmp_path / "lend1"
    r = subprocess.run(["bash", str(ROOT / "examples/gpu/lm_evidence.sh"), str(out), "120", "2"],
                       env={**_env(), "LEND_CPU": "1"}, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    log = (out / "logs.txt").read_text()
    assert "lend.py exit 0" in log and "bench.cuda exit 0" in log and (out / "cuda.json").is_file()
    assert (out / "store.tgz").is_file()
    assert not list(out.glob("run_*.txt")) and len([p for p in out.iterdir() if p.is_file()]) <= 8  # what comes back
    store = out / "store_cpu" / lend.EXPERIMENT
    for m in ("dense", "diloco50"):
        run = store / f"method~{m}" / "seed~0"
        cfg = json.loads((run / "config.json").read_text())["config"]
        assert (cfg["dropout"], cfg["model"], cfg["steps"], cfg["seed"]) == (0.2, "gpt-tiny", 40, 0)
        assert json.loads((run / "summary.json").read_text())["complete"]
    # the next lend, on the same store, runs the next cells
    r = subprocess.run([sys.executable, str(ROOT / "examples/gpu/lend.py"), str(out), "--cpu", "--parallel", "2",
                        "--poll-s", "1", "--train-s", "120"], env=_env(), cwd=ROOT, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert sorted(p.parent.name for p in store.glob("method~*/seed~0")) == [
        "method~dense", "method~diloco50", "method~diloco500", "method~sparseloco16"]


def test_the_lend_trains_what_the_gpu_profile_would():
    """examples/gpu/gpt_medium.yaml and config/gpu.yaml's e9_gpu_lm agree on every key both set (nanoGPT's GPU
    recipe), and the lend's grid is that experiment's."""
    import yaml

    gpu = yaml.safe_load((ROOT / "config" / "gpu.yaml").read_text())
    base = gpu["experiments"]["e9_gpu_lm"]["base"]
    run = yaml.safe_load(lend.CONFIG.read_text())
    assert {k: base[k] for k in base if k in run} == {k: run[k] for k in base if k in run}
    assert (run["dropout"], run["steps"], run["model"]) == (0.2, 5000, "gpt-medium")
    assert list(lend.METHODS) == ["dense", "diloco50", "diloco500", "sparseloco16", "powersgd4"]
    assert lend.SEEDS == (0, 1, 2)


def _procs_mentioning(text: str) -> list[int]:
    pids = []
    for d in Path("/proc").iterdir():
        try:
            if d.name.isdigit() and text in (d / "cmdline").read_bytes().decode(errors="replace"):
                pids.append(int(d.name))
        except OSError:
            continue
    return pids


@needs_corpus
def test_stopping_the_launcher_stops_its_runs(tmp_path):
    """The script's outer timeout sends SIGTERM to lend.py: its runs (each in its own process group) end with it."""
    import signal
    import time

    p = subprocess.Popen([sys.executable, str(ROOT / "examples/gpu/lend.py"), str(tmp_path), "--cpu", "--steps",
                          "5000", "--train-s", "100", "--parallel", "2", "--poll-s", "1"], env=_env(), cwd=ROOT,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while len(_procs_mentioning(str(tmp_path))) < 3 and time.monotonic() < deadline:  # the launcher and 2 runs
        time.sleep(0.2)
    assert len(_procs_mentioning(str(tmp_path))) >= 3
    p.send_signal(signal.SIGTERM)
    assert p.wait(60) == 143
    assert _procs_mentioning(str(tmp_path)) == []
