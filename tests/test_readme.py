"""The README's commands, parsed from README.md and run as written, so that they cannot drift.

Every command of a ``bash`` block (and every ``$ `` line of a plain block) is classified below: run as written
(quick ones in the default run, slower ones marked slow), run with a length cap appended (a training of
minutes: the command as written plus ``--set steps=N``, which checks every key and flag it gives), or not run
here with the reason. A command the README gains or changes that is in none of these lists fails
:func:`test_every_readme_command_is_classified`. ``sudo`` is dropped (the testbed needs root: those are skipped
with that reason where the test does not run as root), and ``python`` is this interpreter (the README assumes
the project's virtual environment). Each runs in a fresh directory holding links to the checkout's
``examples``, ``paper``, ``config`` and ``lowbw``, so relative paths work as from the checkout and ``runs/``
is the test's own.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"


def readme_commands(text: str | None = None) -> list[str]:
    """The commands of README.md: lines of ``bash`` blocks (continuations joined, comments dropped) and the
    ``$ `` lines of other blocks, with ``sudo`` and ``$ `` removed."""
    text = README.read_text() if text is None else text
    out, block, lang = [], None, ""
    for line in text.splitlines():
        if line.startswith("```"):
            if block is None:
                block, lang = [], line[3:].strip()
            else:
                joined = "\n".join(block).replace("\\\n", " ")
                for cmd in joined.splitlines():
                    if lang != "bash":
                        if not cmd.startswith("$ "):
                            continue
                        cmd = cmd[2:]
                    cmd = re.sub(r"(^|\s)#.*$", "", cmd).strip()
                    if cmd:
                        out.append(re.sub(r"\s+", " ", cmd.removeprefix("sudo ")))
                block = None
            continue
        if block is not None:
            block.append(line)
    return out


# substring of a command -> (timeout s, slow, needs root)
RUN = {
    "python -m lowbw store list": (120, False, False),
    "python -m lowbw advise --model resnet20 --workers 8 --rate 10mbit --top 10": (300, False, False),
    "python -m lowbw testbed --workers 4 --rate 100mbit -- python examples/my_ddp_script.py": (600, True, True),
    "--launcher torchrun --worker-dir 'w{rank}' -- examples/train.py": (600, True, True),
    "python -m lowbw.bench.collectives --workers 2 --rates 100mbit --sizes 1": (900, True, True),
}
# the "Your own model, data and runs" block: run in order in one directory (compare reads the runs before it)
OWN = ("examples/run.yaml", "python -m lowbw compare 'runs/mine/*'")
# trainings of minutes: run as written with a length cap appended
CAPPED = {
    "--set dataset=shakespeare --set model=gpt-small": "--set steps=4",
    "--out runs/my_diloco": "--set epochs=0.02",
    "--out runs/my_muloco": "--set epochs=0.02",
    "--out runs/my_desloc": "--set epochs=0.02",
    "--out runs/my_sparta": "--set epochs=0.02",
    "--out runs/my_async": "--set epochs=0.02",
    "--out runs/my_halos": "--set epochs=0.02",
}
NOT_RUN = {
    "make": "the whole workflow and test suite: tests/workflow/test_workflow.py runs the tiny profile",
    "python3 -m venv": "set-up of a SLURM login node",
    "$EDITOR": "editing the SLURM profile",
    "snakemake": "a SLURM or GPU site's workflow: tests/workflow/test_slurm.py runs the SLURM profile",
    "sbatch": "needs a SLURM cluster: tests/workflow/test_slurm.py submits this example to its one-node cluster",
    "--validate": "trains four methods on the testbed for minutes: tests/advise/test_validate.py",
}


def _kind(cmd: str) -> str:
    if any(k in cmd for k in OWN):
        return "own"
    if any(k in cmd for k in RUN):
        return "run"
    if any(k in cmd for k in CAPPED):
        return "capped"
    if any(cmd.startswith(k) or k in cmd for k in NOT_RUN):
        return "not run"
    return "unclassified"


def test_every_readme_command_is_classified():
    cmds = readme_commands()
    assert len(cmds) > 15
    assert [c for c in cmds if _kind(c) == "unclassified"] == []
    # every entry of the tables still names a README command (a renamed command is noticed)
    for k in [*RUN, *CAPPED, *OWN]:
        assert any(k in c for c in cmds), k


def test_parser_joins_continuations_and_drops_comments():
    text = "x\n```bash\n# c\nsudo python -m lowbw a \\\n    --b 1   # note\nmake\n```\n```\n$ python -m x\nout\n```\n"
    assert readme_commands(text) == ["python -m lowbw a --b 1", "make", "python -m x"]


def _workdir(tmp_path: Path) -> Path:
    d = tmp_path / "cwd"
    d.mkdir()
    for name in ("examples", "paper", "config", "lowbw"):
        (d / name).symlink_to(ROOT / name)
    return d


def _run(cmd: str, cwd: Path, timeout: float) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
           "PATH": str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", "")}
    argv = shlex.split(cmd)
    argv = [sys.executable if a == "python" else a for a in argv]
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def _needs_root():
    from lowbw.net.testbed import netns_missing

    if netns_missing():
        pytest.skip("needs root, ip netns and tc (the testbed): " + "; ".join(netns_missing()))


def _params(kind: str):
    out = []
    for c in readme_commands():
        if _kind(c) != kind:
            continue
        key = next(k for k in (RUN if kind == "run" else CAPPED) if k in c)
        slow = RUN[key][1] if kind == "run" else True
        out.append(pytest.param(c, key, id=c[:70], marks=[pytest.mark.slow] if slow else []))
    return out


@pytest.mark.parametrize("cmd, key", _params("run"))
def test_readme_command_runs_as_written(cmd, key, tmp_path):
    timeout, _, root = RUN[key]
    if root:
        _needs_root()
    r = _run(cmd, _workdir(tmp_path), timeout)
    assert r.returncode == 0, f"{cmd}\n{r.stderr[-3000:]}"
    if "store list" in cmd:
        assert "val_loss" in r.stdout and "paper/measured/anchor" in r.stdout, r.stdout
    if "advise" in cmd:
        assert "times assume dense needs" in r.stdout and "(dense's mean in the runs of " in r.stdout, r.stdout
    if "my_ddp_script" in cmd:
        assert "4 workers, 50 steps" in r.stdout, r.stdout
    if "examples/train.py" in cmd:
        assert (tmp_path / "cwd" / "w0" / "ckpt-0.pt").is_file() and (tmp_path / "cwd" / "w1" / "ckpt-0.pt").is_file()


@pytest.mark.parametrize("cmd, key", _params("capped"))
def test_readme_training_runs_with_a_length_cap(cmd, key, tmp_path):
    r = _run(f"{cmd} {CAPPED[key]} --set progress=false", _workdir(tmp_path), 900)
    assert r.returncode == 0, f"{cmd}\n{r.stderr[-3000:]}"
    assert '"complete": true' in r.stdout


@pytest.mark.slow
def test_readme_own_model_block_runs_in_order(tmp_path):
    """The user's model and data on sim, procs and the testbed with top-k and DiLoCo, then compare."""
    cmds = [c for c in readme_commands() if _kind(c) == "own"]
    assert len(cmds) == 5 and cmds[-1].startswith("python -m lowbw compare")
    cwd = _workdir(tmp_path)
    for c in cmds:
        if "lowbw testbed" in c:
            _needs_root()
        r = _run(c, cwd, 900)
        assert r.returncode == 0, f"{c}\n{r.stderr[-3000:]}"
        if c.startswith("python -m lowbw train"):
            assert '"metric": "val_acc"' in r.stdout and '"final_val_acc"' in r.stdout, r.stdout
        elif "lowbw testbed" in c:  # rank 0 of the torchrun workers completes the run
            assert (cwd / "runs" / "mine" / "topk_testbed" / "summary.json").is_file(), r.stderr[-3000:]
    assert "val_acc>=0.9 reached" in r.stdout and "diloco H=8 M=2" in r.stdout, r.stdout
    assert (cwd / "runs" / "mine" / "compare.png").is_file() and (cwd / "runs" / "mine" / "compare.csv").is_file()
