"""The SLURM profile on a real single-node SLURM cluster (tests/slurm_local.py: Debian's slurm-wlm + munge,
started and stopped here): the tiny workflow through config/profiles/slurm, changed only where a one-node
cluster without accounting must be, with Snakemake's SLURM executor plugin. Every job goes through sbatch
with the resources its rule declares, the PDF is built, every job ends COMPLETED, a rerun has nothing to do.
And the multi-node sbatch example (examples/slurm/train_multinode.sbatch) on the same cluster."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
import yaml

from tests import slurm_local
from tests.conftest import real_mirror
from tests.launch.test_multinode import RUN, assert_same_numbers, metrics, train

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
SITE_PROFILE = ROOT / "config" / "profiles" / "slurm" / "config.yaml"
EXAMPLE = ROOT / "examples" / "slurm" / "train_multinode.sbatch"

#: where the one-node test profile differs from the site profile, and why (nothing else may differ)
ONE_NODE = {
    "configfile": "config/tiny.yaml",  # the tiny grid (seconds per job, no GPUs) instead of the full one
    "slurm-no-account": True,  # no accounts without slurmdbd (the plugin would ask sacctmgr)
    "slurm-status-command": "squeue",  # sacct needs slurmdbd; the controller keeps jobs for MinJobAge
    "slurm-init-seconds-before-status-checks": 2,  # jobs of seconds: first status check after 2 s, not 40
}

@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    if real_mirror() is None:
        pytest.skip("needs the MNIST mirror (set LOWBW_DATA_MIRROR)")
    if shutil.which("latexmk") is None:
        pytest.skip("needs LaTeX (latexmk) for the paper job")
    reason = slurm_local.install()
    if reason:
        pytest.skip(reason)
    state, other = slurm_local.system_conf_state()
    if state == "left":  # a test run killed before its teardown: ours to remove (as lowbw doctor does)
        print(slurm_local.remove_leftover(other))
    elif state == "running":
        pytest.skip(f"another test SLURM cluster is running (pid {other.creator}, {other.root})")
    elif state == "site":
        pytest.skip(f"{slurm_local.SYSTEM_CONF} is this machine's own SLURM configuration (no lowbw test cluster "
                    "marker, cluster name not lowbwtest): left alone")
    with slurm_local.local_cluster(tmp_path_factory.mktemp("cluster")) as c:
        yield c


def one_node_profile(dst: Path, partition: str) -> Path:
    """config/profiles/slurm with ONE_NODE applied and the partition replaced; written to ``dst``."""
    prof = yaml.safe_load(SITE_PROFILE.read_text())
    prof.update(ONE_NODE)
    prof["default-resources"] = dict(prof["default-resources"], slurm_partition=partition)
    dst.mkdir(parents=True)
    (dst / "config.yaml").write_text(yaml.safe_dump(prof, sort_keys=False))
    return dst


def _copy_project(tmp: Path) -> Path:
    proj = tmp / "proj"
    proj.mkdir()
    for name in ("Snakefile", "environment.yml"):
        shutil.copy(ROOT / name, proj / name)
    for name in ("config", "notebooks", "paper"):
        skip = shutil.ignore_patterns("build", "generated", ".ipynb_checkpoints")
        shutil.copytree(ROOT / name, proj / name, ignore=skip)
    (proj / "paper" / "generated").mkdir()
    return proj


def _snakemake(proj: Path, env: dict[str, str], *args: str, timeout: int) -> subprocess.CompletedProcess:
    env = dict(env, PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}", LOWBW_DATA_MIRROR=real_mirror())
    return subprocess.run([str(BIN / "snakemake"), *args], cwd=proj, env=env, capture_output=True, text=True,
                          timeout=timeout)


def planned(dry_run: str) -> tuple[Counter, dict[str, tuple[int, int, int]]]:
    """From ``snakemake -n``: jobs per rule (without the target rule ``all``) and each rule's declared
    (threads, mem_mb, runtime in minutes)."""
    counts = Counter()
    stats = dry_run[dry_run.index("Job stats:"):]
    for m in re.finditer(r"^(\w+)\s+(\d+)$", stats, re.M):
        if m.group(1) not in ("all", "total"):
            counts[m.group(1)] = int(m.group(2))
    declared = {}
    for block in re.split(r"^rule ", dry_run, flags=re.M)[1:]:
        name = block.split(":", 1)[0]
        res = re.search(r"^\s+resources: (.*)$", block, re.M)
        if name == "all" or res is None:
            continue
        threads = re.search(r"^\s+threads: (\d+)$", block, re.M)
        fields = dict(kv.split("=", 1) for kv in res.group(1).split(", ") if "=" in kv)
        declared[name] = (int(threads.group(1)) if threads else 1, int(fields["mem_mb"]), int(fields["runtime"]))
    return counts, declared


def _minutes(limit: str) -> int:
    """SLURM's TimeLimit ``[D-]HH:MM:SS`` in minutes."""
    days, _, hms = limit.rpartition("-")
    h, m, s = (int(x) for x in hms.split(":"))
    return int(days or 0) * 1440 + h * 60 + m + (s > 0)


