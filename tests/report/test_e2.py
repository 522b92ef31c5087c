"""E2's generated prose: the count of our configurations below the throughput target reads as words."""

from __future__ import annotations

import pandas as pd
import pytest

from lowbw.report.e2 import OURS, THROUGHPUT_TARGET_GBPS, numbers
from lowbw.report.experiment import Stats


@pytest.mark.parametrize("slow, words", [(0, "no configurations fall"), (1, "1 configuration falls"),
                                         (2, "2 configurations fall")])
def test_e2_counts_configurations_below_the_target_in_words(slow, words):
    gbps = [THROUGHPUT_TARGET_GBPS / 2] * slow + [THROUGHPUT_TARGET_GBPS * 2] * (3 - slow)
    df = pd.DataFrame({"input": "gaussian", "method": ["fp16", "topk", "q8"], "params": "", "source": OURS,
                       "throughput_gbps": gbps, "rel_l2_error": 0.01, "numel": 1000})
    assert numbers(Stats({"compressors": df}, {"numel": 1000}))["ETwoBelowTarget"] == words


def test_the_speed_ratio_is_the_head_to_heads_fastest_calls_with_their_medians_beside():
    """Our 8-bit code against bitsandbytes: the ratio of the alternating calls' fastest (each code's own cost),
    the medians' ratio printed beside it; without a head-to-head, the two rows' throughputs."""
    df = pd.DataFrame({"input": "gaussian", "method": ["blockwise", "bnb.quantize_blockwise"],
                       "params": ["bits=8, codebook=nonlinear", ""], "source": [OURS, "reference"],
                       "throughput_gbps": [1.0, 4.0], "rel_l2_error": [0.01, 0.02], "numel": 1000})
    h2h = {"gaussian": {"reps": 10, "speed_ratio_best": 1.5, "speed_ratio_median": 0.5}}
    n = numbers(Stats({"compressors": df}, {"numel": 1000, "head_to_head": h2h}))
    assert (n["ETwoSpeedRatioGaussian"], n["ETwoSpeedRatioMedianGaussian"], n["ETwoHeadToHeadCalls"]) == \
        ("1.50", "0.500", "10")
    n = numbers(Stats({"compressors": df}, {"numel": 1000}))
    assert n["ETwoSpeedRatioGaussian"] == "0.250" and "ETwoSpeedRatioMedianGaussian" not in n
