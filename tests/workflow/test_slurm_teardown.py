"""The one-node SLURM test cluster is torn down on SIGTERM, a leftover of ours is told from a site's own SLURM
configuration, and ``lowbw doctor`` removes a test cluster whose creator is gone (issue 32, item 6).

No real cluster comes up here: ``munged``, ``slurmctld``, ``slurmd`` and the client tools are stand-ins on
PATH (``_fake_slurm``) that start sleeping daemons whose command lines name the cluster's directory, as the
real ones do, and write the pid files slurm.conf names; tests/slurm_local.py drives them unchanged, and the
symlink goes to a private path instead of /etc/slurm/slurm.conf.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from lowbw.workflow import doctor
from tests import slurm_local
from tests.helpers import wait_for

ROOT = Path(__file__).resolve().parents[2]

FAKE = textwrap.dedent('''
    import os, signal, subprocess, sys
    name, args = os.path.basename(sys.argv[1]), sys.argv[2:]

    def conf_value(conf, key):
        for line in open(conf):
            if line.startswith(key + "="):
                return line.split("=", 1)[1].strip()

    def daemon(pidfile, *cmdline):  # detached, as the real daemons are; its command line names the directory
        p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)", name, *cmdline],
                             stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             start_new_session=True)
        open(pidfile, "w").write(f"{p.pid}\\n")

    if name == "munged":
        opts = dict(a[2:].split("=", 1) for a in args if a.startswith("--") and "=" in a)
        daemon(opts["pid-file"], *args)
    elif name == "slurmctld":
        daemon(conf_value(args[args.index("-f") + 1], "SlurmctldPidFile"), *args)
    elif name == "slurmd" and "-C" in args:
        print("NodeName=fake CPUs=1 Boards=1 SocketsPerBoard=1 CoresPerSocket=1 ThreadsPerCore=1 RealMemory=1000")
    elif name == "slurmd":
        daemon(conf_value(args[args.index("-f") + 1], "SlurmdPidFile"), *args)
    elif name == "sinfo":
        print("idle")
    elif name == "scontrol" and args[:1] == ["shutdown"]:
        conf = os.environ["SLURM_CONF"]
        for key in ("SlurmctldPidFile", "SlurmdPidFile"):
            try:
                os.kill(int(open(conf_value(conf, key)).read()), signal.SIGTERM)
            except (OSError, ValueError):
                pass
''')


@pytest.fixture
def fake_slurm(tmp_path):
    """PATH with stand-ins for munged, slurmctld, slurmd, sinfo, squeue, scancel and scontrol."""
    bindir = tmp_path / "fakebin"
    bindir.mkdir()
    (bindir / "fake_slurm.py").write_text(FAKE)
    for name in ("munged", "slurmctld", "slurmd", "sinfo", "squeue", "scancel", "scontrol"):
        (bindir / name).write_text(f'#!/bin/sh\nexec "{sys.executable}" "{bindir / "fake_slurm.py"}" "$0" "$@"\n')
        (bindir / name).chmod(0o755)
    env = dict(os.environ, PATH=f"{bindir}{os.pathsep}{os.environ['PATH']}", PYTHONPATH=str(ROOT))
    return env


def _alive(pid: int) -> bool:
    return doctor.process_start(pid) is not None and not doctor._zombie(pid)


def _daemon_pids(root: Path) -> list[int]:
    return [int((root / rel).read_text()) for rel in ("munge/munged.pid", "slurmctld.pid", "slurmd.pid")]


HANGING_TEST = textwrap.dedent('''
    import os, time
    from pathlib import Path
    import pytest
    from tests import slurm_local

    @pytest.fixture(scope="module")
    def cluster(tmp_path_factory):  # as tests/workflow/test_slurm.py's fixture
        with slurm_local.local_cluster(tmp_path_factory.mktemp("cluster"), Path(os.environ["FAKE_CONF"])) as c:
            yield c

    def test_until_a_time_limit_stops_it(cluster):
        Path(os.environ["UP_FILE"]).write_text(str(cluster.root))
        time.sleep(600)
''')


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_stopped_test_run_tears_its_cluster_down(tmp_path, fake_slurm, sig):
    """pytest ended by a time limit (SIGTERM) or Ctrl-C mid-test: the daemons stop, the symlink goes."""
    conf = tmp_path / "etc" / "slurm" / "slurm.conf"
    up = tmp_path / "up"
    (tmp_path / "test_hang.py").write_text(HANGING_TEST)
    env = dict(fake_slurm, FAKE_CONF=str(conf), UP_FILE=str(up))
    p = subprocess.Popen([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--basetemp",
                          str(tmp_path / "bt"), str(tmp_path / "test_hang.py")], cwd=ROOT, env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    pids = []
    try:
        assert wait_for(up.exists, timeout=60.0), "the test cluster did not come up"
        root = Path(up.read_text())
        pids = _daemon_pids(root)
        assert all(_alive(q) for q in pids) and conf.is_symlink()
        assert slurm_local.system_conf_state(conf)[0] == "running"  # a second test run skips, naming this one
        p.send_signal(sig)
        out = p.communicate(timeout=90)[0]
        assert p.returncode == 2, out  # pytest: interrupted
        assert not any(_alive(q) for q in pids), out
        assert not conf.is_symlink() and not conf.exists()
        assert slurm_local.system_conf_state(conf) == ("absent", None)
    finally:
        if p.poll() is None:
            p.kill()
        for q in pids:
            if _alive(q):
                os.kill(q, signal.SIGKILL)


KILLED_CREATOR = textwrap.dedent('''
    import os, signal, sys
    from pathlib import Path
    from tests import slurm_local

    with slurm_local.local_cluster(Path(sys.argv[1]), Path(sys.argv[2])) as c:
        print(c.root, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)  # no teardown: as pytest killed by SIGKILL, or a reboot of pytest
''')


def test_doctor_finds_and_removes_a_test_cluster_whose_creator_is_gone(tmp_path, fake_slurm, capsys, monkeypatch):
    conf = tmp_path / "etc" / "slurm" / "slurm.conf"
    r = subprocess.run([sys.executable, "-c", KILLED_CREATOR, str(tmp_path / "c"), str(conf)], cwd=ROOT,
                       env=fake_slurm, capture_output=True, text=True, timeout=60)
    assert r.returncode == -signal.SIGKILL, r.stderr
    root = Path(r.stdout.split()[0])
    pids = _daemon_pids(root)
    try:
        assert all(_alive(q) for q in pids) and conf.is_symlink()  # left behind
        state, c = slurm_local.system_conf_state(conf)
        assert state == "left" and c.root == root and sorted(q for q, _ in c.processes) == sorted(pids)
        from lowbw.cli import main

        monkeypatch.setattr(doctor, "orphaned_workers", lambda: [])  # this test's subject only
        args = ["doctor", "--runs", str(tmp_path), "--prefix", "lbwnone", "--slurm-conf", str(conf)]
        assert main([*args, "--dry-run"]) == 1
        out = capsys.readouterr().out
        assert f"test SLURM cluster in {root}: left by a test run that is gone (pid {c.creator})" in out
        assert all(f"  process {q} of it: " in out for q in pids), out
        assert all(_alive(q) for q in pids) and conf.is_symlink()  # a dry run removes nothing
        assert main(args) == 0
        out = capsys.readouterr().out
        assert f"stopped 1 test SLURM cluster(s) (3 process(es)) and removed their {conf}" in out
        assert not any(_alive(q) for q in pids) and not conf.is_symlink()
        assert root.is_dir()  # its directory (pytest's) is left alone
    finally:
        for q in pids:
            if _alive(q):
                os.kill(q, signal.SIGKILL)


def test_a_site_configuration_is_told_from_a_leftover_of_ours(tmp_path):
    conf = tmp_path / "etc" / "slurm.conf"
    assert slurm_local.system_conf_state(conf) == ("absent", None)
    conf.parent.mkdir()
    conf.write_text("ClusterName=site\nSlurmctldHost=head\n")
    assert slurm_local.system_conf_state(conf) == ("site", None)
    assert doctor.scan(tmp_path, "lbwnone", slurm_conf=conf).slurm == []  # never touched
    conf.unlink()

    site = tmp_path / "site" / "slurm.conf"  # a site's configuration kept elsewhere and linked
    site.parent.mkdir()
    site.write_text("ClusterName=prod  # lowbwtest is not its name\n")
    conf.symlink_to(site)
    assert slurm_local.system_conf_state(conf) == ("site", None)
    conf.unlink()

    ours = tmp_path / "t" / "slurm"
    ours.mkdir(parents=True)
    (ours / "slurm.conf").write_text("ClusterName = lowbwtest\n")  # the cluster name alone marks it ours
    conf.symlink_to(ours / "slurm.conf")
    state, c = slurm_local.system_conf_state(conf)
    assert state == "left" and c.creator is None and c.root == ours
    for pid, start, want in ((os.getpid(), doctor.process_start(os.getpid()), "running"),
                             (os.getpid(), -1, "left"),  # the pid lives on in another process
                             (4194304 + 17, None, "left")):  # above the default pid_max: gone
        (ours / doctor.SLURM_MARKER).write_text(json.dumps({"creator_pid": pid, "creator_start": start}))
        (ours / "slurm.conf").write_text("ClusterName=renamed\n")  # the marker alone marks it ours too
        assert slurm_local.system_conf_state(conf)[0] == want
