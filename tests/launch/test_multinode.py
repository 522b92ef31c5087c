"""Multi-node torchrun (lowbw.launch.cluster): one ``torchrun --nnodes N --node-rank R --rdzv-backend c10d`` per node.
The testbed's network namespaces stand in for the nodes (rendezvous and training over the shaped links), and
the run gives the same losses as ``procs`` and ``sim`` for the same config."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from lowbw.launch.cluster import DEFAULT_PORT, NodeSpec, main, node_spec, torchrun_argv

ROOT = Path(__file__).resolve().parents[2]
RUN = dict(dataset="synthetic", model="cnn", workers=2, batch_size=32, steps=5, log_every=1, progress=False,
           train_limit=400, test_limit=100, eval_every=0.5, clock="model", clock_sample_s=1e-3,
           clock_compress_mbyte_s=200.0, granularity="flat", bandwidth_mbit=50.0, compressor="topk",
           compressor_args={"ratio": 0.05}, error_feedback="on")
COMPARED = ("loss", "acc", "val_loss", "test_loss", "test_acc")


def _env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))


def train(tmp: Path, name: str, **kw) -> list[dict]:
    """``python -m lowbw train`` of RUN (with ``kw``) into tmp/name; its metrics.jsonl rows."""
    cfg = tmp / f"{name}.json"
    cfg.write_text(json.dumps({**RUN, **kw}))
    r = subprocess.run([sys.executable, "-m", "lowbw", "train", "--config", str(cfg), "--out", str(tmp / name)],
                       env=_env(), capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    return metrics(tmp / name)


def metrics(out: Path) -> list[dict]:
    return [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines() if x.strip()]


def assert_same_numbers(a: list[dict], b: list[dict]) -> None:
    assert len(a) == len(b) == RUN["steps"] + 2  # step 0, every step, the final evaluation
    for x, y in zip(a, b):
        assert (x["step"], x["samples"], x["bytes_sent"]) == (y["step"], y["samples"], y["bytes_sent"])
        for k in COMPARED:
            if x.get(k) is not None:
                assert y[k] == pytest.approx(x[k], abs=1e-5), (x["step"], k)


# ------------------------------------------------------------------------------------- the node's place
def test_testbed_environment_gives_the_c10d_command():
    env = {"RANK": "1", "WORLD_SIZE": "3", "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29555", "LOWBW_TESTBED": "t"}
    spec = node_spec(env)
    assert spec == NodeSpec(3, 1, "10.0.0.1", 29555, "t", None)
    argv = torchrun_argv(spec, ["python", "-m", "lowbw.train.worker", "--out", "d"], nproc_per_node=2)
    s = " ".join(argv)
    assert argv[1:3] == ["-m", "lowbw.launch.torchrun"] and argv[-4:] == ["-m", "lowbw.train.worker", "--out", "d"]
    for part in ("--nnodes 3", "--node-rank 1", "--nproc-per-node 2", "--rdzv-backend c10d",
                 "--rdzv-endpoint 10.0.0.1:29555", "--rdzv-conf is_host=0"):
        assert part in s
    assert "is_host=1" in " ".join(torchrun_argv(node_spec({**env, "RANK": "0"}), ["train.py"]))


def test_slurm_environment_gives_the_c10d_command(tmp_path, monkeypatch):
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "scontrol").write_text("#!/bin/sh\n[ \"$1 $2 $3\" = 'show hostnames gpu[07-08]' ] && "
                                   "printf 'gpu07\\ngpu08\\n'\n")
    (fake / "scontrol").chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake}{os.pathsep}{os.environ['PATH']}")
    env = {"SLURM_NNODES": "2", "SLURM_NODEID": "1", "SLURM_JOB_NODELIST": "gpu[07-08]", "SLURM_JOB_ID": "42",
           "RANK": "5", "WORLD_SIZE": "9", "MASTER_ADDR": "x"}  # SLURM wins over a stray torchrun environment
    assert node_spec(env) == NodeSpec(2, 1, "gpu07", DEFAULT_PORT, "42", None)
    assert node_spec(env, port=1234).rdzv_port == 1234


@pytest.mark.parametrize("env, cmd, message", [
    ({}, ["train.py"], "no node environment"),
    ({"RANK": "2", "WORLD_SIZE": "2", "MASTER_ADDR": "a"}, ["train.py"], "node rank 2 is not in [0, 2)"),
    ({"RANK": "x", "WORLD_SIZE": "2", "MASTER_ADDR": "a"}, ["train.py"], "RANK='x' is not an integer"),
    ({"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "a"}, ["python"], "no script or -m module"),
    ({"SLURM_NNODES": "2", "SLURM_NODEID": "0"}, ["train.py"], "SLURM_JOB_NODELIST is not"),
])
def test_bad_input_is_one_line_naming_the_value(env, cmd, message, monkeypatch, capsys):
    for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "SLURM_NODEID", "SLURM_NNODES", "GLOO_SOCKET_IFNAME"):
        monkeypatch.delenv(k, raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    assert main(["--dry-run", "--", *cmd]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


# ------------------------------------------------------------------------------ nodes = testbed namespaces
@pytest.mark.netns
@pytest.mark.slow
def test_multinode_torchrun_over_the_testbed_matches_procs_and_sim(tmp_path):
    from lowbw.net.testbed import netns_missing

    if netns_missing():
        pytest.skip("needs root, ip netns and tc: " + "; ".join(netns_missing()))
    sim = train(tmp_path, "sim", backend="sim")
    procs = train(tmp_path, "procs", backend="procs")
    cfg = tmp_path / "torchrun.json"
    cfg.write_text(json.dumps({**RUN, "backend": "torchrun"}))
    out = tmp_path / "multinode"
    out.mkdir()
    r = subprocess.run([sys.executable, "-m", "lowbw", "testbed", "--workers", "2", "--rate", "50mbit",
                        "--timeout", "400", "--", sys.executable, "-m", "lowbw.launch.cluster",
                        "--", "-m", "lowbw.train.worker", "--config", str(cfg), "--out", str(out)],
                       env=_env(), capture_output=True, text=True, timeout=500)
    assert r.returncode == 0, r.stderr[-4000:]
    # two torchrun nodes, each in its namespace, rendezvousing at namespace 0 over the shaped links
    launched = [x for x in r.stderr.splitlines() if "lowbw.launch.torchrun" in x and "--rdzv-backend c10d" in x]
    assert sorted(x.split("--node-rank ")[1].split()[0] for x in launched) == ["0", "1"], launched
    assert all("--nnodes 2" in x and "--local-addr" in x for x in launched)
    assert "carried almost no traffic" not in r.stderr
    assert (out / "summary.json").is_file()
    multinode = metrics(out)
    assert_same_numbers(sim, procs)
    assert_same_numbers(procs, multinode)
