"""Checkpoints load as data: a SHA-256 beside every file, checked on resume; torch's weights-only unpickler and
lowbw's own type allow-list; a planted pickle that would run code is refused in one line, running nothing.
And the compressor states that used to be pickled as objects (numpy and torch random streams) still resume to
the metrics of an uninterrupted run."""

from __future__ import annotations

import hashlib
import io
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from lowbw.compress.base import State
from lowbw.runs.io import read_jsonl
from lowbw.train import checkpoint as ckpt
from lowbw.train.launch import RunDirError, run
from tests.train.test_faults import TINY, cli, one_line, yaml_file


class RunsCode:
    """What an attacker's pickle holds: unpickling it calls ``exec`` (writes a marker file)."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return exec, (f"open({str(self.marker)!r}, 'w').write('ran')",)


def interrupted(out: Path, every: int = 2, **kw) -> dict:
    """A run that kept its checkpoint (every ``every`` steps) and lost summary.json, as if killed after it."""
    run({**TINY, "checkpoint_every": every, **kw}, out, quiet=True, keep_checkpoint=True)
    (out / "summary.json").unlink()
    return json.loads((out / "checkpoint" / "latest.json").read_text())


def plant(path: Path, obj, rehash: bool = True) -> None:
    """Replace a checkpoint file with ``obj`` (torch.save's format); ``rehash``: record its true SHA-256 beside
    it, as an attacker who copies a whole run directory would."""
    buf = io.BytesIO()
    torch.save(obj, buf)
    path.write_bytes(buf.getvalue())
    if rehash:
        path.with_name(path.name + ".sha256").write_text(f"{hashlib.sha256(buf.getvalue()).hexdigest()}  {path.name}\n")


def test_every_checkpoint_file_has_its_sha256_beside_it(tmp_path):
    m = interrupted(tmp_path / "r")
    for f in m["files"]:
        p = tmp_path / "r" / "checkpoint" / f
        digest, name = (p.parent / (f + ".sha256")).read_text().split()
        assert name == f and digest == hashlib.sha256(p.read_bytes()).hexdigest()
    # pruning removes an older step's hash with its file: only the latest step's files are left
    assert sorted(x.name for x in (tmp_path / "r" / "checkpoint").iterdir()) == sorted(
        ["latest.json", *m["files"], *(f + ".sha256" for f in m["files"])])


def test_a_planted_pickle_that_runs_code_is_refused_in_one_line_running_nothing(tmp_path, capsys):
    out, marker = tmp_path / "r", tmp_path / "ran-code"
    m = interrupted(out)
    part = out / "checkpoint" / m["files"][0]
    plant(part, {"format": 4, "run": RunsCode(marker)})
    c = yaml_file(tmp_path / "c.yaml", {**TINY, "checkpoint_every": 2})
    rc, err = cli(["train", "-c", str(c), "--out", str(out)], capsys)
    line = one_line(err)
    assert rc == 2 and str(part) in line and "would call exec" in line and "refused" in line, line
    assert not marker.exists()
    with pytest.raises(ckpt.CheckpointError, match=r"would call exec, not checkpoint data"):
        ckpt.load_part(out, m["step"], 0)  # the worker's own load refuses it too
    assert not marker.exists()


def test_a_changed_checkpoint_fails_its_hash_in_one_line(tmp_path, capsys):
    out = tmp_path / "r"
    m = interrupted(out)
    part = out / "checkpoint" / m["files"][0]
    state = torch.load(part, weights_only=True)
    state["run"]["step"] += 1
    plant(part, state, rehash=False)
    c = yaml_file(tmp_path / "c.yaml", {**TINY, "checkpoint_every": 2})
    rc, err = cli(["train", "-c", str(c), "--out", str(out)], capsys)
    line = one_line(err)
    assert rc == 2 and str(part) in line and "does not match the SHA-256 in" in line, line
    (part.parent / (part.name + ".sha256")).unlink()
    with pytest.raises(RunDirError, match=r"has no SHA-256 recorded beside it"):
        run({**TINY, "checkpoint_every": 2}, out, quiet=True)


def test_data_of_a_type_lowbw_never_saves_is_refused(tmp_path):
    """torch's weights-only unpickler admits torch.Size; lowbw's allow-list does not."""
    out = tmp_path / "r"
    m = interrupted(out)
    plant(out / "checkpoint" / m["files"][0], {"format": 4, "shape": torch.Size([2, 3])})
    with pytest.raises(ckpt.CheckpointError, match=r"holds a torch.Size, not checkpoint data"):
        ckpt.verify(out)
    with pytest.raises(ckpt.CheckpointError, match=r"would hold a .*RunsCode, not checkpoint data.*not written"):
        ckpt.save_part(out, 99, 0, {"x": RunsCode(tmp_path / "m")})
    assert not (out / "checkpoint" / ckpt.part_name(99, 0)).exists()


def test_compressor_state_is_plain_data_and_round_trips(tmp_path):
    st = State(seed=3)
    st["w"]["ef.residual"] = torch.arange(4.0)
    st.shared["powersgd.rng.0"] = np.random.RandomState(0)
    st.shared["powersgd.rng.0"].randn(5)  # a cached Gaussian and a moved position
    torch.rand(3, generator=st.generator(torch.device("cpu")))
    ckpt.save_part(tmp_path, 1, 0, {"state": st.state_dict()})  # refuses anything but plain data
    (tmp_path / "checkpoint" / "latest.json").write_text(json.dumps({"files": [ckpt.part_name(1, 0)]}))
    ckpt.verify(tmp_path)
    back = State()
    back.load_state_dict(ckpt.load_part(tmp_path, 1, 0)["state"])
    assert back.seed == 3 and torch.equal(back["w"]["ef.residual"], st["w"]["ef.residual"])
    assert np.array_equal(back.shared["powersgd.rng.0"].randn(7), st.shared["powersgd.rng.0"].randn(7))
    g0, g1 = st.generator(torch.device("cpu")), back.generator(torch.device("cpu"))
    assert torch.equal(torch.rand(5, generator=g0), torch.rand(5, generator=g1))


@pytest.mark.parametrize("kw", [dict(compressor="powersgd", compressor_args={"rank": 1}),
                                dict(compressor="qsgd", compressor_args={"levels": 4})])
def test_random_compressor_streams_resume_to_the_uninterrupted_metrics(tmp_path, kw):
    """PowerSGD's numpy stream and QSGD's torch generators, saved as plain data, continue exactly."""
    full = run({**TINY, **kw}, tmp_path / "full", quiet=True)
    assert interrupted(tmp_path / "k", every=4, **kw)["step"] == 4  # steps 5 and 6 are run again
    resumed = run({**TINY, "checkpoint_every": 4, **kw}, tmp_path / "k", quiet=True)
    strip = [{k: v for k, v in ln.items() if not k.startswith("t_")}
             for ln in read_jsonl(tmp_path / "full" / "metrics.jsonl")]
    assert [{k: v for k, v in ln.items() if not k.startswith("t_")}
            for ln in read_jsonl(tmp_path / "k" / "metrics.jsonl")] == strip
    assert resumed["final_test_acc"] == full["final_test_acc"]
    assert json.loads((tmp_path / "k" / "config.json").read_text())["resumes"] == 1
