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
