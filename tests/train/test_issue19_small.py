"""Issue 19, point 6: ``--set error_feedback=on`` (YAML reads on/off as booleans) and ef_signsgd's scale."""

from __future__ import annotations

import pytest
import torch

import lowbw.compress as C
from lowbw.train.config import ConfigError, RunConfig, parse_override


@pytest.mark.parametrize("text,want", [("on", "on"), ("off", "off"), ("true", "on"), ("auto", "auto")])
def test_error_feedback_accepts_yaml_booleans(text, want):
    k, v = parse_override(f"error_feedback={text}")
    assert RunConfig.from_dict({k: v}, check_registries=False).error_feedback == want


def test_other_string_keys_still_reject_booleans():
    with pytest.raises(ConfigError, match="expected a string, got True"):
        RunConfig.from_dict({"compressor": True}, check_registries=False)


def test_ef_signsgd_scale_is_the_exact_mean_abs():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4 * 2**20, generator=g) + 0.3
    comp = C.make("ef_signsgd")
    scale = comp.compress(x).parts[1].item()
    exact = x.double().abs().sum().item() / x.numel()
    assert abs(scale - exact) / exact < 1e-6  # fp32 rounding of the result only (vector_norm: 2.7e-4)
