import math

import pytest
import torch

from lowbw.comm.threads import ThreadCollective, run_threads
from lowbw.compress.artopk import ARTopK
from lowbw.compress.base import ErrorFeedback, State
from lowbw.compress.sparsify import TopK
from lowbw.net.costlinks import WorkerLink
from lowbw.net.costmodel import LinkParams
from lowbw.train import links as L
from lowbw.train.adaptive import (
    COLLECTIVES,
    AdaptiveTopK,
    ChosenTopK,
    candidate_densities,
    collective_for,
    option_calls,
    option_time,
    run_collective,
)


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


# ---------------------------------------------------------------- the collective, enacted and timed per link
N, SIZES = 4, (3000, 40, 700)


def _grads(step: int) -> list[list[torch.Tensor]]:
    g = torch.Generator().manual_seed(step)
    return [[torch.randn(n, generator=g) for n in SIZES] for _ in range(N)]


def _aggregate(comps, states, grads, algorithm="ring"):
    """Every rank's aggregate of its tensors through a thread group; the outputs and every rank's records."""
    colls = ThreadCollective.group(N, algorithm, timeout=30.0)

    def body(i, coll):
        return [comps[i].aggregate(t, coll, f"t{j}", states[i]) for j, t in enumerate(grads[i])]

    return run_threads(body, colls), [list(c.calls) for c in colls]


@pytest.mark.parametrize("option", COLLECTIVES)
def test_each_collective_is_the_compressor_it_names(option):
    """allgather is topk with error feedback, artopk-* is artopk over that all-reduce: outputs bit-identical
    over three steps (the residuals kept), and the records are what the policy times."""
    chosen = [ChosenTopK(0.01, True, collective=option) for _ in range(N)]
    if option == "allgather":
        ref = [ErrorFeedback(TopK(0.01)) for _ in range(N)]
    else:
        ref = [ARTopK(0.01, "star", True) for _ in range(N)]
    alg = "ring" if option == "allgather" else option.removeprefix("artopk-")
    s1, s2 = [State() for _ in range(N)], [State() for _ in range(N)]
    for step in range(3):
        g = _grads(step)
        out1, calls1 = _aggregate(chosen, s1, g)  # the group is ring: ChosenTopK switches it
        out2, calls2 = _aggregate(ref, s2, g, alg)
        for a, b in zip(out1, out2):
            for x, y in zip(a, b):
                assert torch.equal(x, y)
        assert calls1 == calls2
        assert calls1[0] == option_calls(SIZES, 0.01, N, option)


def test_switching_collectives_keeps_the_residual():
    """Error feedback across a switch: what every rank did not send stays, so over steps the applied averages
    plus the residuals' average equal the inputs' average (mass conservation)."""
    comps, states = [ChosenTopK(0.05, True) for _ in range(N)], [State() for _ in range(N)]
    sent = [torch.zeros(n) for n in SIZES]
    fed = [torch.zeros(n) for n in SIZES]
    for step, option in enumerate(["allgather", "artopk-ring", "artopk-tree", "allgather"]):
        for c in comps:
            c.collective = option
        g = _grads(step)
        outs, _ = _aggregate(comps, states, g)
        for j in range(len(SIZES)):
            sent[j] += outs[0][j]
            fed[j] += sum(g[i][j] for i in range(N)) / N
    for j in range(len(SIZES)):
        key = "ef.residual" if "ef.residual" in states[0][f"t{j}"] else "artopk.residual"
        assert key == "ef.residual" and "artopk.residual" not in states[0][f"t{j}"]
        resid = sum(s[f"t{j}"][key] for s in states) / N
        assert torch.allclose(sent[j] + resid, fed[j], atol=1e-5)


def test_chosen_topk_follows_the_configured_compressor():
    c = ChosenTopK.like(ErrorFeedback(TopK(0.02)))
    assert (c.ratio, c.error_feedback, c.collective) == (0.02, True, "allgather")
    a = ChosenTopK.like(ARTopK(0.03, "var", False))
    assert (a.ratio, a.error_feedback, a.reduce.mode, a.collective) == (0.03, False, "var", "artopk-ring")
    a.ratio = 0.1
    assert a.reduce.ratio == a.gather.ratio == 0.1
    with pytest.raises(TypeError, match="topk or artopk"):
        ChosenTopK.like(object())
    a.collective = "butterfly"
    with pytest.raises(ValueError, match="butterfly"):
        a.aggregate(torch.ones(10), ThreadCollective.group(1)[0])


def _links(**kw):
    from lowbw.train.config import RunConfig

    return RunConfig.from_dict({"dataset": "synthetic", "model": "mlp", "workers": N, "link_goodput": 1.0,
                                "bandwidth_mbit": 10.0, "latency_ms": 0.5, **kw})


