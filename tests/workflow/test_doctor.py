"""``lowbw doctor``: a dead testbed's namespaces are listed with the processes still running in them, and the
summary counts those processes (issue 32, item 4). Test SLURM clusters: tests/workflow/test_slurm_teardown.py."""

from __future__ import annotations

import secrets
import subprocess
import time

import pytest

from lowbw.net.namespaces import ns_processes
from lowbw.workflow import doctor
from tests.conftest import netns


@pytest.mark.netns
@netns
def test_dry_run_lists_the_processes_inside_leftover_namespaces_and_the_summary_counts_them(
        tmp_path, capsys, monkeypatch):
    from lowbw.cli import main

    prefix = "lbwd" + secrets.token_hex(3)
    dead = 4194304 + 23  # above the default pid_max: no live process has it
    names = [f"{prefix}-{dead}-abc123-br", f"{prefix}-{dead}-abc123-w0"]
    procs = []
    try:
        for n in names:
            subprocess.run(["ip", "netns", "add", n], check=True)
        # two workers of the dead testbed still running inside worker 0's namespace
        procs = [subprocess.Popen(["ip", "netns", "exec", names[1], "sleep", str(600 + k)]) for k in range(2)]
        monkeypatch.setattr(doctor, "orphaned_workers", lambda: [])  # this test's namespaces only
        args = ["doctor", "--runs", str(tmp_path), "--prefix", prefix, "--slurm-conf", str(tmp_path / "none")]
        for _ in range(100):  # until both have exec'd sleep
            if sorted(c for _, c in ns_processes(names[1])) == ["sleep 600", "sleep 601"]:
                break
            time.sleep(0.05)
        assert main([*args, "--dry-run"]) == 1
        out = capsys.readouterr().out
        assert f"namespace {names[1]}: left by a dead testbed, 2 process(es) in it" in out, out
        for k, p in enumerate(procs):
            assert f"  process {p.pid} in {names[1]}: sleep {600 + k}" in out, out
        assert f"namespace {names[0]}: left by a dead testbed\n" in out  # the bridge: nothing runs in it
        assert all(p.poll() is None for p in procs)  # a dry run removes nothing
        assert main(args) == 0
        out = capsys.readouterr().out
        assert ("removed 2 namespace(s) with the 2 process(es) running in them, 0 orphaned worker(s) outside "
                "them") in out, out
        assert all(p.wait(timeout=10) is not None for p in procs)
        listing = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        assert not any(n in listing for n in names)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        for n in names:
            subprocess.run(["ip", "netns", "del", n], capture_output=True)
