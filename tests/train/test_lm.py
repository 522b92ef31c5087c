"""The character-level language-model workload: corpus, GPT, windows, targets, and the Trainer around them."""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

import pytest
import torch

from lowbw.data.text import TEXT_SPECS, load_text
from lowbw.train.config import RunConfig
from lowbw.train.config_rules import ConfigError
from lowbw.train.models import GPT_SIZES, build_model, param_count
from lowbw.train.targets import TargetError, parse_target
from lowbw.train.workload import TextWorkload
from tests.helpers import MIRROR, needs_corpus


@pytest.fixture
def corpus(tmp_path, monkeypatch):
    monkeypatch.setenv("LOWBW_DATA_DIR", str(tmp_path / "cache"))
    return load_text("shakespeare", mirror=str(MIRROR))


@needs_corpus
def test_corpus_is_tiny_shakespeare_split_90_10(corpus):
    raw = (MIRROR / "tinyshakespeare.txt").read_bytes()
    assert hashlib.md5(raw).hexdigest() == "6fb458f1232090904fb40fe944165e91"
    assert len(corpus.ids) == 1_115_394 and corpus.vocab_size == 65
    assert corpus.split == 1_003_854  # int(0.9 x 1,115,394), nanoGPT's prepare.py
    assert corpus.decode(corpus.ids[:14]) == "First Citizen:"
    assert corpus.vocab == "".join(sorted(set(raw.decode())))


@needs_corpus
def test_a_corrupt_cache_is_fetched_again(corpus, tmp_path):
    cached = tmp_path / "cache" / "shakespeare" / "tinyshakespeare.txt"
    cached.write_text("not shakespeare")
    again = load_text("shakespeare", root=tmp_path / "cache", mirror=str(MIRROR))
    assert again.source == "mirror" and torch.equal(again.ids, corpus.ids)


def test_gpt_sizes_match_nanogpt():
    # nanoGPT prints its count without the position embedding: 0.80M (CPU recipe), 10.65M (GPU recipe)
    for name, expected in (("gpt-small", 795_904), ("gpt-medium", 10_646_784)):
        s = GPT_SIZES[name]
        # per block: qkv 3C^2 + proj C^2 + MLP 8C^2 + two LayerNorm weights 2C; token embedding V C; final LN C
        C, L = s.n_embd, s.n_layer
        assert expected == L * (12 * C * C + 2 * C) + 65 * C + C
        assert param_count(name, 65, 1, 0) - s.block_size * C == expected


def test_gpt_is_causal_and_tied():
    torch.manual_seed(0)
    m = build_model("gpt-tiny", 65, 1, 0).eval()
    x = torch.randint(0, 65, (2, 32))
    y = m(x)
    x2 = x.clone()
    x2[:, 20:] = (x2[:, 20:] + 1) % 65  # change the future: the first 20 positions' logits stay
    assert torch.equal(m(x2)[:, :20], y[:, :20]) and not torch.equal(m(x2)[:, 20:], y[:, 20:])
    names = [n for n, _ in m.named_parameters()]
    assert "wte.weight" in names and not any("lm_head" in n for n in names)  # one tied weight, held once
    with pytest.raises(ValueError, match="longer than block_size=32"):
        m(torch.zeros(1, 33, dtype=torch.long))


@needs_corpus
def test_windows_are_next_character_pairs_inside_each_block(corpus):
    wl = TextWorkload(corpus, 16, 10, "cpu")
    assert wl.n_train == (corpus.split - 1) // 16 - 1
    idx = torch.tensor([0, 5, wl.n_train - 1])
    x, y = wl.train_batch(idx, torch.Generator().manual_seed(0))
    assert x.shape == y.shape == (3, 16) and x.dtype == torch.int64
    train = corpus.ids[: corpus.split].long()
    for k, i in enumerate(idx.tolist()):
        # the window starts inside block i and is a contiguous piece of the training text, shifted by one
        starts = [s for s in range(i * 16, i * 16 + 16) if torch.equal(train[s: s + 16], x[k])]
        assert starts and torch.equal(train[starts[0] + 1: starts[0] + 17], y[k])
    vx, vy = wl.eval_sets()["val"]
    val = corpus.ids[corpus.split:].long()
    assert vx.shape == (10, 16) and torch.equal(vx[1], val[16:32]) and torch.equal(vy[1], val[17:33])


def test_targets_read_accuracies_and_losses_with_their_direction():
    assert parse_target(0.9).name == "0.9" and parse_target(0.9).reached({"test_acc": 0.91})
    t = parse_target("val_loss<=1.9")
    assert (t.metric, t.op, t.value, t.name) == ("val_loss", "<=", 1.9, "val_loss<=1.9")
    assert t.reached({"val_loss": 1.89}) and not t.reached({"val_loss": 1.91}) and not t.reached({})
    for bad, msg in ((2.0, "test accuracy in"), ("val_loss>=1.9", "better lower"), ("loss<1", "write"),
                     ("val_f1<=1", "unknown")):
        with pytest.raises(TargetError, match=msg):
            parse_target(bad)


