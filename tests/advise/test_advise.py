"""lowbw advise: inputs refused in one line, exact bytes, the step-time cases, the efficiency look-up, and the
ranking's two ends (a fast link picks a dense baseline, a slow one a method that sends less)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import textwrap

import pytest

from lowbw.advise import efficiency
from lowbw.advise.candidates import candidates, exchange
from lowbw.advise.efficiency import lookup
from lowbw.advise.workload import from_model, transformer_shapes

PY = [sys.executable, "-m", "lowbw", "advise"]


def _table(tmp_path, ratios: dict[str, float | None]):
    """An efficiency table for mlp/mnist at 4 workers, dense at 100 steps; None: never reached."""
    rows = [{"experiment": "e9_diloco", "dataset": "mnist", "model": "mlp", "kind": "image", "metric": "test_acc",
             "direction": "up", "target": 0.9, "workers": 4, "method": m, "seeds": 2,
             "seeds_reached": 0 if r is None else 2, "steps_mean": math.nan if r is None else 100 * r,
             "dense_steps_mean": 100.0, "steps_ratio": math.nan if r is None else r} for m, r in ratios.items()]
    return efficiency.write(rows, {"source": "test"}, tmp_path / "eff.csv")


def _run(*args, env_cache=None):
    return subprocess.run([*PY, *args], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("args, word", [
    (["--model", "mlp", "--workers", "4", "--rate", "10"], "'10'"),
    (["--model", "mlp", "--workers", "4", "--rate", "10mbps"], "10mbps"),
    (["--model", "nosuchnet", "--workers", "4", "--rate", "10mbit"], "nosuchnet"),
    (["--model", "mlp", "--workers", "0", "--rate", "10mbit"], "--workers"),
    (["--model", "mlp", "--workers", "2", "--rates", "10mbit", ], "--rates"),
    (["--model-file", "nofile.py:build", "--workers", "2", "--rate", "10mbit", "--step-ms", "5"], "nofile.py"),
])
def test_bad_input_is_one_line_naming_it(args, word):
    r = _run(*args)
    assert r.returncode == 2 and r.stdout == ""
    assert len(r.stderr.strip().splitlines()) == 1 and word in r.stderr


def test_model_file_outside_lowbw(tmp_path):
    f = tmp_path / "mine.py"
    f.write_text(textwrap.dedent("""
        import torch
        def build():
            return torch.nn.Sequential(torch.nn.Linear(100, 50), torch.nn.ReLU(), torch.nn.Linear(50, 3))
    """))
    r = _run("--model-file", f"{f}:build", "--workers", "4", "--rate", "100mbit", "--step-ms", "5", "--json",
             "--efficiency", str(_table(tmp_path, {"dense": 1.0})))
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["inputs"]["params"] == 100 * 50 + 50 + 50 * 3 + 3
    dense = next(x for x in out["ranking"] if x["method"] == "dense")
    assert dense["bytes_per_step"] == 4 * out["inputs"]["params"]
    r = _run("--model-file", f"{f}:nothere", "--workers", "4", "--rate", "100mbit", "--step-ms", "5")
    assert r.returncode == 2 and "nothere" in r.stderr


def test_bytes_are_the_compressors_payloads():
    import torch

    from lowbw.compress import make

    w = from_model("mlp", step_ms=1.0)
    by = {c.name: c for c in candidates()}
    fp16 = exchange(by["fp16"], w.shapes)
    assert fp16.bytes_sent == 2 * w.params  # fp16: two bytes a value, one part per tensor
    topk = exchange(by["topk1"], w.shapes)
    comp = make("topk", ratio=0.01)
    want = sum(comp.compress(torch.randn(s)).data_nbytes for _, s in w.shapes)
    assert topk.bytes_sent == want
    assert exchange(by["dense"], w.shapes).bytes_sent == 4 * w.params


def test_transformer_shapes_match_the_count():
    n = sum(math.prod(s) for _, s in transformer_shapes(1.3e9))
    assert abs(n / 1.3e9 - 1) < 0.1


def test_lookup_tiers(tmp_path):
    rows = efficiency.read(_table(tmp_path, {"dense": 1.0, "topk1": 1.5, "local16": None}))
    e = lookup(rows, "topk1", "mlp", "image", 4, "test_acc", 0.9)
    assert (e.ratio, e.confidence) == (1.5, "measured")
    assert lookup(rows, "topk1", "mlp", "image", 8, "test_acc", 0.9).confidence == "extrapolated"
    assert lookup(rows, "topk1", "resnet20", "image", 4, "test_acc", 0.9).confidence == "extrapolated"
    assert lookup(rows, "local16", "mlp", "image", 4, "test_acc", 0.9).ratio == math.inf
    assert lookup(rows, "powersgd", "mlp", "image", 4, "test_acc", 0.9).confidence == "bytes only"


def test_fast_link_picks_dense_slow_link_sends_less(tmp_path):
    eff = str(_table(tmp_path, {"dense": 1.0, "fp16": 1.0, "topk1": 1.3, "diloco64": 1.2, "local16": 1.5,
                                "powersgd": 1.4}))
    fast = json.loads(_run("--model", "resnet20", "--workers", "8", "--rate", "10gbit", "--step-ms", "30",
                           "--json", "--efficiency", eff).stdout)
    assert fast["ranking"][0]["method"] in ("dense", "fp16", "bf16")
    slow = json.loads(_run("--model", "resnet20", "--workers", "8", "--rate", "10mbit", "--step-ms", "30",
                           "--json", "--efficiency", eff).stdout)
    top = slow["ranking"][0]
    assert top["method"] not in ("dense", "fp16", "bf16")
    times = [x["predicted_ttt_s"] for x in slow["ranking"] if x["confidence"] != "bytes only"]
    assert times == sorted(times)
    assert {"method", "predicted_step_s", "predicted_steps_ratio", "predicted_ttt_s", "confidence"} <= set(top)


def test_table_fits_100_columns(tmp_path):
    r = _run("--model", "resnet20", "--workers", "8", "--rate", "10mbit", "--step-ms", "30",
             "--efficiency", str(_table(tmp_path, {"dense": 1.0})))
    assert r.returncode == 0, r.stderr
    table = r.stdout.split("\nwhy:")[0].splitlines()[2:]
    assert table and all(len(ln) <= 100 for ln in table)
    assert "communication is" in r.stdout


def test_gpt_small():
    r = _run("--model", "gpt-small", "--workers", "8", "--rate", "10mbit", "--step-ms", "35", "--target-loss", "1.9",
             "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["inputs"]["kind"] == "lm" and out["inputs"]["metric"] == "val_loss"
    assert 5e5 < out["inputs"]["params"] < 2e6


def test_efficiency_rows_read_loss_targets_and_only_configured_ones():
    """A loss target's name (``val_loss<=2``) gives its metric, direction and value; a run's missing time to a
    target it was not configured with is not a "did not reach"."""
    import pandas as pd

    from lowbw.advise.efficiency import rows_from_runs, target_of

    assert target_of("0.9") == ("test_acc", "up", 0.9)
    assert target_of("val_loss<=2") == ("val_loss", "down", 2.0)
    runs = pd.DataFrame([
        {"experiment": "e9_lm", "dataset": "shakespeare", "model": "gpt-small", "workers": 4, "method": m,
         "targets": '["val_loss<=2.0"]', "ttt.val_loss<=2.step": s, "ttt.0.9.step": None}
        for m, s in (("dense", 100.0), ("diloco16", 150.0))]
        + [{"experiment": "e9_diloco", "dataset": "mnist", "model": "mlp", "workers": 4, "method": "dense",
            "targets": "[0.9]", "ttt.val_loss<=2.step": None, "ttt.0.9.step": 40.0}])
    rows = rows_from_runs(runs)
    lm = [r for r in rows if r["experiment"] == "e9_lm"]
    assert {(r["method"], r["metric"], r["direction"], r["target"], r["steps_ratio"]) for r in lm} == {
        ("dense", "val_loss", "down", 2.0, 1.0), ("diloco16", "val_loss", "down", 2.0, 1.5)}
    assert [(r["metric"], r["target"]) for r in rows if r["experiment"] == "e9_diloco"] == [("test_acc", 0.9)]


def _stored_run(root, exp, method, seed, step):
    """A complete run directory as the store keeps it: config, summary with one time to target."""
    d = root / exp / f"method~{method}" / f"seed~{seed}"
    d.mkdir(parents=True)
    cfg = {"dataset": "shakespeare", "model": "gpt-mini", "workers": 4, "seed": seed, "targets": ["val_loss<=2.2"]}
    (d / "config.json").write_text(json.dumps(cfg))
    tt = {"val_loss<=2.2": {"step": step}} if step else {}
    (d / "summary.json").write_text(json.dumps({"complete": True, "step": 1024, "time_to_target": tt}))
    (d / "metrics.jsonl").write_text(json.dumps({"step": 1024, "loss": 2.0}) + "\n")


def test_the_table_reads_the_stored_converged_grid_without_its_sweep(tmp_path):
    """A fresh clone's table has the converged-regime LM rows from the store: a ``-tuned`` preset counts as its
    method, the sweep and the curve (no comparison) are left out, and an experiment under runs/ replaces its
    stored copy."""
    store, runs = tmp_path / "store", tmp_path / "runs"
    for seed, (d, s) in enumerate([(400, 200), (600, None)]):
        _stored_run(store, "e9_lmc", "dense-tuned", seed, d)
        _stored_run(store, "e9_lmc", "sparseloco16-tuned", seed, s)
    _stored_run(store, "e9_lmc_sweep", "sparseloco16+lrx2", 0, 100)
    _stored_run(store, "e9_lmc_curve", "dense", 0, 300)
    runs.mkdir()
    rows, prov = efficiency.build(runs, stores=(store,))
    assert {r["experiment"] for r in rows} == {"e9_lmc"} and str(store) in prov["source"]
    sl = next(r for r in rows if r["method"] == "sparseloco16")
    assert (sl["seeds"], sl["seeds_reached"], sl["steps_ratio"]) == (2, 1, 200 / 500)
    _stored_run(runs, "e9_lmc", "dense-tuned", 0, 300)  # a local rerun replaces the stored experiment
    rows, _ = efficiency.build(runs, stores=(store,))
    assert {(r["method"], r["dense_steps_mean"]) for r in rows} == {("dense", 300.0)}


def _row(exp, method, target, seeds, reached, steps_mean, dense_mean, steps_max, model="gpt-mini", workers=4):
    ratio = steps_mean / dense_mean if reached and dense_mean == dense_mean else math.nan
    return {"experiment": exp, "dataset": "shakespeare", "model": model, "kind": "lm", "metric": "val_loss",
            "direction": "down", "target": target, "workers": workers, "method": method, "seeds": seeds,
            "seeds_reached": reached, "steps_mean": steps_mean, "dense_steps_mean": dense_mean,
            "steps_ratio": ratio, "steps_max": steps_max}


def test_a_short_run_that_missed_the_target_bounds_the_ratio_it_does_not_end_it():
    """DiLoCo missed 2.4 in 250-step runs (dense took 200) but measured 1.5x at 2.5: the ratio at 2.4 is the
    1.5x raised to the bound the short runs give, (250 x 3) / 3 / 200 = 1.25 -> 1.5; not 'never'."""
    rows = [_row("e10", "diloco16", 2.4, 3, 0, math.nan, 200.0, 250.0),
            _row("e10", "diloco16", 2.5, 3, 3, 150.0, 100.0, 250.0)]
    e = lookup(rows, "diloco16", "gpt-mini", "lm", 4, "val_loss", 2.4)
    assert e.ratio == pytest.approx(1.5) and e.confidence == "extrapolated" and "within 250 steps" in e.basis
    assert e.failed_within == 250.0  # the user's own model and workers: a 250-step budget is not enough
    rows[0]["steps_max"] = 1000.0  # a long run that missed: the bound (1000 / 200 = 5x) wins
    assert lookup(rows, "diloco16", "gpt-mini", "lm", 4, "val_loss", 2.4).ratio == pytest.approx(5.0)
    # one seed of three missed within 400 steps, two took 300: at least (600 + 400) / 3 / 200
    rows = [_row("e9", "topk1", 2.4, 3, 2, 300.0, 200.0, 400.0), _row("e4", "topk1", 2.6, 3, 3, 240.0, 200.0, 400.0)]
    assert lookup(rows, "topk1", "gpt-mini", "lm", 4, "val_loss", 2.4).ratio == pytest.approx(1000 / 3 / 200)
    # no row measures it, but two seeds reached: the bound itself, said to be one
    e = lookup(rows[:1], "topk1", "gpt-mini", "lm", 4, "val_loss", 2.4)
    assert e.ratio == pytest.approx(1000 / 3 / 200) and e.basis.startswith("at least")
    # as near as a row that measures 1.2x, a short run where no seed arrived within 250 steps (dense: 140):
    # at least 250 / 140, not the 1.2x of the run that was long enough
    rows = [_row("e10", "diloco16", 2.4, 3, 0, math.nan, 140.0, 250.0),
            _row("e9c", "diloco16", 2.4, 3, 3, 120.0, 100.0, 1024.0)]
    e = lookup(rows, "diloco16", "gpt-mini", "lm", 4, "val_loss", 2.4)
    assert e.ratio == pytest.approx(250 / 140) and e.basis.startswith("at least") and "1.20x" in e.basis
    # no seed of the method reached any target: never
    none = [_row("e9", "topk1", 2.4, 3, 0, math.nan, 200.0, 400.0)]
    assert lookup(none, "topk1", "gpt-mini", "lm", 4, "val_loss", 2.4).ratio == math.inf


def test_a_budget_ranks_methods_that_need_more_steps_after_those_that_fit(tmp_path):
    from lowbw.advise.rank import rank
    from lowbw.net.costlinks import WorkerLink

    rows = [_row("e", "dense", 2.4, 3, 3, 200.0, 200.0, 400.0), _row("e", "diloco64", 2.4, 3, 3, 500.0, 200.0, 600.0)]
    w = from_model("gpt-mini", 16, step_ms=30)
    links = tuple(WorkerLink(1e6, 1e6, 0.0, 0.0) for _ in range(4))
    free = rank(w, links, rows, "val_loss", 2.4, only=("dense", "diloco64"))
    assert [a.candidate.name for a in free][0] == "diloco64"  # 1 Mbit/s: 64x fewer bytes at 2.5x the steps
    tight = rank(w, links, rows, "val_loss", 2.4, only=("dense", "diloco64"), budget=400)
    assert [a.candidate.name for a in tight] == ["dense", "diloco64"] and not tight[1].reaches


# the advisor's families before they were derived (commit d7c92da's candidates.FAMILIES, in its order)
OLD_FAMILIES = {
    "dense": "dense", "fp16": "precision", "bf16": "precision",
    "q8lin": "quantize", "q8nl": "quantize", "q16lin": "quantize", "qsgd": "quantize", "terngrad": "quantize",
    "twobit": "quantize", "thresh": "sparsify", "topk10": "sparsify", "topk1": "sparsify", "topk01": "sparsify",
    "randk1": "sparsify", "dgc": "sparsify", "artopk": "sparsify", "powersgd": "lowrank", "signsgd": "sign",
    "efsign": "sign", "onebit": "sign", "local4": "local", "local16": "local", "hh2": "hierarchical",
    "diloco16": "diloco", "diloco64": "diloco", "diloco16q8": "diloco", "diloco16q4": "diloco",
    "sdiloco16": "streaming", "demo": "demo", "sparseloco16": "sparseloco",
}


def test_families_are_derived_from_the_registry_and_the_scheme(monkeypatch):
    from lowbw.advise import candidates as cand

    assert {c.name: c.family for c in candidates()} == OLD_FAMILIES
    assert [c.name for c in candidates()] == list(OLD_FAMILIES)
    # a compressor the advisor has never heard of by name: its registration decides
    table = {**cand._compressors(), "newq": {"family": "quantize", "whole_method": False, "value_sized": False},
             "newm": {"family": "sparseloco", "whole_method": True, "value_sized": False}}
    monkeypatch.setattr(cand, "_compressors", lambda: table)
    assert cand.family_of({"compressor": "newq"}) == "quantize"
    assert cand.family_of({"compressor": "newq", "sync": "diloco", "world_period": 16}) == "diloco"
    assert cand.family_of({"compressor": "newq", "sync": "diloco", "diloco_fragments": 4}) == "streaming"
    assert cand.family_of({"compressor": "newm", "sync": "diloco"}) == "sparseloco"  # a whole method
    assert cand.family_of({"sync": "local", "world_period": 4}) == "local"
    with pytest.raises(ValueError, match="unknown compressor name='nope'"):
        cand.family_of({"compressor": "nope"})
