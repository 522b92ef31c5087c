"""lowbw.compress.sparsify.topk_count: k = ceil(ratio * n), at least 1 and at most n, 0 for an empty tensor --
checked on hand-computed cases (ceil's edges included), not through a compressor's bytes."""

from __future__ import annotations

import pytest

from lowbw.compress.sparsify import topk_count


@pytest.mark.parametrize(("ratio", "n", "k"), [
    (0.01, 0, 0),  # empty tensor: nothing to send
    (0.5, 0, 0),
    (0.01, 1, 1),  # at least one entry
    (1e-9, 10_000, 1),
    (0.01, 100, 1),  # exactly 1.0
    (0.01, 101, 2),  # 1.01 rounds up
    (0.01, 1000, 10),
    (0.01, 1001, 11),
    (0.25, 8, 2),
    (0.3, 10, 3),
    (0.07, 100, 8),  # 0.07 * 100 is 7.000000000000001 in binary: ceil gives 8
    (1.0, 7, 7),
    (2.0, 7, 7),  # at most n
])
def test_topk_count(ratio, n, k):
    assert topk_count(ratio, n) == k
