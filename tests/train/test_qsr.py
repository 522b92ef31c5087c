"""sync: qsr (lowbw.train.schemes.qsr): local SGD whose rounds last max(H_base, floor((alpha / lr)^2)) steps at the
round's first learning rate (Gu et al. 2024): the rule worked out by hand, the rounds a decaying rate gives, the
twin run (alpha 0 is local SGD), a resumed round and determinism."""

from __future__ import annotations

import math

import pytest
import torch

from lowbw.runs.io import read_jsonl
from lowbw.train.config import ConfigError
from lowbw.train.launch import run
from lowbw.train.loop import Trainer
from lowbw.train.schemes.qsr import period
from lowbw.train.world import SimWorld
from tests.helpers import config_of, sim_run, strip

# 12 steps of 32 samples; the step schedule halves lr = 0.05 at half the run's samples: steps 1-6 at 0.05, 7-12
# at 0.025 (a step's rate is the schedule's at the samples before it)
BASE = sim_run(steps=12, lr=0.05, lr_schedule="step", lr_milestones=[0.5], lr_gamma=0.5)
cfg = config_of(BASE)


def test_the_rule_by_hand():
    assert period(0.05, 2, 0.0) == 2  # alpha 0: local SGD's H
    assert period(0.05, 2, 0.11) == 4  # (0.11 / 0.05)^2 = 4.84
    assert period(0.025, 2, 0.11) == 19  # (0.11 / 0.025)^2 = 19.36
    assert period(0.1, 5, 0.11) == 5  # (1.1)^2 = 1.21 < H_base
    assert period(0.0, 2, 0.11) == math.inf  # a rate of 0 never ends the round


def _synced_steps(c) -> list[int]:
    """The steps after which every replica holds the same parameters (a world average)."""
    t = Trainer(c, SimWorld(c))
    out = []
    for step in range(1, c.steps):  # the last step is the run's final synchronisation's
        t.train_step()
        p = t.rep.params
        if all(torch.equal(p[0], p[i]) for i in range(1, p.shape[0])):
            out.append(step)
    return out


def test_rounds_grow_as_the_rate_decays():
    """alpha 0.11, H_base 2: round 1 starts at lr 0.05 (H 4: ends at step 4), round 2 at step 5 (lr 0.05, H 4:
    ends at 8), round 3 at step 9 at lr 0.025 (H 19: past the run's end)."""
    assert _synced_steps(cfg(sync="qsr", world_period=2, qsr_alpha=0.11)) == [4, 8]
    # local SGD at H 2 for comparison: every other step
    assert _synced_steps(cfg(sync="local", world_period=2)) == [2, 4, 6, 8, 10]


def test_alpha_zero_is_local_sgd(tmp_path):
    run(cfg(sync="local", world_period=3), tmp_path / "local", quiet=True)
    run(cfg(sync="qsr", world_period=3, qsr_alpha=0.0), tmp_path / "q0", quiet=True)
    a, b = read_jsonl(tmp_path / "local" / "metrics.jsonl"), read_jsonl(tmp_path / "q0" / "metrics.jsonl")
    assert strip(a) == strip(b)


@pytest.mark.slow
def test_runs_are_deterministic(tmp_path):
    for d in ("q1", "q2"):
        run(cfg(sync="qsr", world_period=2, qsr_alpha=0.11), tmp_path / d, quiet=True)
    q1, q2 = read_jsonl(tmp_path / "q1" / "metrics.jsonl"), read_jsonl(tmp_path / "q2" / "metrics.jsonl")
    assert strip(q1) == strip(q2)


def test_a_resumed_scheme_keeps_its_round():
    c = cfg(sync="qsr", world_period=2, qsr_alpha=0.11)
    t = Trainer(c, SimWorld(c))
    for _ in range(5):
        t.train_step()
    s = t.sync.state_dict()
    assert s["qsr_round_end"] == 8  # round 2 started at step 5: 5 - 1 + 4
    fresh = Trainer(c, SimWorld(c))
    fresh.sync.load_state_dict(s)
    assert fresh.sync.round_end == 8


@pytest.mark.parametrize(("kw", "key"), [
    ({"sync": "qsr", "compressor": "topk"}, "compressor"),  # models are averaged densely
    ({"sync": "qsr", "qsr_alpha": -1.0}, "qsr_alpha"),
    ({"sync": "local", "qsr_alpha": 0.2}, "qsr_alpha"),  # qsr's key under another scheme
])
def test_bad_settings_name_the_key(kw, key):
    with pytest.raises(ConfigError) as e:
        cfg(**kw)
    assert e.value.key == key
