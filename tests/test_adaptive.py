import math

import pytest

from lowbw.adaptive import AdaptiveTopK, candidate_densities, collective_for
from lowbw.net.costmodel import LinkParams


def test_candidates_match_the_talk():
    c = candidate_densities()
    assert [round(x, 4) for x in c] == [0.1, 0.0333, 0.0111, 0.0037, 0.001]
    with pytest.raises(ValueError, match="c_low"):
        candidate_densities(0.5, 0.1)


def test_collective_choice_follows_the_cost_model():
    fast = LinkParams(alpha_s=1e-3, bandwidth_bps=10e9)
    slow = LinkParams(alpha_s=1e-3, bandwidth_bps=10e6)
    # tiny payloads on a latency-dominated link: all-gather (N-1 messages) vs ART's many rounds
    name, t = collective_for(4e3, 0.01, 8, fast)
    assert t > 0 and name in ("allgather", "artopk-tree", "artopk-ring")
    # big payload, slow link: a bandwidth-efficient AR-Top-k beats all-gathering from 8 ranks
    name_big, _ = collective_for(100e6, 0.1, 8, slow)
    assert name_big.startswith("artopk")


def test_explores_then_exploits_and_reacts_to_bandwidth():
    pol = AdaptiveTopK(nbytes=40e6, world_size=4, t_compute_s=0.05)
    link = LinkParams(1e-3, 100e6)
    seen = []
    for _ in range(len(pol.densities)):
        ch = pol.choose(link)
        seen.append(ch.density)
        # more density keeps more energy (gain), costs more to communicate
        pol.observe(ch.density, gain=min(1.0, 0.3 + 5 * ch.density), t_compress_s=0.01)
    assert sorted(seen) == sorted(pol.densities)
    first = pol.choose(link)
    assert pol.choose(link) is first  # no change -> same choice object
    slow = pol.choose(LinkParams(1e-3, 1e6))  # 100x slower link: should not pick a denser ratio
    assert slow.density <= first.density
    assert math.isfinite(slow.score)
    fast = pol.choose(LinkParams(1e-3, 100e9))  # communication ~free: the densest (highest gain) wins
    assert fast.density == max(pol.densities)


def test_gain_bounds():
    assert AdaptiveTopK.gain_of(1.0, 4.0) == 0.25
    assert AdaptiveTopK.gain_of(0.0, 0.0) == 1.0
    pol = AdaptiveTopK(nbytes=1e6, world_size=2)
    with pytest.raises(ValueError, match="gain"):
        pol.observe(0.1, 1.5, 0.0)
