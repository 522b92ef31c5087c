"""The training loop on the sim backend: exact data-parallel math, determinism, checkpoint/resume,
every synchronisation scheme, the dynamic batch size and the outputs of a run directory."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F

from lowbw.runs.io import read_jsonl
from lowbw.train.config import RunConfig
from lowbw.train.launch import run
from lowbw.train.loop import Trainer
from lowbw.train.world import SimWorld
from tests.helpers import config_of, sim_run

BASE = sim_run(drop=("clock", "clock_sample_s"), model="cnn", log_every=2)
cfg = config_of(BASE)


def no_time(lines):
    return [{k: v for k, v in ln.items() if not k.startswith("t_")} for ln in lines]


def test_run_directory_contents(tmp_path):
    s = run(cfg(targets=[0.05, 0.99]), tmp_path / "r")
    d = tmp_path / "r"
    c = json.loads((d / "config.json").read_text())
    assert c["config"]["workers"] == 2 and c["seed"] == 0 and "git_commit" in c["provenance"]
    assert c["derived"]["local_batch_size"] == 16
    lines = read_jsonl(d / "metrics.jsonl")
    need = {"step", "epoch", "samples", "loss", "acc", "bytes_sent", "t_compute", "t_compress", "t_comm", "t_step",
            "t_virtual"}
    assert all(need <= set(ln) for ln in lines)
    assert lines[0]["step"] == 0 and "test_acc" in lines[0] and lines[-1]["step"] == 6
    assert [ln["samples"] for ln in lines if ln["step"]][-1] == 6 * 32
    assert s["complete"] and s["step"] == 6 and s["bytes_sent_total"] > 0
    assert s["time_to_target"]["0.05"]["step"] == 0 and s["time_to_target"]["0.99"] is None
    assert json.loads((d / "summary.json").read_text())["final_test_acc"] == s["final_test_acc"]


def test_sync_is_exact_data_parallel_sgd():
    """M=2 sync dense = one model trained on the union of the two local batches (no BN in the cnn)."""
    c = cfg(augment="none", weight_decay=0.0, momentum=0.9, steps=3, lr_schedule="constant")
    tr = Trainer(c, SimWorld(c))
    probe = Trainer(c, SimWorld(c))  # a twin to draw the same batches
    model = probe.model_template
    torch.manual_seed(0)
    with torch.no_grad():
        for (_name, off, k, shape), p in zip(probe.rep.p_layout, model.parameters()):
            p.copy_(tr.rep.params[0, off: off + k].view(shape))
    opt = torch.optim.SGD(model.parameters(), lr=c.lr, momentum=0.9)
    for _ in range(3):
        batches = [probe.batch(i, 16) for i in range(2)]
        x = torch.cat([b[0] for b in batches])
        y = torch.cat([b[1] for b in batches])
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()
        tr.train_step()
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    assert torch.allclose(tr.rep.params[0], flat, atol=1e-5)
    assert torch.equal(tr.rep.params[0], tr.rep.params[1])


def test_same_seed_identical_metrics_and_model_clock(tmp_path):
    c = cfg(compressor="qsgd", compressor_args={"levels": 16}, clock="model", clock_sample_s=1e-3)
    run(c, tmp_path / "a")
    run(c, tmp_path / "b")
    a = (tmp_path / "a" / "metrics.jsonl").read_text().splitlines()
    b = (tmp_path / "b" / "metrics.jsonl").read_text().splitlines()
    strip = [no_time([json.loads(x)]) for x in a], [no_time([json.loads(x)]) for x in b]
    assert strip[0] == strip[1]
    # with clock=model the virtual clock is deterministic too
    va = [json.loads(x)["t_virtual"] for x in a]
    vb = [json.loads(x)["t_virtual"] for x in b]
    assert va == vb and va[-1] > 0
    # and every non-wall field is byte-identical once the wall-clock fields are dropped
    from lowbw.train.loop import WALL_FIELDS

    drop = WALL_FIELDS

    def canon(lines):
        return [json.dumps({k: v for k, v in json.loads(x).items() if k not in drop}, sort_keys=True) for x in lines]

    assert canon(a) == canon(b)
    c2 = cfg(compressor="qsgd", compressor_args={"levels": 16}, clock="model", clock_sample_s=1e-3, seed=1)
    run(c2, tmp_path / "c")
    assert no_time(read_jsonl(tmp_path / "c" / "metrics.jsonl")) != strip[0]


def test_clock_scales_compression_by_its_own_factor(tmp_path):
    """clock_compress_scale multiplies the virtual (de)compression time, clock_compute_scale the compute; with
    clock_compress_scale 0 compression takes the compute factor (clock=model: deterministic times)."""
    base = dict(compressor="qsgd", compressor_args={"levels": 16}, clock="model", clock_sample_s=1e-3,
                clock_compress_mbyte_s=100.0)
    last = {}
    for name, kw in {"one": {}, "both": {"clock_compute_scale": 2.0},
                     "own": {"clock_compute_scale": 2.0, "clock_compress_scale": 1.25}}.items():
        run(cfg(**base, **kw), tmp_path / name)
        last[name] = read_jsonl(tmp_path / name / "metrics.jsonl")[-1]
    one, both, own = last["one"], last["both"], last["own"]
    assert one["t_virtual_compress"] > 0
    assert both["t_virtual_compute"] == pytest.approx(2.0 * one["t_virtual_compute"])
    assert both["t_virtual_compress"] == pytest.approx(2.0 * one["t_virtual_compress"])
    assert own["t_virtual_compute"] == pytest.approx(2.0 * one["t_virtual_compute"])
    assert own["t_virtual_compress"] == pytest.approx(1.25 * one["t_virtual_compress"])


def killed_run(c: RunConfig, out, monkeypatch, after_steps: int) -> None:
    """Run ``c`` into ``out`` until it is interrupted (KeyboardInterrupt) once ``after_steps`` steps are done."""
    real = Trainer.train_step

    def dying(self):
        if self.step == after_steps:
            raise KeyboardInterrupt("killed")
        return real(self)

    with monkeypatch.context() as m:
        m.setattr(Trainer, "train_step", dying)
        with pytest.raises(KeyboardInterrupt):
            run(c, out)


def test_checkpoint_resume_gives_identical_later_metrics(tmp_path, monkeypatch):
    c = cfg(steps=8, log_every=1, checkpoint_every=3, compressor="topk", compressor_args={"ratio": 0.1},
            error_feedback="on", optimizer="adam", lr=0.01, clock="model", clock_sample_s=1e-3)
    run(c, tmp_path / "full")
    full = no_time(read_jsonl(tmp_path / "full" / "metrics.jsonl"))

    killed_run(c, tmp_path / "k", monkeypatch, after_steps=7)
    assert not (tmp_path / "k" / "summary.json").exists()
    assert json.loads((tmp_path / "k" / "checkpoint" / "latest.json").read_text())["step"] == 6
    run(c, tmp_path / "k")
    resumed = read_jsonl(tmp_path / "k" / "metrics.jsonl")
    assert no_time(resumed) == full
    full_t = [x["t_virtual"] for x in read_jsonl(tmp_path / "full" / "metrics.jsonl")]
    assert [x["t_virtual"] for x in resumed] == full_t
    assert json.loads((tmp_path / "k" / "config.json").read_text())["resumes"] == 1


def test_resume_refuses_a_different_config(tmp_path, monkeypatch):
    c = cfg(steps=6, checkpoint_every=2)
    killed_run(c, tmp_path / "r", monkeypatch, after_steps=3)
    with pytest.raises(RuntimeError, match=r"checkpoint was written by another config \(lr: 0.05 -> 0.2\)"):
        run(cfg(steps=6, checkpoint_every=2, lr=0.2), tmp_path / "r")


@pytest.mark.parametrize("kw", [
    dict(sync="local", world_period=3),
    dict(sync="post_local", world_period=2, local_start=0.5),
    dict(sync="hierarchical", workers=4, households=2, world_period=3, assignment="household", household_shards=1),
    dict(sync="hierarchical", workers=8, batch_size=64, households=4, neighbourhoods=2, neighbourhood_period=2,
         world_period=4, household_period=1),
    dict(sync="hierarchical", workers=4, households=2, world_period=4, household_period=2),
    dict(sync="ssp", workers=3, batch_size=30, staleness=1, worker_speeds=[1.0, 1.0, 3.0]),
    dict(sync="async", workers=3, batch_size=30),
    dict(assignment="fine", copies=2, workers=4),
    dict(model="resnet20", workers=2, compressor="blockwise", compressor_args={"bits": 8}),
    dict(model="mlp", dynamic_batch="text", dynamic_batch_max=128, eval_every=0.25, steps=10, lr=0.2),
])
def test_schemes_run_and_end_synchronised(tmp_path, kw):
    c = cfg(**kw)
    s = run(c, tmp_path / "r")
    lines = read_jsonl(tmp_path / "r" / "metrics.jsonl")
    assert s["complete"] and s["final_test_acc"] is not None
    assert lines[-1]["samples"] >= c.total_samples(400)
    assert all(ln["loss"] is None or ln["loss"] == ln["loss"] for ln in lines)  # no NaN


def test_local_sgd_communicates_every_period_only(tmp_path):
    c = cfg(sync="local", world_period=3, steps=6, log_every=1, eval_every=100)
    run(c, tmp_path / "r")
    by_step = {ln["step"]: ln["bytes_sent"] for ln in read_jsonl(tmp_path / "r" / "metrics.jsonl")}
    assert by_step[1] == by_step[2] == 0 and by_step[3] > 0 and by_step[4] == by_step[5] == by_step[3]
    assert by_step[6] == 2 * by_step[3]


def test_hierarchical_single_household_equals_sync(tmp_path):
    a = run(cfg(sync="hierarchical", households=1, world_period=2, log_every=1), tmp_path / "h")
    b = run(cfg(log_every=1), tmp_path / "s")
    la = [x["loss"] for x in read_jsonl(tmp_path / "h" / "metrics.jsonl") if x["loss"] is not None]
    lb = [x["loss"] for x in read_jsonl(tmp_path / "s" / "metrics.jsonl") if x["loss"] is not None]
    assert len(la) == 6 and la == pytest.approx(lb, rel=1e-6, abs=1e-6)
    assert a["final_test_acc"] == b["final_test_acc"]


def test_dynamic_batch_grows_when_the_error_falls(tmp_path):
    c = cfg(model="mlp", dynamic_batch="text", dynamic_batch_max=128, dynamic_batch_metric="train_loss",
            eval_every=0.25, steps=0, epochs=3, lr=0.2, augment="none")
    s = run(c, tmp_path / "r")
    sizes = [ln["batch_size"] for ln in read_jsonl(tmp_path / "r" / "metrics.jsonl")]
    assert sizes == sorted(sizes) and sizes[0] == 32 and s["final_batch_size"] <= 128


def test_max_wall_stops_with_a_summary(tmp_path):
    s = run(cfg(steps=1000, max_wall_s=1e-6, log_every=1), tmp_path / "r")
    assert not s["complete"] and s["stopped"] == "max_wall_s" and s["step"] < 1000


def test_sim_dense_direct_equals_threaded_collective(tmp_path):
    kw = dict(clock="model", clock_sample_s=1e-3, log_every=1, steps=4, sync="local", world_period=2)
    run(cfg(sim_dense="direct", **kw), tmp_path / "d")
    run(cfg(sim_dense="threads", **kw), tmp_path / "t")
    d = read_jsonl(tmp_path / "d" / "metrics.jsonl")
    t = read_jsonl(tmp_path / "t" / "metrics.jsonl")
    assert [x["loss"] for x in d if x["loss"]] == pytest.approx([x["loss"] for x in t if x["loss"]], abs=1e-6)
    assert [x["t_virtual"] for x in d] == pytest.approx([x["t_virtual"] for x in t], rel=1e-12)
    assert [x["bytes_sent"] for x in d] == pytest.approx([x["bytes_sent"] for x in t], rel=1e-4)


def test_a_run_directory_has_one_writer(tmp_path):
    import fcntl

    d = tmp_path / "r"
    d.mkdir()
    with open(d / ".lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        with pytest.raises(RuntimeError, match="another process"):
            run(cfg(), d)
    run(cfg(steps=1), d)
    with pytest.raises(FileExistsError):
        run(cfg(steps=1), d)


@pytest.mark.parametrize("kw", [
    dict(sync="sync", granularity="flat"),
    dict(sync="sync", granularity="layer"),
    dict(sync="sync", granularity="bucket", bucket_mb=0.01),
    dict(sync="local", world_period=2),
    dict(sync="diloco", world_period=2),
    dict(sync="desloc", world_period=2, desloc_m1_period=2, desloc_m2_period=4, optimizer="adam"),
])
def test_sim_dense_collective_is_the_threaded_collective_bit_for_bit(kw):
    """sim_dense: collective (the ring's sums in one thread, lowbw.train.batched) computes what the collective's
    threads, hence procs, compute, with four workers: the same weights after 4 steps, bit for bit, the same
    bytes and virtual clock, for gradients per tensor, flat and per bucket, model averaging, outer steps and
    DES-LOC's moments; direct's rank-ordered sums (the control) give other weights."""
    out = {}
    for mode in ("collective", "threads", "direct"):
        c = cfg(model="mlp", workers=4, batch_size=64, clock="model", clock_sample_s=1e-3, sim_dense=mode, **kw)
        tr = Trainer(c, SimWorld(c))
        for _ in range(4):
            tr.train_step()
        out[mode] = tr.rep.params, tr.state.bytes_sent, tr.state.clock
    (pc, bc, cc), (pt, bt, ct), (pd, _, _) = out["collective"], out["threads"], out["direct"]
    assert torch.equal(pc, pt) and bc == bt and cc == ct
    assert not torch.equal(pd, pt)


def test_direct_sums_in_rank_order_the_ring_from_each_segment_s_rank():
    """Why sim_dense: direct equals procs with two workers and not with four: direct adds a group's rows in
    rank order, the ring adds segment j from rank j on; a sum of two does not depend on the order."""
    from lowbw.collective.partition import split
    from lowbw.train import batched

    g = torch.Generator().manual_seed(0)
    for workers, same in ((2, True), (4, False)):
        world = SimWorld(cfg(workers=workers, batch_size=64))
        rows = torch.randn(workers, 4000, generator=g) * torch.logspace(-3, 3, 4000)
        direct = world.dense_mean("world", list(rows)).outputs[0]
        ring = batched.mean_rows(world, "world", rows).outputs[0]
        in_rank_order = sum(rows[k] for k in range(workers)) / workers
        from_segment_rank = torch.cat([sum(rows[(j + k) % workers, a:b] for k in range(workers)) for j, (a, b)
                                       in enumerate(split(4000, workers))]) / workers
        assert torch.equal(direct, in_rank_order) and torch.equal(ring, from_segment_rank)
        assert torch.equal(direct, ring) is same
        # the same sum up to float32 rounding: N - 1 roundings, each at most eps/2 of a partial sum's magnitude
        bound = (workers - 1) * torch.finfo(torch.float32).eps * rows.abs().sum(0) / workers
        assert torch.all((direct - ring).abs() <= bound)
