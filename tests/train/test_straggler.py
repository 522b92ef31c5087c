"""worker_speeds on synchronous schemes: every step waits for the slowest worker's compute."""

from __future__ import annotations

import pytest

from lowbw.runs.io import read_jsonl
from lowbw.train.config import ConfigError, RunConfig
from lowbw.train.launch import run
from tests.helpers import sim_run

BASE = sim_run(steps=4, log_every=2, train_limit=200, test_limit=50, eval_every=1.0)


def last(out) -> dict:
    return read_jsonl(out / "metrics.jsonl")[-1]


@pytest.mark.parametrize("sync", [dict(sync="sync"), dict(sync="local", world_period=2)])
def test_a_straggler_slows_every_step_by_its_factor(tmp_path, sync):
    run(RunConfig.from_dict({**BASE, **sync}), tmp_path / "even")
    run(RunConfig.from_dict({**BASE, **sync, "worker_speeds": [1.0, 3.0]}), tmp_path / "slow")
    even, slow = last(tmp_path / "even"), last(tmp_path / "slow")
    # clock=model: compute = clock_sample_s x local batch x the slowest factor, every step
    assert even["t_virtual_compute"] == pytest.approx(4 * 16 * 1e-3)
    assert slow["t_virtual_compute"] == pytest.approx(3 * even["t_virtual_compute"])
    assert slow["t_virtual_comm"] == pytest.approx(even["t_virtual_comm"])
    assert slow["loss"] == even["loss"]  # only the clock changes


def test_worker_speeds_must_name_every_worker():
    with pytest.raises(ConfigError, match=r"worker_speeds.*\[1\.0\].*2 positive"):
        RunConfig.from_dict({**BASE, "worker_speeds": [1.0]})


def test_a_bad_trace_is_refused_before_any_work(tmp_path):
    with pytest.raises(ConfigError, match=r"bandwidth_trace: 'nope': No such file"):
        RunConfig.from_dict({**BASE, "bandwidth_trace": "nope"})
    bad = tmp_path / "bad.csv"
    bad.write_text("t_s,worker,mbit\n0,0,fast\n")
    with pytest.raises(ConfigError, match="bandwidth_trace"):
        RunConfig.from_dict({**BASE, "bandwidth_trace": str(bad)})