@pytest.mark.parametrize("net", [
    dict(),
    dict(worker_bandwidth_mbit=[10, 10, 10, 1]),
    dict(worker_bandwidth_mbit=[10] * 4, worker_uplink_mbit=[2] * 4),
    dict(worker_bandwidth_mbit=[10, 50, 10, 10], worker_latency_ms=[0.5, 0.5, 20, 0.5]),
    dict(clock_shaper_burst_bytes=20000),
])
@pytest.mark.parametrize("option", COLLECTIVES)
def test_the_policy_times_a_collective_as_the_virtual_clock_charges_it(net, option):
    """On the run's own links (per-worker, token bucket, plain) the policy's time of an option is the time the
    virtual clock charges for the calls that option really makes."""
    cfg = _links(**net)
    link = L.link_for(cfg, "world", 0.0)
    comps, states = [ChosenTopK(0.01, True, collective=option) for _ in range(N)], [State() for _ in range(N)]
    _, calls = _aggregate(comps, states, _grads(0))
    charged = L.comm_cost({0: calls}, link)["v_comm"]
    assert option_time(SIZES, 0.01, N, link, option) == pytest.approx(charged, rel=1e-12)


def test_per_worker_latencies_are_not_the_slowest_link_bound():
    """Latency on worker 0's uplink and worker 2's downlink: no ring hop has both, the equal-link bound adds
    them; the policy times the ring on the hops (faster than the bound)."""
    links = [WorkerLink(10e6, 10e6, 0.02, 0.0), WorkerLink(10e6, 10e6, 0.0, 0.0), WorkerLink(10e6, 10e6, 0.0, 0.02),
             WorkerLink(10e6, 10e6, 0.0, 0.0)]
    wl = L.WorkerLinks.of(links)
    slow = LinkParams(wl.alpha_s, wl.bandwidth_bps)
    assert slow.alpha_s == pytest.approx(0.04)
    t_links = option_time(SIZES, 0.01, N, wl, "artopk-ring")
    t_slow = option_time(SIZES, 0.01, N, slow, "artopk-ring")
    assert t_links < t_slow - 0.1  # 3 tensors x 4 ring calls x (N-1)... latency terms of 20 ms, not 40 ms


def test_a_change_of_any_workers_link_triggers_a_new_choice():
    pol = AdaptiveTopK(nbytes=4e6, world_size=N, densities=[0.01], numels=[10**6])
    pol.observe(0.01, 0.5, 0.0)
    base = [WorkerLink(10e6, 10e6, 5e-4)] * 3 + [WorkerLink(1e6, 1e6, 5e-4)]
    first = pol.choose(L.WorkerLinks.of(base))
    assert pol.choose(L.WorkerLinks.of(list(base))) is first
    # worker 0 much faster, the slowest link unchanged: the policy looks again
    moved = [WorkerLink(100e6, 100e6, 5e-4)] + base[1:]
    assert pol.choose(L.WorkerLinks.of(moved)) is not first


def _train(tmp_path, name, **kw):
    from lowbw.runs.io import read_jsonl
    from lowbw.train.config import RunConfig
    from lowbw.train.launch import run

    base = dict(dataset="synthetic", model="mlp", workers=N, batch_size=32, steps=6, log_every=1, progress=False,
                train_limit=400, test_limit=50, eval_every=10.0, clock="model", clock_sample_s=1e-3,
                worker_bandwidth_mbit=[10, 10, 10, 1], error_feedback="on")
    run(RunConfig.from_dict({**base, **kw}), tmp_path / name, quiet=True)
    return [x for x in read_jsonl(tmp_path / name / "metrics.jsonl") if x.get("loss") is not None]


def test_a_run_aggregates_with_the_collective_its_policy_chooses(tmp_path):
    """topk whose collective the policy chooses (density fixed): on one slow link the cost model picks
    AR-Top-k over ring, so from step 2 on every step is an artopk step (same communication time per step as a
    run configured with artopk), and the choice is what run_collective says for the run's config."""
    from lowbw.train.config import RunConfig

    auto = dict(compressor="topk", compressor_args={"ratio": 0.05}, adaptive="moo", adaptive_c_low=0.05,
                adaptive_c_high=0.05)
    a = _train(tmp_path, "auto", **auto)
    b = _train(tmp_path, "artopk", compressor="artopk", compressor_args={"ratio": 0.05})
    # per tensor, as the adaptive compressor exchanges (it chooses its collective per call: a bucket does not pack it)
    t = _train(tmp_path, "topk", compressor="topk", compressor_args={"ratio": 0.05}, granularity="layer")
    cfg = RunConfig.from_dict({"dataset": "synthetic", "model": "mlp", "workers": N, "clock": "measured",
                               "worker_bandwidth_mbit": [10, 10, 10, 1], **auto})
    with pytest.raises(ValueError, match="synthetic"):
        run_collective(cfg)  # no image shape: the policy in a run reads the model's own tensors instead
    mnist = RunConfig.from_dict({**cfg.to_dict(), "dataset": "mnist"})
    assert run_collective(mnist)[0] == "artopk-ring"

    def per_step(lines):
        return [y["t_virtual_comm"] - x["t_virtual_comm"] for x, y in zip(lines, lines[1:])]

    assert a[0]["t_virtual_comm"] == pytest.approx(t[0]["t_virtual_comm"])  # step 1: topk's all-gather
    assert per_step(a) == pytest.approx(per_step(b))  # then AR-Top-k over the ring
    assert per_step(a)[-1] < 0.7 * per_step(t)[-1]
    assert [x["loss"] for x in a] == [x["loss"] for x in _train(tmp_path, "auto2", **auto)]  # deterministic
