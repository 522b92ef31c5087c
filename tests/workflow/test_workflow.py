"""The whole workflow end to end on the `tiny` config: Snakemake -> papermill notebooks -> runs/ ->
paper/generated -> paper.pdf, in a temporary copy of the project. Plus the workflow's invariants:
a bad config fails before any job naming the key, and a rerun with nothing changed does nothing."""

from __future__ import annotations

import itertools
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from lowbw.net.units import rate_mbit_arg
from lowbw.workflow.grid import run_dirs
from tests.conftest import real_mirror

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def _project_copy(tmp: Path) -> Path:
    dst = tmp / "proj"
    dst.mkdir()
    for f in ("Snakefile", "environment.yml"):
        shutil.copy(ROOT / f, dst)
    for d in ("config", "notebooks", "paper"):
        shutil.copytree(ROOT / d, dst / d, ignore=shutil.ignore_patterns("build", "generated", ".ipynb_checkpoints"))
    (dst / "paper" / "generated").mkdir()
    return dst


def _snakemake(proj: Path, *args: str, timeout: int = 900) -> subprocess.CompletedProcess:
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    mirror = real_mirror()
    if mirror:
        env["LOWBW_DATA_MIRROR"] = mirror
    return subprocess.run([str(BIN / "snakemake"), "--cores", "2", *args], cwd=proj, env=env,
                          capture_output=True, text=True, timeout=timeout)


def test_bad_config_fails_before_any_job_naming_the_key(tmp_path):
    proj = _project_copy(tmp_path)
    cfg = yaml.safe_load((proj / "config" / "tiny.yaml").read_text())
    cfg["train_defaults"]["learning_rate"] = 0.1  # not a RunConfig key
    (proj / "config" / "bad.yaml").write_text(yaml.safe_dump(cfg))
    r = _snakemake(proj, "-n", "--configfile", "config/bad.yaml", timeout=300)
    assert r.returncode != 0
    assert "learning_rate" in (r.stdout + r.stderr)
    cfg = yaml.safe_load((proj / "config" / "tiny.yaml").read_text())
    cfg["seeds"] = ["zero"]
    (proj / "config" / "bad2.yaml").write_text(yaml.safe_dump(cfg))
    r = _snakemake(proj, "-n", "--configfile", "config/bad2.yaml", timeout=300)
    assert r.returncode != 0 and "seeds" in (r.stdout + r.stderr)
    assert not (proj / "runs").exists() or not any((proj / "runs").rglob("summary.json"))


@pytest.mark.slow
@pytest.mark.skipif(real_mirror() is None, reason="needs the MNIST mirror (set LOWBW_DATA_MIRROR)")
def test_tiny_workflow_end_to_end(tmp_path):
    proj = _project_copy(tmp_path)
    has_latex = shutil.which("latexmk") is not None
    target = [] if has_latex else ["report"]  # the PDF step needs LaTeX (CI installs it)
    r = _snakemake(proj, "--configfile=config/tiny.yaml", *target)  # "=": --configfile takes several files
    logs = "\n".join(p.read_text(errors="replace")[-3000:] for p in proj.rglob("*.log"))
    assert r.returncode == 0, r.stdout[-5000:] + r.stderr[-5000:] + logs
    summaries = list((proj / "runs").glob("e*/**/summary.json"))
    tiny = yaml.safe_load((proj / "config" / "tiny.yaml").read_text())
    # 27: E3-E7, E9 and E10 on the MLP and the language model's E4, E9, E10, one run of it on the 10%-loss network
    assert len(summaries) == len(run_dirs(tiny)) == 27
    assert (proj / "runs" / "e4_compression" / "method~topk1" / "seed~1" / "train.ipynb").is_file()
    gen = proj / "paper" / "generated"
    for e in [*range(1, 11), "4lm", "9lm", "10lm"]:
        assert (gen / f"tab_e{e}.tex").is_file() and (gen / f"fig_e{e}.pdf").is_file()
    numbers = (gen / "numbers.tex").read_text()
    assert r"\newcommand{\EFourTarget}" in numbers
    assert r"\newcommand{\ENineTarget}" in numbers  # E9 ran (dense, local SGD, DiLoCo)
    assert r"\newcommand{\ETenTarget}" in numbers  # E10 ran (dense on an even network and with one slow link)
    assert r"\newcommand{\EOneLatSettings}" in numbers  # E1's latency axis ran (one delayed testbed)
    # the language model through notebooks and report: judged by validation loss (nats/char), not accuracy
    for name in ("EFourLmTarget", "ENineLmTarget", "ETenLmTarget", "EFourLmDenseLoss"):
        assert rf"\newcommand{{\{name}}}" in numbers, name
    if has_latex:
        pdf = proj / "paper" / "build" / "paper.pdf"
        assert pdf.is_file() and pdf.stat().st_size > 10_000
    # nothing changed -> nothing to do
    again = _snakemake(proj, "-n", "--configfile=config/tiny.yaml", *target, timeout=300)
    assert again.returncode == 0
    assert "Nothing to be done" in again.stdout + again.stderr
    # every training run again (clock: model from config/clock_tiny.json): the same numbers, to the digit
    rerun = _snakemake(proj, "--configfile=config/tiny.yaml", "--forcerun", "train", "report")
    assert rerun.returncode == 0, rerun.stdout[-3000:] + rerun.stderr[-3000:]
    assert (gen / "numbers.tex").read_text().split("\n", 1)[1] == numbers.split("\n", 1)[1]


@pytest.mark.slow
def test_default_profile_reads_the_stored_host_measurements(tmp_path):
    """A fresh clone's default profile (no runs/bench/) plans no E1 or E8 measurement whose file is kept in
    paper/measured/host: the report reads the stored file (lowbw.workflow.hoststore). make measure's --config plans
    them."""
    from lowbw.workflow.hoststore import load_index

    stored = set(load_index(ROOT / "paper" / "measured" / "host"))
    proj = _project_copy(tmp_path)
    r = _snakemake(proj, "-n", "report", timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    for name in stored - {"compressors", "models"}:  # the default profile measures those two itself
        assert f"rule bench_{name}:" not in r.stdout, name
    measure = _snakemake(proj, "-n", "-p", "report", "--config",
                         "bench={measure: [collectives, collectives_latency, compressors, models, e2e, e2e_lm]}",
                         timeout=600)
    assert measure.returncode == 0, measure.stdout[-3000:] + measure.stderr[-3000:]
    for name in ("collectives", "collectives_latency", "e2e", "e2e_lm"):
        assert f"rule bench_{name}:" in measure.stdout, name
    # E8's commands take their rates as `bench e2e` reads them (with a unit): both rules, MLP and LM cells
    commands = [shlex.split(line.split(":", 1)[1]) for line in measure.stdout.splitlines()
                if line.startswith("Shell command: python -m lowbw bench e2e ")]
    assert len(commands) == 2, measure.stdout[-3000:]
    read = rate_mbit_arg("--rates")
    for argv in commands:
        i = argv.index("--rates") + 1
        rates = list(itertools.takewhile(lambda t: not t.startswith("--"), argv[i:]))
        assert rates and all(read(r) > 0 for r in rates), argv
