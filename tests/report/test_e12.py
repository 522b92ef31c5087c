"""E12 (Charles et al.'s DiLoCo scaling at micro scale): on runs built to follow a known law, the report recovers
the law (per-column and joint fits), chooses its words from the numbers (the gap shrinks or grows, the outer lr
stays or moves), works on a subset of the campaign, and writes only catalogued macros."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest

from lowbw.report import e12
from lowbw.report.catalog import check_numbers
from lowbw.report.experiment import Context

SIZES = {"gpt-tiny": 28864, "gpt-mini": 106880, "gpt-mid": 344832}
EXP = {"gpt-tiny": "tiny", "gpt-mini": "mini", "gpt-mid": "mid"}


def _loss(n: float, m: int | None, seed: int, gap_exp: float) -> float:
    """DP: 20 N^-0.1; DiLoCo at M: DP x (1 + 0.01 M) N^gap_exp / 30000^gap_exp (the gap moves as N^gap_exp)."""
    dp = 20 * n ** -0.1 * (1 + 0.001 * (seed - 1))
    return dp if m is None else dp * (1 + 0.01 * m) * (n / 3e4) ** gap_exp


def _runs(gap_exp: float, outer_best: dict[str, float], models=tuple(SIZES), seeds=(0, 1, 2)):
    rows, mets = [], []

    def add(exp, run, model, method, workers, seed, loss, outer_lr=0.8, lr=0.004):
        rows.append({"experiment": exp, "run": run, "source": "store", "method": method, "model": model,
                     "params": SIZES[model], "steps": 600, "batch_size": 16, "block_size": 64, "seed": seed,
                     "workers": workers, "final_val_loss": loss, "outer_lr": outer_lr, "lr": lr, "complete": True,
                     "measured_date": "2026-11-27"})
        mets.extend({"experiment": exp, "run": run, "source": "store", "step": s, "val_loss": v}
                    for s, v in ((0, 4.2), (300, loss + 0.2), (600, loss)))

    for model in models:
        z = EXP[model]
        for seed in seeds:
            add(f"e12_{z}", f"method~dense/seed~{seed}", model, "dense", 1, seed, _loss(SIZES[model], None, seed, 0))
            for m in (1, 2, 4, 8):
                add(f"e12_{z}", f"method~dl30m{m}/seed~{seed}", model, f"dl30m{m}", m, seed,
                    _loss(SIZES[model], m, seed, gap_exp))
        # the outer lr at M=4: the pick 0.8 (the main run) and 0.6, 1.0, the best `outer_best[model]`
        for lr in (0.6, 1.0):
            base = _loss(SIZES[model], 4, 0, gap_exp)
            add(f"e12_outer_{z}", f"outer_lr~{lr:g}/seed~0", model, None, 4, 0,
                base - 0.01 if lr == outer_best[model] else base + 0.01, outer_lr=lr)
        add(f"e12_comp_{z}", "method~topk1/seed~0", model, "topk1", 4, 0, _loss(SIZES[model], 4, 0, 0))
        for lr in (0.002, 0.004, 0.008):
            add(f"e12_lr_{z}", f"method~{z}_lr{lr:g}/seed~0", model, f"{z}_lr{lr:g}", 1, 0,
                _loss(SIZES[model], None, 1, 0) + (0 if lr == 0.004 else 0.05), lr=lr)
    return pd.DataFrame(rows), pd.DataFrame(mets)


def _stats(monkeypatch, gap_exp, outer_best, **kw):
    monkeypatch.setattr(e12, "_load", lambda ctx: _runs(gap_exp, outer_best, **kw))
    return e12.stats(Context({}, Path("nonexistent"), Path("nonexistent")))


def test_a_shrinking_gap_is_recovered_and_said(monkeypatch):
    st = _stats(monkeypatch, -0.05, {"gpt-tiny": 0.8, "gpt-mini": 0.8, "gpt-mid": 0.8})
    fits = st.tables["fits"].set_index("column")
    assert fits.loc["DP", "alpha"] == pytest.approx(-0.1, abs=1e-6)
    assert fits.loc["DP", "alpha_lo"] < -0.1 < fits.loc["DP", "alpha_hi"]
    gaps = st.tables["gaps"].set_index("column")
    assert gaps.loc["M=4", "b"] == pytest.approx(-0.05, abs=1e-6) and gaps.loc["M=4", "word"] == "shrinks"
    t4 = st.tables["table4"].set_index(["model", "column"])
    assert t4.loc[("gpt-mid", "DP"), "loss_mean"] == pytest.approx(20 * 344832 ** -0.1, rel=1e-6)
    assert t4.loc[("gpt-mid", "DP"), "seeds"] == 3
    nums = e12.numbers(st)
    check_numbers("e12", nums)
    assert nums["ETwelveAgreement"] == "agrees with"
    assert nums["ETwelveOuterVerdict"].startswith("stays at 0.8 at every size")
    assert nums["ETwelveInnerLr"] == "gpt-tiny 0.004, gpt-mini 0.004 and gpt-mid 0.004"
    assert nums["ETwelveStored"].startswith(f"{len(_runs(-0.05, {m: 0.8 for m in SIZES})[0])} of ")
    assert "tab:e12" in e12.table(st)
    e12.figure(st)


def test_a_growing_gap_and_a_moving_outer_lr_are_said(monkeypatch):
    st = _stats(monkeypatch, 0.05, {"gpt-tiny": 0.8, "gpt-mini": 0.8, "gpt-mid": 1.0})
    nums = e12.numbers(st)
    assert nums["ETwelveAgreement"] == "disagrees with" and nums["ETwelveGapVerdict"].startswith("grows")
    assert nums["ETwelveOuterVerdict"].startswith("moves with size") and "gpt-mid 1" in nums["ETwelveOuterVerdict"]
    assert nums["ETwelveReason"].startswith("Its likely reasons: scale")
    # the joint fit's exponent of M: the loss grows as (1 + 0.01 M), i.e. about M^0.02 over 1..8
    assert 0 < st.tables["joint"].iloc[0]["beta"] < 0.05


def test_a_subset_is_reported_with_its_counts(monkeypatch):
    st = _stats(monkeypatch, -0.05, {m: 0.8 for m in SIZES}, models=("gpt-tiny",), seeds=(0,))
    nums = e12.numbers(st)
    check_numbers("e12", nums)
    assert nums["ETwelveGapVerdict"].startswith("cannot be told yet") and nums["ETwelveCells"] == "5 of 5"
    assert math.isnan(st.tables["fits"].set_index("column").loc["DP", "alpha"])
    e12.table(st)
    e12.figure(st)
