"""The workflow names a misread rate or delay in its config in one line (lowbw.net.units.check_config_tree, called
by the Snakefile before the schema), not with jsonschema's long message: ``snakemake -n`` on config/tiny.yaml
with one bad value."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]


def test_snakemake_names_a_misread_rate_in_one_line(tmp_path):
    cfg = yaml.safe_load((ROOT / "config" / "tiny.yaml").read_text())
    cfg["bench"]["collectives"]["rates_mbit"] = ["100mbps"]  # tc would read megabytes per second
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(cfg))
    p = subprocess.run([sys.executable, "-m", "snakemake", "-n", "--configfile", str(bad)], cwd=ROOT,
                       capture_output=True, text=True, timeout=300)
    out = p.stdout + p.stderr
    assert p.returncode != 0, out
    line = next((x for x in out.splitlines() if x.startswith("bench.collectives.rates_mbit: ")), None)
    assert line is not None and "'100mbps' is ambiguous" in line and "rates_mbit: 100 for 100 Mbit/s" in line, out
    assert "Failed validating" not in out and "jsonschema" not in out.lower(), out  # the schema never ran


@pytest.mark.parametrize("name", sorted(p.name for p in (Path(__file__).resolve().parents[2] / "config").glob("*.yaml")
                                        if p.name != "schema.yaml"))
def test_every_profile_config_passes_the_workflow_schema(name):
    """Snakemake validates the config file against config/schema.yaml before planning: a profile whose config
    fails it (a profile name the schema does not list) cannot run at all."""
    jsonschema = pytest.importorskip("jsonschema")
    root = Path(__file__).resolve().parents[2] / "config"
    jsonschema.validate(yaml.safe_load((root / name).read_text()), yaml.safe_load((root / "schema.yaml").read_text()))