@pytest.mark.parametrize("override, key", [
    ({"model": "mlp"}, "model"),
    ({"dataset": "mnist", "model": "gpt-small"}, "dataset"),
    ({"block_size": 200_000}, "block_size"),
    ({"targets": [0.5]}, "targets"),
    ({"model": "gpt-huge"}, "model"),
])
def test_mismatched_workload_is_refused_before_any_work(override, key):
    base = {"dataset": "shakespeare", "model": "gpt-tiny"}
    with pytest.raises(ConfigError) as e:
        RunConfig.from_dict({**base, **override})
    assert e.value.key == key and "\n" not in str(e.value)


LM = {"dataset": "shakespeare", "model": "gpt-tiny", "workers": 2, "batch_size": 8, "steps": 12,
      "optimizer": "adamw", "lr": 0.003, "test_limit": 40, "eval_every": 0.003, "progress": False,
      "threads": 1, "clock": "model", "clock_sample_s": 0.001, "grad_clip": 1.0, "weight_decay": 0.1,
      "weight_decay_on": "matrices", "lr_schedule": "cosine", "lr_min": 0.0003, "warmup_steps": 3,
      "targets": ["val_loss<=4.1"]}
DETERMINISTIC = ("loss", "acc", "val_loss", "val_acc", "val_ppl", "bytes_sent", "t_virtual", "lr", "samples")


def _train(cfg: dict, out: Path) -> tuple[list[dict], dict]:
    from lowbw.train.launch import run

    run(RunConfig.from_dict(cfg), out, quiet=True)
    lines = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    return lines, json.loads((out / "summary.json").read_text())


@needs_corpus
@pytest.mark.slow
@pytest.mark.parametrize("scheme", [{"sync": "sync"}, {"sync": "diloco", "world_period": 4}])
def test_sim_and_procs_train_the_lm_identically(scheme, tmp_path, monkeypatch):
    monkeypatch.setenv("LOWBW_DATA_MIRROR", str(MIRROR))
    monkeypatch.setenv("LOWBW_DATA_DIR", str(tmp_path / "cache"))
    sim, s_sum = _train({**LM, **scheme}, tmp_path / "sim")
    procs, p_sum = _train({**LM, **scheme, "backend": "procs"}, tmp_path / "procs")
    assert len(sim) == len(procs) >= 3
    for a, b in zip(sim, procs):
        assert {k: a.get(k) for k in DETERMINISTIC} == {k: b.get(k) for k in DETERMINISTIC}
    assert s_sum["final_val_loss"] < math.log(65)  # it learned something beyond uniform guessing
    assert s_sum["final_val_ppl"] == pytest.approx(math.exp(s_sum["final_val_loss"]))
    assert s_sum["best_val_loss"] <= s_sum["final_val_loss"]
    assert s_sum["time_to_target"]["val_loss<=4.1"]["step"] > 0
    cfg = json.loads((tmp_path / "sim" / "config.json").read_text())
    assert cfg["data"]["kind"] == "text" and cfg["data"]["val"] == 40 and cfg["data"]["block_size"] == 32


@needs_corpus
@pytest.mark.slow
@pytest.mark.parametrize("scheme", [{"sync": "sync"}, {"sync": "diloco", "world_period": 4}])
def test_four_workers_train_the_lm_identically_on_sim_and_procs(scheme, tmp_path, monkeypatch):
    """With four workers the ring all-reduce sums segment j from rank j on: sim computes procs' numbers bit
    for bit when it sums in that order too (sim_dense: collective); direct's rank-ordered sums differ from
    step 2 on in float32's last bits (tests/train/test_loop.py), and training amplifies that."""
    monkeypatch.setenv("LOWBW_DATA_MIRROR", str(MIRROR))
    monkeypatch.setenv("LOWBW_DATA_DIR", str(tmp_path / "cache"))
    four = {**LM, **scheme, "workers": 4, "batch_size": 16, "steps": 8, "log_every": 2}
    sim, _ = _train({**four, "sim_dense": "collective"}, tmp_path / "sim")
    procs, _ = _train({**four, "backend": "procs"}, tmp_path / "procs")
    assert len(sim) == len(procs) >= 3
    for a, b in zip(sim, procs):
        assert {k: a.get(k) for k in DETERMINISTIC} == {k: b.get(k) for k in DETERMINISTIC}


@needs_corpus
def test_same_seed_same_lm_metrics_and_schedule(tmp_path, monkeypatch):
    monkeypatch.setenv("LOWBW_DATA_MIRROR", str(MIRROR))
    monkeypatch.setenv("LOWBW_DATA_DIR", str(tmp_path / "cache"))
    a, _ = _train({**LM, "steps": 6}, tmp_path / "a")
    b, _ = _train({**LM, "steps": 6}, tmp_path / "b")
    assert [{k: x.get(k) for k in DETERMINISTIC} for x in a] == [{k: x.get(k) for k in DETERMINISTIC} for x in b]
    # warm-up 3 steps from lr/10 to lr, then cosine to lr_min over the 6 steps
    lrs = {x["step"]: x["lr"] for x in a}
    assert lrs[6] == pytest.approx(0.0003)


def test_text_spec_is_pinned():
    s = TEXT_SPECS["shakespeare"]
    assert s.md5 == "6fb458f1232090904fb40fe944165e91" and s.urls[0].endswith("tinyshakespeare/input.txt")
