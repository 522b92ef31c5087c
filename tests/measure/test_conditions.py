"""lowbw.measure.conditions: the busy verdict, the sampler's bounds, and a benchmark's warning and --strict under a
synthetic load (busy processes spun for about two seconds, always killed)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from contextlib import contextmanager, suppress
from pathlib import Path

import pytest

from lowbw.measure import conditions as cond

pytestmark = pytest.mark.skipif(not Path("/proc/stat").exists(), reason="needs Linux /proc/stat")

CORES = os.cpu_count() or 1
N_SPIN = max(2, (CORES + 1) // 2)  # at least half the cores: above OTHERS_MAX (a quarter) on any machine
SPIN = "import time\nt = time.monotonic()\nwhile time.monotonic() - t < 300: pass\n"


@contextmanager
def spinners(n: int):
    """``n`` processes that spin a core each (they stop by themselves after 300 s; killed on exit)."""
    procs = [subprocess.Popen([sys.executable, "-c", SPIN]) for _ in range(n)]
    try:
        time.sleep(0.3)  # let them start spinning
        yield procs
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait(timeout=10)


@contextmanager
def outside_spinners(n: int):
    """``n`` spinning processes outside our process tree, as another user's work would be: started by a
    launcher that exits at once, so that they are reparented away from us (killed on exit)."""
    launch = ("import subprocess, sys\n"
              f"print(' '.join(str(subprocess.Popen([sys.executable, '-c', {SPIN!r}], stdout=subprocess.DEVNULL, "
              f"stderr=subprocess.DEVNULL).pid) for _ in range({n})))")
    pids = [int(x) for x in subprocess.run([sys.executable, "-c", launch], capture_output=True, text=True,
                                           check=True, timeout=30).stdout.split()]
    try:
        time.sleep(0.3)  # let them start spinning
        yield pids
    finally:
        for pid in pids:
            with suppress(ProcessLookupError):
                os.kill(pid, 9)


def _cpu_s(pid: int) -> float:
    """CPU seconds (user + system) of a live process."""
    f = Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime after the state field


def _spin_for(pid: int, t0: float, cpu_s: float = 0.2, timeout: float = 20.0) -> float:
    """Wait until the spinner ``pid`` has used ``cpu_s`` CPU seconds since ``t0`` (however loaded the machine;
    at most ``timeout`` s); its CPU seconds since ``t0``."""
    end = time.monotonic() + timeout
    while _cpu_s(pid) - t0 < cpu_s and time.monotonic() < end:
        time.sleep(0.1)
    return _cpu_s(pid) - t0


@pytest.fixture(autouse=True)
def _no_workflow(monkeypatch):
    monkeypatch.delenv(cond.WORKFLOW_PID_ENV, raising=False)  # these tests choose their process tree


def test_verdict_rules():
    # idle: nothing
    assert cond.verdict(2, others_cores=0.1, steal=0.0, load1_mean=1.2, own_cores=1.0) == ()
    # each rule alone, at its threshold's far side only
    assert cond.verdict(2, others_cores=0.5, steal=0.0, load1_mean=0.0, own_cores=0.0) == ()
    assert "other processes used 0.51 of 2 cores" in cond.verdict(2, 0.51, 0.0, 0.0, 0.0)
    assert cond.verdict(4, None, 0.05, 0.0, 0.0) == ()
    assert cond.verdict(4, None, 0.06, 0.0, 0.0) == ("CPU steal 6.0%",)
    assert cond.verdict(2, None, None, 4.0, 2.0) == ()  # our own two workers on two cores
    assert cond.verdict(2, None, None, 6.5, 2.0) == ("load 6.5 on 2 cores (2.0 of it ours)",)
    # four workers of ours on two cores: the load counts four runnable tasks, the CPU two cores; not busy
    assert cond.verdict(2, None, None, 3.9, 1.5, own_tasks=4.0) == ()
    assert cond.verdict(2, None, None, 6.5, 1.5, own_tasks=4.0) == ("load 6.5 on 2 cores (4.0 of it ours)",)
    # where other processes' CPU is measured it decides alone: a lagging load of 3.5 after our own cells, with
    # nobody else on the cores, is not busy; the same load with another process on a core is
    assert cond.verdict(2, 0.0, 0.0, 3.5, 1.1) == ()
    assert cond.verdict(2, 0.9, 0.0, 3.5, 1.1) == ("other processes used 0.90 of 2 cores",)


def test_verdict_needs_more_than_one_tick_of_the_counters():
    """A 66 ms cell on 2 cores spans 2 * 0.066 * HZ ticks: one stolen tick is 1/13 = 7.7% at HZ = 100 and below
    the counter's resolution; three stolen ticks are not, and over a 10 s span one tick's worth is nothing."""
    hz, wall = cond.CLOCK_HZ, 0.066
    ticks = 2 * wall * hz
    assert cond.verdict(2, 0.0, 1 / ticks, 0.5, 1.0, wall_s=wall) == ()
    assert cond.verdict(2, 0.0, 1 / ticks, 0.5, 1.0) == (f"CPU steal {100 / ticks:.1f}%",)  # no span: no margin
    assert cond.verdict(2, 0.0, 3 / ticks, 0.5, 1.0, wall_s=wall) == (f"CPU steal {300 / ticks:.1f}%",)
    assert cond.verdict(2, 0.0, 0.06, 0.5, 1.0, wall_s=10.0) == ("CPU steal 6.0%",)
    # other processes: two ticks (the machine's and ours) of margin over the span
    assert cond.verdict(2, 0.5 + 1.5 / (hz * wall), 0.0, 0.5, 1.0, wall_s=wall) == ()
    assert cond.verdict(2, 0.5 + 2.5 / (hz * wall), 0.0, 0.5, 1.0, wall_s=wall) != ()


def test_own_tasks_count_the_runnable_threads_of_our_tree():
    """Three children spinning are three runnable tasks of our tree (what the load average counts), and the
    recorder averages them over its looks."""
    spin = "import time\nt = time.time()\nwhile time.time() - t < 1.0: pass"
    kids = [subprocess.Popen([sys.executable, "-c", spin]) for _ in range(3)]
    try:
        with cond.record(interval_s=0.1) as rec:
            time.sleep(0.5)
    finally:
        for k in kids:
            k.wait()
    assert rec.conditions.own_tasks_mean >= 2.0
    assert max(s.own_tasks for s in rec.conditions.during) >= 3


def test_idle_conditions_do_not_warn(capsys):
    c = cond.Conditions(host="h", cores=2, date="2026-01-01T00:00:00+00:00", wall_s=10.0, cpu_s=9.0,
                        load_before=(0.2, 0.1, 0.1), load_after=(1.0, 0.3, 0.1), load1_max=1.0, load1_mean=0.6,
                        cpu_busy=0.48, steal=0.0, others_cores=0.06, during=(), busy=False, reasons=())
    assert cond.check(c, "bench x", "out.json", strict=True)
    assert capsys.readouterr().err == ""
    d = c.to_json()
    assert d["own_cores"] == pytest.approx(0.9) and not cond.is_busy(d) and not cond.is_busy(None)
    assert cond.describe(d) == "load 0.2/1.0/1.0 (before/max/after) on 2 cores, others 0.06 cores, steal 0.0%"


def test_synthetic_load_is_busy_and_strict_refuses(capsys):
    with outside_spinners(N_SPIN), cond.record(interval_s=0.2) as rec:
        time.sleep(1.5)
    c = rec.conditions
    assert c.busy and any("other processes" in r for r in c.reasons), c
    assert c.others_cores > 0.5 * N_SPIN * 0.5  # at least half of what the spinners take
    assert c.cpu_s < 0.2 * c.wall_s  # we only slept
    assert 3 <= len(c.during) <= 10 and all(s.cpu_busy is not None for s in c.during)
    assert cond.check(c, "bench x", "out.json", strict=False)
    assert "WARNING: the machine was busy" in capsys.readouterr().err
    assert not cond.check(c, "bench x", "out.json", strict=True)
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "refusing to write out.json" in err


def test_sampler_is_bounded_and_stops():
    rec = cond.record(interval_s=0.01, max_samples=8).start()
    time.sleep(0.5)  # ~50 intervals: thinned, never more than max_samples
    c = rec.stop()
    assert 2 <= len(c.during) < 8
    ts = [s.t for s in c.during]
    assert ts == sorted(ts) and ts[-1] > 0.2  # the thinned record still spans the run
    assert not rec._thread.is_alive()
    assert rec.stop() is c  # idempotent
    rec2 = cond.record(interval_s=0.01, max_s=0.05).start()
    time.sleep(0.3)
    assert not rec2._thread.is_alive()  # stopped by itself after max_s
    rec2.stop()
    with pytest.raises(ValueError, match="interval_s=-1"):
        cond.record(interval_s=-1)


@pytest.mark.slow
def test_benchmark_warns_and_strict_refuses_under_load(tmp_path):
    """A real benchmark (E3's model cost, one tiny model) under processes spinning on half the cores: without
    --strict it warns and writes its conditions; with --strict it writes nothing and exits 1, one line."""
    out = tmp_path / "models.json"
    args = [sys.executable, "-m", "lowbw", "bench", "models", "--models", "mlp", "--reps", "40", "--batch", "8",
            "--device", "cpu"]
    with spinners(N_SPIN):
        p = subprocess.run([*args, "--out", str(out)], capture_output=True, text=True, timeout=100)
        q = subprocess.run([*args, "--out", str(tmp_path / "strict.json"), "--strict"], capture_output=True,
                           text=True, timeout=100)
    assert p.returncode == 0, p.stderr
    assert "WARNING: the machine was busy" in p.stderr
    res = json.loads(out.read_text())
    assert res["conditions"]["busy"] and res["conditions"]["others_cores"] > 0.25 * res["conditions"]["cores"]
    assert q.returncode == 1 and not (tmp_path / "strict.json").exists()
    assert "refusing to write" in q.stderr and "--strict" in q.stderr.strip().splitlines()[-1]


def test_own_process_tree_is_not_contention():
    """A spinning child of ours (a benchmark's worker, running, not reaped yet) is our CPU, not other
    processes': its seconds are in cpu_s and out of others_cores; a spinner outside our tree is the reverse."""
    with spinners(1) as (child,):
        t0 = _cpu_s(child.pid)
        with cond.record(interval_s=0.2) as rec:
            spun = _spin_for(child.pid, t0)  # read while it still runs: before the recorder stops, not reaped
    c = rec.conditions
    assert c.tree == f"process {os.getpid()}"
    assert c.cpu_s >= 0.9 * spun > 0.1, (c.cpu_s, spun)
    with outside_spinners(1) as (pid,):
        t0 = _cpu_s(pid)
        with cond.record(interval_s=0.2) as rec:
            _spin_for(pid, t0)
        spun = _cpu_s(pid) - t0
    c = rec.conditions
    assert c.cpu_s < 0.2 * c.wall_s and c.others_cores * c.wall_s >= 0.9 * spun > 0.1, (c, spun)


RECORD = """import json, sys, time
from lowbw.measure import conditions as cond
with cond.record(interval_s=0.2) as rec:
    time.sleep(float(sys.argv[1]))
print(json.dumps({"cpu_s": rec.conditions.cpu_s, "tree": rec.conditions.tree}))
"""


@pytest.mark.parametrize("workflow", [True, False])
def test_workflow_tree_is_not_contention(workflow):
    """A benchmark launched by a workflow ($LOWBW_WORKFLOW_PID: Snakemake's pid) counts the workflow's other
    processes (here a spinning sibling, as papermill's client or Snakemake itself) as its own; without the
    variable the sibling is another process's work. A stale pid (not an ancestor) is ignored."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    with spinners(1) as (sib,):
        # this test plays the workflow (spinner and benchmark its children); else a live pid that is no ancestor
        env[cond.WORKFLOW_PID_ENV] = str(os.getpid() if workflow else sib.pid)
        t0 = _cpu_s(sib.pid)
        p = subprocess.run([sys.executable, "-c", RECORD, "3"], capture_output=True, text=True, env=env, timeout=60)
        spun = _cpu_s(sib.pid) - t0
    assert p.returncode == 0, p.stderr
    got = json.loads(p.stdout)
    if workflow:
        assert got["tree"] == f"workflow {os.getpid()}" and got["cpu_s"] >= 0.6 * spun > 0.05, (got, spun)
    else:
        assert got["tree"].startswith("process ") and got["cpu_s"] < 0.5 * spun and spun > 0.05, (got, spun)
