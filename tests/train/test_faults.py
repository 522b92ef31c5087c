"""Fault injection (issue 18): kill or stop the launcher or a worker at seeded random points, corrupt every
file type, feed bad input; each case must fail (or recover) with a one-line error naming the culprit, within
a bounded time, leaving no process or namespace behind, and a resumed run must match an uninterrupted one."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from lowbw.runs.io import lock_holders, read_jsonl
from lowbw.runs.results import RunError, load_metrics, load_runs
from lowbw.train.launch import RunDirError, run
from lowbw.workflow.doctor import _cmdline
from tests.conftest import real_mirror

ROOT = Path(__file__).resolve().parents[2]
TINY = dict(dataset="synthetic", model="cnn", workers=2, batch_size=32, steps=6, log_every=1, progress=False,
            train_limit=400, test_limit=100, clock="model", clock_sample_s=1e-3)
LONG = dict(TINY, steps=4000, checkpoint_every=10)  # long enough to be interrupted anywhere
RNG = random.Random(18)  # the random kill points are seeded: a failure reproduces
#: "did not hang" bounds (generous, not speed claims: a busy machine must not fail them): a dead run's processes
#: and lock must be gone within LINGER_S, a signalled or failing run must end within END_S
LINGER_S = 30.0
END_S = 90.0


def one_line(err: str, launcher: bool = False) -> str:
    """The error a user sees: exactly one line, no traceback. ``launcher``: the stderr of a whole
    ``lowbw train`` process, where library warnings may precede it: one ``lowbw train:`` line, last."""
    lines = [x for x in err.strip().splitlines() if x.strip()]
    assert "Traceback" not in err, err
    if launcher:
        ours = [x for x in lines if x.startswith("lowbw")]
        assert len(ours) == 1 and lines[-1] == ours[0] and ours[0].startswith("lowbw train: "), err
        return ours[0]
    assert len(lines) == 1, err
    return lines[0]


def cli(args: list[str], capsys) -> tuple[int, str]:
    """``python -m lowbw ARGS`` in this process (signal handlers restored afterwards)."""
    from lowbw.cli import main

    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        rc = main(args)
    finally:
        for s, h in saved.items():
            signal.signal(s, h)
    cap = capsys.readouterr()
    cli.out = cap.out  # stdout of the last call
    return rc, cap.err


def yaml_file(path: Path, cfg: dict) -> Path:
    path.write_text(json.dumps(cfg))  # JSON is YAML
    return path


def start_train(tmp_path: Path, cfg: dict, out: str, ignore_sigint: bool = False, cwd: Path | None = None):
    """``python -m lowbw train`` as a separate launcher process (stderr to a file)."""
    c = yaml_file(tmp_path / f"{Path(out).name}.yaml", cfg)
    err = open(tmp_path / f"{Path(out).name}.err", "w")  # noqa: SIM115 (closed by the caller's wait)
    env = dict(os.environ, PYTHONPATH=str(ROOT))

    def pre() -> None:
        if ignore_sigint:  # as a shell starts a background job
            signal.signal(signal.SIGINT, signal.SIG_IGN)

    p = subprocess.Popen([sys.executable, "-m", "lowbw", "train", "-c", str(c), "--out", out],
                         stdout=subprocess.DEVNULL, stderr=err, cwd=cwd or tmp_path, env=env, preexec_fn=pre)
    p.err_path = tmp_path / f"{Path(out).name}.err"
    return p


def workers_of(out: Path) -> list[int]:
    """PIDs of live worker processes writing ``out``."""
    pids = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            cmd = _cmdline(int(d.name))
            if "lowbw.train.worker" in cmd and str(out) in cmd:
                pids.append(int(d.name))
    return pids


def rank_of(pid: int) -> int:
    env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return int(next(kv for kv in env if kv.startswith(b"RANK=")).split(b"=")[1])


def wait_for(cond, timeout: float, what: str):
    t0 = time.time()
    while time.time() - t0 < timeout:
        v = cond()
        if v:
            return v
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def gone(out: Path, timeout: float = LINGER_S) -> None:
    """Wait until no worker of ``out`` is left and nobody holds its lock (an AssertionError after ``timeout``,
    a generous "did not linger" bound); a dying process loses its command line before its files are closed,
    so both are checked."""
    wait_for(lambda: not workers_of(out) and not lock_holders(out / ".lock"), timeout,
             f"the workers of {out} to die")


def metrics_lines(out: Path) -> int:
    p = out / "metrics.jsonl"
    return len(p.read_text().splitlines()) if p.exists() else 0


def strip(lines):
    """Metrics without the measured (machine-dependent) fields."""
    return [{k: v for k, v in x.items() if not k.startswith("t_")} for x in lines]


# ----------------------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("text,name,needle", [
    ("", "empty.yaml", "empty config file"),
    ("# only a comment\n", "comment.yaml", "empty config file"),
    ("workers: [2,\n", "bad.yaml", "not valid YAML at line 2"),
    ('{"workers": 2,}', "bad.json", "not valid JSON at line 1"),
    ("- 1\n- 2\n", "list.yaml", "must hold a mapping"),
])
def test_bad_config_file_is_one_line_naming_it(tmp_path, capsys, text, name, needle):
    p = tmp_path / name
    p.write_text(text)
    rc, err = cli(["train", "-c", str(p), "--out", str(tmp_path / "r")], capsys)
    line = one_line(err)
    assert rc == 2 and str(p) in line and needle in line
    assert not (tmp_path / "r").exists()  # before any work


@pytest.mark.parametrize("override,needle", [("lr", "key=value"), ("lr=[0.1,", "'[0.1,'"), ("=3", "no key"),
                                             ("workers=two", "workers")])
def test_bad_set_is_one_line_naming_it(tmp_path, capsys, override, needle):
    rc, err = cli(["train", "--set", override, "--out", str(tmp_path / "r")], capsys)
    assert rc == 2 and needle in one_line(err)


def test_changed_config_on_a_complete_run_names_the_keys(tmp_path, capsys):
    c = yaml_file(tmp_path / "c.yaml", TINY)
    out = str(tmp_path / "r")
    assert cli(["train", "-c", str(c), "--out", out], capsys)[0] == 0
    rc, err = cli(["train", "-c", str(c), "--out", out], capsys)  # same config: nothing to do
    assert rc == 0 and "complete" in one_line(err)
    rc, err = cli(["train", "-c", str(c), "--set", "lr=0.1", "--set", "seed=3", "--out", out], capsys)
    line = one_line(err)
    assert rc == 2 and "another config" in line and "lr: 0.05 -> 0.1" in line and "seed: 0 -> 3" in line
    assert json.loads((tmp_path / "r" / "config.json").read_text())["config"]["lr"] == 0.05  # untouched
    rc, err = cli(["train", "-c", str(c), "--set", "lr=0.1", "--force", "--out", out], capsys)
    assert rc == 0 and json.loads((tmp_path / "r" / "config.json").read_text())["config"]["lr"] == 0.1


def test_changed_config_checkpoint_is_one_line_and_force_starts_over(tmp_path, capsys):
    out = tmp_path / "r"
    run({**TINY, "checkpoint_every": 2}, out, quiet=True, keep_checkpoint=True)
    (out / "summary.json").unlink()  # as if killed after the checkpoint
    c = yaml_file(tmp_path / "c.yaml", {**TINY, "checkpoint_every": 2, "momentum": 0.5})
    rc, err = cli(["train", "-c", str(c), "--out", str(out)], capsys)
    line = one_line(err)
    assert rc == 2 and "checkpoint was written by another config" in line and "momentum: 0.9 -> 0.5" in line
    rc, _ = cli(["train", "-c", str(c), "--out", str(out), "--force"], capsys)
    assert rc == 0 and json.loads((out / "config.json").read_text())["resumes"] == 0


def test_checkpoint_is_deleted_when_the_run_completes_unless_kept(tmp_path):
    run({**TINY, "checkpoint_every": 2}, tmp_path / "a", quiet=True)
    assert not (tmp_path / "a" / "checkpoint").exists()
    run({**TINY, "checkpoint_every": 2}, tmp_path / "b", quiet=True, keep_checkpoint=True)
    assert (tmp_path / "b" / "checkpoint" / "latest.json").exists()


def test_a_held_lock_is_named_with_its_holder(tmp_path, capsys):
    out = tmp_path / "r"
    out.mkdir()
    code = (f"import fcntl,sys; f=open({str(out / '.lock')!r},'a'); fcntl.flock(f, fcntl.LOCK_SH); "
            f"print(1, flush=True); sys.stdin.read()")
    h = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        h.stdout.readline()  # it holds the lock, as a live worker does
        with pytest.raises(RunDirError, match=f"being written by process\\(es\\) {h.pid}"):
            run(TINY, out, quiet=True)
        c = yaml_file(tmp_path / "c.yaml", TINY)
        rc, err = cli(["train", "-c", str(c), "--out", str(out)], capsys)
        assert rc == 2 and str(h.pid) in one_line(err)
    finally:
        h.kill()
        h.wait()
    run(TINY, out, quiet=True)  # released: the run goes ahead


# ------------------------------------------------------------------------------------ corrupt run files
@pytest.fixture(scope="module")
def complete_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("runs") / "r"
    run(TINY, out, quiet=True)
    return out


@pytest.mark.parametrize("damage,needle", [
    (lambda t: t[: t.index("\n") + 1], "has 1 lines, summary.json recorded 8"),  # truncated
    (lambda t: "", "has 0 lines, summary.json recorded 8"),  # emptied
    (lambda t: t + t.splitlines(keepends=True)[-1], "line 9 repeats step 6"),  # a line appended twice
    (lambda t: t.replace('"seed"', '"seed" ', 1) if '"seed"' in t else t.replace(": ", ":  ", 1), "sha256"),
])
def test_damaged_metrics_of_a_complete_run_are_named(tmp_path, complete_run, damage, needle):
    import shutil

    d = tmp_path / "r"
    shutil.copytree(complete_run, d)
    mp = d / "metrics.jsonl"
    mp.write_text(damage(mp.read_text()))
    with pytest.raises(RunError, match=needle) as e:
        load_runs(tmp_path)
    assert str(mp) in str(e.value) or "metrics.jsonl" in str(e.value)


def test_interleaved_metrics_are_named_with_file_and_line(tmp_path, complete_run):
    """Two runs writing one file (issue 18's orphans): steps go backwards; the loader names the line."""
    import shutil

    d = tmp_path / "r"
    shutil.copytree(complete_run, d)
    lines = (d / "metrics.jsonl").read_text().splitlines(keepends=True)
    (d / "metrics.jsonl").write_text("".join(lines[:4] + lines[1:3] + lines[4:]))
    s = json.loads((d / "summary.json").read_text())
    for k in ("metrics_lines", "metrics_sha256"):  # even without the seal (an older run)
        s.pop(k)
    (d / "summary.json").write_text(json.dumps(s))
    for load in (load_metrics, load_runs):
        with pytest.raises(RunError, match=r"metrics.jsonl: line 5 has step 1 after step 3"):
            load(tmp_path)


def test_summary_records_the_metrics_it_completed_with(complete_run):
    s = json.loads((complete_run / "summary.json").read_text())
    assert s["metrics_lines"] == len(read_jsonl(complete_run / "metrics.jsonl")) == 8
    assert len(load_metrics(complete_run.parent)) == 8


# --------------------------------------------------------------------------------------- corrupt data
def test_cache_checksums_catch_flipped_bytes_and_files_are_readable(tmp_path):
    from lowbw.data.loader import _write_cache, verify_cache

    entry = tmp_path / "ds"
    rng = np.random.default_rng(0)
    arrays = {"x_train": rng.integers(0, 256, (20, 4, 4, 1), dtype=np.uint8), "y_train": np.zeros(20, np.uint8),
              "x_test": rng.integers(0, 256, (5, 4, 4, 1), dtype=np.uint8), "y_test": np.zeros(5, np.uint8)}
    old = os.umask(0o022)
    try:
        _write_cache(entry, arrays, "test")
    finally:
        os.umask(old)
    for p in entry.iterdir():
        assert p.stat().st_mode & 0o777 == 0o644, p
    assert verify_cache(entry) == []
    with open(entry / "x_train.npy", "r+b") as f:
        f.seek(200)
        f.write(b"\xff\x00")
    problems = verify_cache(entry)
    assert len(problems) == 1 and "x_train.npy" in problems[0] and "does not match" in problems[0]


def test_corrupt_mnist_cache_is_not_served(tmp_path, monkeypatch, capsys):
    mirror = real_mirror()
    if mirror is None or not (Path(mirror) / "mnist.npz").exists():
        pytest.skip("needs the MNIST mirror (LOWBW_DATA_MIRROR or ../shared/data)")
    from lowbw.data import load
    from lowbw.data.cli import _verify

    monkeypatch.setenv("LOWBW_DATA_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("LOWBW_DATA_MIRROR", mirror)
    good = load("mnist").x_train.clone()
    with open(tmp_path / "cache" / "mnist" / "x_train.npy", "r+b") as f:
        f.seek(5000)
        f.write(b"\xff\x00\xff\x00")
    assert _verify(["mnist"], None) == 1 and "x_train.npy" in capsys.readouterr().err
    ds = load("mnist")
    assert ds.source != "cache" and bool((ds.x_train == good).all())
    assert "rejected" in capsys.readouterr().err
    assert _verify(["mnist"], None) == 0


# -------------------------------------------------------------------------------- kills and stalls
@pytest.mark.slow
def test_sigkill_of_the_launcher_kills_the_workers_and_the_rerun_resumes_identically(tmp_path):
    """Workers hold the lock with the launcher, die with it, and a rerun resumes to the same metrics."""
    cfg = {**LONG, "backend": "procs", "steps": 100}
    ref = tmp_path / "ref"
    run(cfg, ref, quiet=True)
    out = tmp_path / "r"
    p = start_train(tmp_path, cfg, str(out))
    try:
        wait_for(lambda: (out / "checkpoint" / "latest.json").exists(), 90, "the first checkpoint")
        time.sleep(RNG.uniform(0.0, 1.0))
        pids = workers_of(out)
        assert len(pids) == 2 and set(pids) <= set(lock_holders(out / ".lock"))
        p.kill()
        p.wait()
        gone(out)
    finally:
        p.kill()
    assert not (out / "summary.json").exists()
    run(cfg, out, quiet=True)  # the lock is free: nothing else writes the directory
    assert json.loads((out / "config.json").read_text())["resumes"] >= 1
    assert strip(read_jsonl(out / "metrics.jsonl")) == strip(read_jsonl(ref / "metrics.jsonl"))
    assert len(load_metrics(tmp_path)) == 2 * len(read_jsonl(ref / "metrics.jsonl"))


def test_an_orphaned_lock_holder_blocks_the_rerun_until_doctor_removes_it(tmp_path, capsys):
    out = tmp_path / "runs" / "r"
    out.mkdir(parents=True)
    holder = (f"import fcntl,time; f=open({str(out / '.lock')!r},'a'); fcntl.flock(f, fcntl.LOCK_SH); "
              f"open({str(tmp_path / 'held')!r},'w').close(); time.sleep(120)")
    # double fork: the holder is re-parented like a worker whose launcher was SIGKILLed before issue 18
    subprocess.run(["sh", "-c", f'{sys.executable} -c "{holder}" lowbw.train.worker --out {out} &'], check=True)
    wait_for(lambda: (tmp_path / "held").exists(), 20, "the orphan to take the lock")
    orphan = lock_holders(out / ".lock")
    try:
        with pytest.raises(RunDirError, match=f"process\\(es\\) {orphan[0]}"):
            run(TINY, out, quiet=True)
        rc, _ = cli(["doctor", "--runs", str(tmp_path / "runs"), "--dry-run"], capsys)
        assert rc == 1 and f"worker {orphan[0]}: orphaned" in cli.out and "stale (held only by orphaned" in cli.out
        assert lock_holders(out / ".lock") == orphan  # a dry run removes nothing
        rc, _ = cli(["doctor", "--runs", str(tmp_path / "runs")], capsys)
        assert rc == 0 and "1 orphaned worker(s)" in cli.out
        wait_for(lambda: not lock_holders(out / ".lock"), 5, "the orphan to die")
    finally:
        for pid in orphan:
            with __import__("contextlib").suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    run(TINY, out, quiet=True)


@pytest.mark.parametrize("sig,needle", [(signal.SIGSTOP, "rank {r} stopped answering"),
                                        (signal.SIGKILL, "rank {r} was killed by SIGKILL")])
def test_a_stalled_or_killed_worker_ends_the_run_naming_its_rank(tmp_path, sig, needle):
    timeout = 3.0
    out = tmp_path / "r"
    p = start_train(tmp_path, {**LONG, "backend": "procs", "peer_timeout_s": timeout}, str(out))
    try:
        wait_for(lambda: metrics_lines(out) >= 1, 90, "the first metrics line")
        time.sleep(RNG.uniform(0.0, 1.0))
        pids = workers_of(out)
        victim = pids[RNG.randrange(len(pids))]
        r = rank_of(victim)
        os.kill(victim, sig)
        rc = p.wait(timeout=END_S)
    finally:
        p.kill()
    line = one_line(p.err_path.read_text(), launcher=True)
    assert rc == 1 and needle.format(r=r) in line, line
    if sig == signal.SIGSTOP:  # ended by the run's own peer timeout (not the default one), as the line says
        assert f"(peer timeout {timeout:g} s)" in line, line
    gone(out)


@pytest.mark.slow
def test_a_failing_workers_own_error_is_the_launchers(tmp_path):
    """Point 8: not "see the workers' stderr" but the first failing worker's error line."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        out = tmp_path / "r"
        p = start_train(tmp_path, {**TINY, "backend": "procs", "master_port": port}, str(out))
        rc = p.wait(timeout=END_S)
    line = one_line(p.err_path.read_text(), launcher=True)
    assert rc == 1 and "rank 0 failed (exit 1): lowbw worker rank 0:" in line and "address already in use" in \
        line.lower(), line
    gone(out)


@pytest.mark.parametrize("sig,rc_want,needle", [(signal.SIGINT, 130, "interrupted"),
                                                 (signal.SIGTERM, 143, "stopped by SIGTERM")])
def test_sigint_or_sigterm_stops_a_background_run_that_ignored_sigint(tmp_path, sig, rc_want, needle):
    out = tmp_path / "r"
    p = start_train(tmp_path, {**LONG, "backend": "procs"}, str(out), ignore_sigint=True)
    try:
        wait_for(lambda: metrics_lines(out) >= 1, 90, "the first metrics line")
        time.sleep(RNG.uniform(0.0, 0.5))
        p.send_signal(sig)
        rc = p.wait(timeout=END_S)
    finally:
        p.kill()
    assert rc == rc_want and needle in one_line(p.err_path.read_text(), launcher=True)
    gone(out)


@pytest.mark.netns
@pytest.mark.slow
def test_testbed_relative_out_then_sigkill_leaves_no_namespace(tmp_path):
    from lowbw.net.testbed import netns_missing

    if netns_missing():
        pytest.skip("needs root, ip netns and tc: " + "; ".join(netns_missing()))
    cfg = {**TINY, "backend": "procs", "testbed": True, "bandwidth_mbit": 100.0}
    p = start_train(tmp_path, cfg, "tb_rel")  # relative to its cwd, which is not the workers'
    assert p.wait(timeout=120) == 0, p.err_path.read_text()
    assert json.loads((tmp_path / "tb_rel" / "summary.json").read_text())["complete"]

    def ours() -> list[str]:
        listing = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        return [ln.split()[0] for ln in listing.splitlines() if ln.startswith(f"lbw-{p.pid}-")]

    out = tmp_path / "tb_kill"
    p = start_train(tmp_path, {**cfg, "steps": 4000}, "tb_kill")
    try:
        wait_for(lambda: metrics_lines(out) >= 1, 120, "the first metrics line")
        time.sleep(RNG.uniform(0.0, 1.0))
        assert len(ours()) == 3 and len(workers_of(out)) == 2
        p.kill()
        p.wait()
        wait_for(lambda: not ours(), LINGER_S, "the guardian to delete the namespaces")
        gone(out)
    finally:
        p.kill()
        subprocess.run([sys.executable, "-m", "lowbw", "testbed", "--cleanup"], capture_output=True, cwd=ROOT)


@pytest.mark.netns
def test_doctor_removes_a_dead_testbeds_namespaces(tmp_path, capsys):
    from lowbw.net.testbed import netns_missing

    if netns_missing():
        pytest.skip("needs root, ip netns and tc: " + "; ".join(netns_missing()))
    dead = 4194304 + RNG.randrange(1000)  # above pid_max's default: no live process has it
    names = [f"lbw-{dead}-abc123-br", f"lbw-{dead}-abc123-w0"]
    for n in names:
        subprocess.run(["ip", "netns", "add", n], check=True)
    try:
        rc, _ = cli(["doctor", "--runs", str(tmp_path), "--dry-run"], capsys)
        assert rc == 1 and all(f"namespace {n}: left by a dead testbed" in cli.out for n in names)
        rc, _ = cli(["doctor", "--runs", str(tmp_path)], capsys)
        listing = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        assert rc == 0 and "2 namespace(s)" in cli.out and not any(n in listing for n in names)
    finally:
        for n in names:
            subprocess.run(["ip", "netns", "del", n], capture_output=True)
