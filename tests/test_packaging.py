"""The project installs as declared: pyproject and environment.yml agree, torch is the pinned CPU build,
torchvision stays optional, and `import lowbw` is cheap."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def _name(req: str) -> str:
    return re.split(r"[<>=!~ \[]", req.strip(), maxsplit=1)[0].lower().replace("_", "-")


def _pyproject_reqs() -> dict[str, str]:
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = list(meta["dependencies"]) + list(meta["optional-dependencies"]["dev"])
    return {_name(r): r.replace(" ", "") for r in reqs}


def _conda_reqs() -> dict[str, str]:
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    out: dict[str, str] = {}
    for dep in env["dependencies"]:
        items = dep["pip"] if isinstance(dep, dict) else [dep]
        for d in items:
            if d.startswith("-e") or _name(d) in ("python", "pip"):
                continue
            out[_name(d)] = d.replace(" ", "")
    return out


def test_environment_yml_lists_the_same_dependencies_as_pyproject():
    py, conda = _pyproject_reqs(), _conda_reqs()
    only_py, only_conda = set(py) - set(conda), set(conda) - set(py)
    assert not only_py and not only_conda, f"only in pyproject: {only_py}; only in conda: {only_conda}"
    for name in py:
        assert py[name] == conda[name], f"{name}: pyproject says {py[name]!r}, environment.yml {conda[name]!r}"


def test_torch_is_pinned_exactly_and_torchvision_is_not_required():
    py = _pyproject_reqs()
    assert py["torch"] == "torch==2.13.0"
    assert "torchvision" not in py


def test_import_lowbw_is_cheap_and_lazy():
    code = "import sys, lowbw; print('torch' in sys.modules, lowbw.__version__)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out[0] == "False"  # importing the package does not import torch
    assert out[1] == "0.1.0"


def test_top_level_layout():
    for p in ["README.md", "environment.yml", "lowbw", "notebooks", "runs", "paper", "tests", "Snakefile",
              "pyproject.toml", "config", ".ci/run", "runs/README.md"]:
        assert (ROOT / p).exists(), p



ADVISE = ["advise", "--params", "1e6", "--workers", "2", "--rate", "10mbit", "--step-ms", "5"]


def _cli_loads_torch(argv: list[str], env: dict[str, str] | None = None) -> bool:
    """Whether ``python -m lowbw *argv`` (which must exit 0) imported torch."""
    code = ("import runpy, sys\nsys.argv = ['lowbw', *sys.argv[1:]]\ntry:\n"
            "    runpy.run_module('lowbw', run_name='__main__')\nexcept SystemExit as e:\n    rc = e.code\n"
            "print('torch' in sys.modules, rc, file=sys.stderr)")
    r = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=120, cwd=ROOT,
                       env=env)
    loaded, rc = r.stderr.split()[-2:]
    assert rc == "0", r.stderr
    return loaded == "True"


def test_lowbw_help_imports_no_torch():
    """`lowbw --help` builds every subcommand's parser: none needs torch (seconds to import), so a module they
    import defers it to the function that uses it."""
    assert not _cli_loads_torch(["--help"])


def test_lowbw_advise_imports_no_torch_once_its_payload_sizes_are_cached(tmp_path):
    """`lowbw advise` prices methods from formulas and cached payload sizes; only filling that cache (lowbw.advise
    .cache) compresses tensors with torch."""
    env = {**os.environ, "LOWBW_CACHE_DIR": str(tmp_path)}
    _cli_loads_torch(ADVISE, env)  # fills the cache
    assert not _cli_loads_torch(ADVISE, env)
