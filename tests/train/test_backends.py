"""The same config on sim and on real processes (procs, torchrun, DDP hook) gives the same numbers."""

from __future__ import annotations

import pytest

from lowbw.runs.io import read_jsonl
from lowbw.train.config import RunConfig
from lowbw.train.launch import run
from tests.helpers import sim_run
from tests.sim_procs import assert_same_metrics

BASE = sim_run(model="cnn", steps=5, clock_compress_mbyte_s=200.0)


def metrics(tmp_path, name, keep_checkpoint=False, **kw):
    run(RunConfig.from_dict({**BASE, **kw}), tmp_path / name, quiet=True, keep_checkpoint=keep_checkpoint)
    return read_jsonl(tmp_path / name / "metrics.jsonl")


@pytest.mark.parametrize("comp", [
    dict(compressor="topk", compressor_args={"ratio": 0.05}, error_feedback="on"),
    dict(compressor="blockwise", compressor_args={"bits": 8}, error_feedback="on", collective="tree"),
])
def test_sim_and_procs_agree_with_compression_and_error_feedback(tmp_path, comp):
    sim = metrics(tmp_path, "sim", backend="sim", **comp)
    procs = metrics(tmp_path, "procs", backend="procs", **comp)
    assert len(sim) == 7
    assert_same_metrics(sim, procs)


@pytest.mark.slow
def test_hierarchical_on_procs_matches_sim(tmp_path):
    kw = dict(workers=4, batch_size=32, sync="hierarchical", households=2, world_period=2, compressor="qsgd",
              compressor_args={"levels": 8}, steps=4)
    sim = metrics(tmp_path, "sim", backend="sim", **kw)
    procs = metrics(tmp_path, "procs", backend="procs", **kw)
    ls = [x["loss"] for x in sim if x["loss"] is not None]
    assert len(ls) == 4 and [x["loss"] for x in procs if x["loss"] is not None] == pytest.approx(ls, abs=1e-5)
    assert [x["bytes_sent"] for x in procs] == [x["bytes_sent"] for x in sim]


@pytest.mark.slow
def test_torchrun_and_ddp_hook(tmp_path):
    sim = metrics(tmp_path, "sim", backend="sim", granularity="flat")
    tr = metrics(tmp_path, "torchrun", backend="torchrun", granularity="flat")
    ddp = metrics(tmp_path, "ddp", backend="procs", ddp_hook=True)
    ls = [x["loss"] for x in sim if x["loss"] is not None]
    assert [x["loss"] for x in tr if x["loss"] is not None] == pytest.approx(ls, abs=1e-5)
    # DDP buckets the gradient itself (reverse order): same math, summation order may differ
    assert [x["loss"] for x in ddp if x["loss"] is not None] == pytest.approx(ls, abs=1e-4)


@pytest.mark.netns
@pytest.mark.slow
def test_procs_inside_the_tc_testbed(tmp_path):
    from lowbw.net.testbed import netns_missing

    if netns_missing():
        pytest.skip("needs root, ip netns and tc: " + "; ".join(netns_missing()))
    import json

    kw = dict(steps=3, bandwidth_mbit=50.0, granularity="flat")
    sim = metrics(tmp_path, "sim", backend="sim", **kw)
    tb = metrics(tmp_path, "tb", backend="procs", testbed=True, **kw)
    assert [x["loss"] for x in tb if x["loss"]] == pytest.approx([x["loss"] for x in sim if x["loss"]], abs=1e-5)
    assert json.loads((tmp_path / "tb" / "config.json").read_text())["emulation"] == "netns-tc"
    assert tb[-1]["t_comm"] > 0.5 * tb[-1]["t_virtual_comm"]  # the shaped link really costs time


@pytest.mark.slow
def test_procs_resume_from_checkpoint(tmp_path):
    """Rank files + marker: a rerun of an unfinished procs run resumes at the checkpoint with the same numbers."""
    import json

    kw = dict(backend="procs", steps=6, checkpoint_every=2, compressor="topk", compressor_args={"ratio": 0.1},
              error_feedback="on")
    full = metrics(tmp_path, "r", keep_checkpoint=True, **kw)
    d = tmp_path / "r"
    marker = json.loads((d / "checkpoint" / "latest.json").read_text())
    assert marker["step"] == 4 and len(marker["files"]) == 2
    (d / "summary.json").unlink()  # as if killed after step 6's line but before the summary
    again = metrics(tmp_path, "r", **kw)

    def strip(lines):
        return [{k: v for k, v in x.items() if not k.startswith("t_")} for x in lines]

    assert strip(again) == strip(full)
    assert json.loads((d / "config.json").read_text())["resumes"] == 1