def test_one_node_profile_differs_only_where_it_must(tmp_path):
    site = yaml.safe_load(SITE_PROFILE.read_text())
    test = yaml.safe_load((one_node_profile(tmp_path / "p", "debug") / "config.yaml").read_text())
    changed = {k for k in set(site) | set(test) if site.get(k) != test.get(k)}
    assert changed == set(ONE_NODE) | {"default-resources"}
    assert {k: v for k, v in test["default-resources"].items() if site["default-resources"].get(k) != v} == {
        "slurm_partition": "debug"}
    assert site["executor"] == "slurm" and "slurm_partition" in site["default-resources"]


@pytest.mark.slurm
@pytest.mark.slow
def test_tiny_workflow_on_a_one_node_slurm_cluster(cluster, tmp_path):
    t0 = time.monotonic()
    proj = _copy_project(tmp_path)
    prof = one_node_profile(tmp_path / "profile", cluster.partition)
    # --cores: a dry run caps every rule's threads at it (1 by default); the submitted jobs are not capped
    plan = _snakemake(proj, cluster.env, "-n", "--profile", str(prof), "--cores", "1024", timeout=300)
    assert plan.returncode == 0, plan.stdout[-3000:] + plan.stderr[-3000:]
    counts, declared = planned(plan.stdout + plan.stderr)
    assert counts["train"] > 0 and counts["report"] == counts["paper"] == 1, counts

    before = {j.job_id for j in slurm_local.job_records(cluster)}
    r = _snakemake(proj, cluster.env, "--profile", str(prof), timeout=2400)  # 20 min seen at load 10
    logs = "\n".join(p.read_text(errors="replace")[-2000:] for p in (proj / ".snakemake").rglob("*.log"))
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:] + logs
    pdf = proj / "paper" / "build" / "paper.pdf"
    assert pdf.is_file() and pdf.stat().st_size > 10_000
    assert len(list((proj / "runs").glob("e*/**/summary.json"))) == counts["train"]

    # every job went through sbatch into the partition and finished COMPLETED with exit code 0
    records = [j for j in slurm_local.job_records(cluster) if j.job_id not in before]
    assert len(records) == sum(counts.values()), (records, counts)
    assert {(j.state, j.exit_code, j.partition) for j in records} == {("COMPLETED", "0:0", cluster.partition)}
    assert "gpu" not in " ".join(j.tres for j in records)
    # ... one SLURM job per planned job, each with the threads, memory and time its rule declares
    jobs = [j for j in slurm_local.show_jobs(cluster) if int(j["JobId"]) not in before]
    rules = Counter()
    for j in jobs:
        rule = re.fullmatch(r"rule_(.+?)(?:_wildcards_.*)?", j["Comment"]).group(1)
        rules[rule] += 1
        threads, mem_mb, runtime = declared[rule]
        assert (int(j["NumCPUs"]), j["MinMemoryNode"], _minutes(j["TimeLimit"])) == (
            threads, f"{mem_mb}M", runtime), (rule, j)
        assert j["JobState"] == "COMPLETED"
    assert rules == counts

    again = _snakemake(proj, cluster.env, "-n", "--profile", str(prof), timeout=300)
    assert again.returncode == 0 and "Nothing to be done" in again.stdout + again.stderr
    print(f"\nSLURM tiny workflow: {len(records)} jobs, {time.monotonic() - t0:.0f} s")


@pytest.mark.slurm
@pytest.mark.slow
def test_multinode_sbatch_example_on_the_cluster(cluster, tmp_path):
    """The example as a user submits it (one node here, two workers on it): the same numbers as sim."""
    sim = train(tmp_path, "sim", backend="sim")
    cfg = tmp_path / "run.json"
    cfg.write_text(json.dumps({**RUN, "backend": "torchrun"}))
    out = tmp_path / "run"
    env = dict(cluster.env, PATH=f"{BIN}{os.pathsep}{cluster.env.get('PATH', '')}",
               PYTHONPATH=str(ROOT) + os.pathsep + cluster.env.get("PYTHONPATH", ""),
               LOWBW_PROCS_PER_NODE="2", LOWBW_RDZV_PORT=str(slurm_local.free_port()))
    log = tmp_path / "job.log"
    r = subprocess.run(["sbatch", "--parsable", "--nodes", "1", "--cpus-per-task", "2", "--time", "10",
                        "--output", str(log), str(EXAMPLE), str(cfg), str(out)],
                       env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    job = int(r.stdout.strip().split(";")[0])
    end = time.monotonic() + 600
    while time.monotonic() < end and job not in {j.job_id for j in slurm_local.job_records(cluster)}:
        time.sleep(1)
    text = log.read_text(errors="replace") if log.exists() else ""
    recs = [j for j in slurm_local.job_records(cluster) if j.job_id == job]
    assert recs, f"job {job} did not finish within 600 s\n{text[-3000:]}"
    (rec,) = recs
    assert (rec.state, rec.exit_code) == ("COMPLETED", "0:0"), text[-4000:]
    (launch,) = [x for x in text.splitlines() if "lowbw.launch.torchrun" in x]
    for part in ("--nnodes 1", "--node-rank 0", "--nproc-per-node 2", "--rdzv-backend c10d", "is_host=1"):
        assert part in launch
    assert_same_numbers(sim, metrics(out))
