"""Streaming DiLoCo as its paper states it: whole-layer strided fragments, the mixing factor alpha, and
torchft's land-at-slot schedule (lowbw.train.schemes.streaming, lowbw.train.schemes.diloco)."""

from __future__ import annotations

import pytest
import torch

from lowbw.runs.io import read_jsonl
from lowbw.train.config import ConfigError
from lowbw.train.launch import run
from lowbw.train.loop import Trainer
from lowbw.train.schemes.diloco import OuterSchedule
from lowbw.train.schemes.streaming import FragmentPlan, layers
from lowbw.train.world import SimWorld
from tests.helpers import config_of, sim_run, strip
from tests.sim_procs import assert_same_metrics, sim_and_procs

BASE = sim_run(model="cnn", steps=7, sync="diloco")
cfg = config_of(BASE)


GPT = [("wte.weight", 0, 6, torch.Size([3, 2])), ("wpe.weight", 6, 4, torch.Size([2, 2])),
       ("blocks.0.ln_1.weight", 10, 2, torch.Size([2])), ("blocks.0.attn.c_attn.weight", 12, 12, torch.Size([6, 2])),
       ("blocks.1.ln_1.weight", 24, 2, torch.Size([2])), ("blocks.1.attn.c_attn.weight", 26, 12, torch.Size([6, 2])),
       ("ln_f.weight", 38, 2, torch.Size([2]))]


def test_strided_fragments_are_whole_layers_taken_with_a_stride():
    assert layers(GPT) == [[0], [1], [2, 3], [4, 5], [6]]
    plan = FragmentPlan.make(GPT, 2, 4, flat=False, kind="strided")
    assert [[n for n, _, _, _ in cs] for cs in plan.chunks] == [
        ["wte.weight", "blocks.0.ln_1.weight", "blocks.0.attn.c_attn.weight", "ln_f.weight"],
        ["wpe.weight", "blocks.1.ln_1.weight", "blocks.1.attn.c_attn.weight"]]
    both = torch.cat([plan.index[0], plan.index[1]]).sort().values
    assert torch.equal(both, torch.arange(40))  # every element in exactly one fragment
    assert plan.size(0) + plan.size(1) == 40
    rows = torch.arange(80.0).view(2, 40)
    got = plan.take(rows, 1)
    assert torch.equal(got[0], torch.cat([torch.arange(6.0, 10.0), torch.arange(24.0, 38.0)]))
    plan.put(rows, 1, -got)
    assert float(rows[1, 7]) == -47.0 and float(rows[1, 0]) == 40.0
    with pytest.raises(ValueError, match="layers"):
        FragmentPlan.make(GPT, 6, 6, flat=False, kind="strided")


def test_strided_with_one_fragment_is_plain_diloco(tmp_path):
    run(cfg(world_period=2), tmp_path / "a", quiet=True)
    run(cfg(world_period=2, diloco_fragment_layout="strided"), tmp_path / "b", quiet=True)
    assert strip(read_jsonl(tmp_path / "a" / "metrics.jsonl")) == strip(read_jsonl(tmp_path / "b" / "metrics.jsonl"))


def test_a_strided_fragment_step_moves_only_its_layers():
    """H = 4, F = 2 strided: after step 2 fragment 0 (layers 0, 2, 4 of the CNN) is theta_start's outer step
    (outer SGD at rate 1: the workers' mean), equal on both workers; fragment 1's layers are untouched."""
    c = cfg(world_period=4, diloco_fragments=2, diloco_fragment_layout="strided", outer_optimizer="sgd",
            outer_lr=1.0, outer_momentum=0.0, steps=2)
    tr = Trainer(c, SimWorld(c))
    t = cfg(sync="local", world_period=1000, steps=2)
    twin = Trainer(t, SimWorld(t))
    for _ in range(2):
        tr.train_step()
        twin.train_step()
    plan = tr.sync.plan
    mean0 = plan.take(twin.rep.params, 0).mean(0)
    for i in range(2):
        assert torch.allclose(plan.take(tr.rep.params, 0)[i], mean0, rtol=0, atol=1e-6)
    assert torch.equal(plan.take(tr.rep.params, 1), plan.take(twin.rep.params, 1))
    mine = [torch.arange(o, o + k) for n, o, k, _ in tr.rep.p_layout if n.split(".")[0] in ("conv1", "conv3", "fc2")]
    assert torch.equal(plan.index[0], torch.cat(mine))


def test_alpha_mixes_the_landed_model_with_the_workers_own():
    """F = 1, tau = 0, alpha = 0.5, outer SGD at rate 1: after the outer step theta_i = 0.5 theta_i + 0.5 mean;
    the run is evaluated on theta_start meanwhile and ends with equal replicas."""
    c = cfg(world_period=2, outer_optimizer="sgd", outer_lr=1.0, outer_momentum=0.0, diloco_alpha=0.5, steps=2)
    tr = Trainer(c, SimWorld(c))
    t = cfg(sync="local", world_period=1000, steps=2)
    twin = Trainer(t, SimWorld(t))
    for _ in range(2):
        tr.train_step()
        twin.train_step()
    mean = twin.rep.params.mean(0)
    for i in range(2):
        assert torch.allclose(tr.rep.params[i], 0.5 * twin.rep.params[i] + 0.5 * mean, rtol=0, atol=1e-6)
    assert not tr.state.in_sync and tr.evaluable
    assert torch.allclose(tr.sync.global_row, mean, rtol=0, atol=1e-6)
    tr.final_sync()  # no inner step since the landing: the replicas take theta_start, nothing is sent
    assert torch.equal(tr.rep.params[0], tr.sync.start[0]) and torch.equal(tr.rep.params[1], tr.sync.start[1])


def test_land_at_slot_starts_tau_steps_early():
    """H = 4, F = 2, tau = 1: start_at_slot starts fragments after steps 2 and 4 (land 3, 5); land_at_slot
    (torchft) after steps 1 and 3 (land 2, 4: on the slots)."""
    def starts(schedule):
        s = OuterSchedule(cfg(world_period=4, diloco_fragments=2, diloco_delay=1, diloco_schedule=schedule))
        return [(t, s.action(t, 0.0).fragment) for t in range(1, 9) if s.action(t, 0.0).avg is not None]

    assert starts("start_at_slot") == [(2, 0), (4, 1), (6, 0), (8, 1)]
    assert starts("land_at_slot") == [(1, 0), (3, 1), (5, 0), (7, 1)]


@pytest.mark.parametrize("kw,key", [
    (dict(sync="local", world_period=2, diloco_alpha=0.5), "diloco_alpha"),
    (dict(sync="local", world_period=2, diloco_fragment_layout="strided"), "diloco_fragment_layout"),
    (dict(world_period=2, diloco_alpha=1.0), "diloco_alpha"),
])
def test_streaming_keys_are_checked(kw, key):
    with pytest.raises(ConfigError) as e:
        cfg(**kw)
    assert e.value.key == key


def test_paper_streaming_on_procs_matches_sim(tmp_path):
    """Strided F = 2, tau = 1 landing at the slot, alpha = 0.5, top-k + error feedback on Delta."""
    kw = dict(world_period=4, diloco_fragments=2, diloco_delay=1, diloco_fragment_layout="strided",
              diloco_schedule="land_at_slot", diloco_alpha=0.5, compressor="topk", compressor_args={"ratio": 0.1},
              error_feedback="on", steps=6)
    sim, procs = sim_and_procs(cfg, tmp_path, **kw)
    assert len(sim) >= 7
    assert_same_metrics(sim, procs)
