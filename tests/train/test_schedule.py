"""Schedules: the dynamic batch size (text rule vs the draft's literal formula), LR warm-up/step/cosine."""

from __future__ import annotations

import math

import pytest

from lowbw.train.config import RunConfig
from lowbw.train.schedule import (
    LRSchedule,
    dynamic_batch,
    dynamic_factor,
    household_effective_batch,
    household_local_batch,
)


@pytest.mark.parametrize("ratio,text,literal", [
    (0.5, 1, 1), (1.0, 1, 1), (1.9, 1, 1), (2.0, 2, 2), (3.0, 2, 4), (3.99, 2, 4), (4.0, 4, 8), (5.0, 4, 16),
    (8.0, 8, 128),
])
def test_dynamic_factor_text_rule_and_literal_formula(ratio, text, literal):
    # text: "once the error is half ... doubled, once it has quartered ... doubled again" = 2^floor(log2 r)
    # literal: max(1, 2^(floor(E0/Ee) - 1)) as printed in the draft's 2.5.1
    assert dynamic_factor(1.0, 1.0 / ratio, "text") == text
    assert dynamic_factor(1.0, 1.0 / ratio, "literal") == literal


def test_dynamic_batch_is_capped_and_divisible():
    assert dynamic_batch(128, 2.0, 0.4, beta=1024, rule="text", workers=4) == 512
    assert dynamic_batch(128, 2.0, 0.01, beta=1000, rule="text", workers=8) == 1000
    assert dynamic_batch(128, 2.0, 0.01, beta=1001, rule="text", workers=8) == 1000
    assert dynamic_factor(1.0, 0.0) == 1 and dynamic_factor(float("nan"), 1.0) == 1


def test_household_formulas_invert_each_other():
    for H, LW in [(2, 2), (4, 8), (8, 128)]:
        b = household_local_batch(128, 16, H, LW)
        assert abs(household_effective_batch(b, 16, H, LW) - 128) <= 16 * (H + LW - 1) / (H * LW)


def sched(**kw):
    cfg = RunConfig.from_dict({"dataset": "synthetic", **kw})
    return LRSchedule(cfg, 1000, cfg.total_samples(1000)), cfg


def test_step_schedule_milestones():
    s, cfg = sched(lr=0.1, epochs=10)
    assert s(0) == pytest.approx(0.1)
    assert s(5000 - 1) == pytest.approx(0.1) and s(5000) == pytest.approx(0.01)
    assert s(7500) == pytest.approx(0.001)


def test_cosine_and_warmup_with_linear_scaling():
    s, cfg = sched(lr=0.1, epochs=10, batch_size=512, lr_scaling="linear", warmup_epochs=2, lr_schedule="cosine")
    assert s(0) == pytest.approx(0.1)  # Goyal et al.: warm up from the unscaled lr
    assert s(1000) == pytest.approx(0.25)
    assert s(2000) == pytest.approx(0.4)
    assert s(6000) == pytest.approx(0.4 * 0.5 * (1 + math.cos(math.pi * 0.5)))
    assert s(10000) == pytest.approx(0.0, abs=1e-12)


def test_square_root_scaling_warms_up_from_the_unscaled_lr():
    """lr_scaling: sqrt: batch 512 at base 128 -> lr x 2, reached after the warm-up from the unscaled lr."""
    s, cfg = sched(lr=0.1, epochs=10, batch_size=512, lr_scaling="sqrt", warmup_epochs=2, lr_schedule="cosine")
    assert cfg.lr_target() == pytest.approx(0.2)
    assert s(0) == pytest.approx(0.1) and s(2000) == pytest.approx(0.2)
