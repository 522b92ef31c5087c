"""lowbw.workflow.store: GPU runs kept in the repository in small text form, refused when incomplete or not on CUDA,
loaded back as lowbw.runs.results loads runs/, and shown in the report labelled with their GPU and date.

No GPU here: the accepted runs are a real tiny CPU run whose config.json is then marked by hand as if it had
run on CUDA (a test fixture, labelled so in its device name). The store's rule reads the recorded device, so
this route does not weaken the refusal of real CPU runs (tested first, on the unmarked run).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from lowbw.cli import main as cli_main
from lowbw.report import gpu as report_gpu
from lowbw.runs.io import atomic_write_json, read_jsonl
from lowbw.runs.results import load_runs
from lowbw.workflow.store import StoreError, add, check_run, load_store, thin

FAKE_GPU = "NVIDIA H100 80GB HBM3 (test fixture: a CPU run marked as CUDA)"
TINY = dict(dataset="synthetic", model="mlp", workers=2, batch_size=32, steps=40, log_every=1, progress=False,
            train_limit=400, test_limit=100, eval_every=0.5, targets=[0.05], clock="model", clock_sample_s=1e-4)


@pytest.fixture(scope="module")
def cpu_run(tmp_path_factory):
    from lowbw.train.launch import run

    d = tmp_path_factory.mktemp("runs") / "e4_gpu_dense" / "method~dense" / "seed~0"
    run({**TINY, "name": "dense"}, d)
    return d


def as_cuda(src, dst):
    """A copy of run ``src`` whose config.json says it ran on CUDA (the test-only route; see the docstring)."""
    shutil.copytree(src, dst)
    c = json.loads((dst / "config.json").read_text())
    c["device"] = "cuda:0"
    c["config"]["device"] = "cuda"
    c["provenance"].update(cuda=FAKE_GPU, torch_version="2.11.0+cu130")
    if dst.name.startswith("seed~"):  # copies stand for the other seeds of the grid
        c["seed"] = c["config"]["seed"] = int(dst.name.split("~")[1])
    atomic_write_json(dst / "config.json", c)
    return dst


def test_cpu_and_incomplete_runs_are_refused_before_anything_is_written(cpu_run, tmp_path):
    store = tmp_path / "store"
    with pytest.raises(StoreError, match=r"device='cpu'.*not CUDA"):
        add([cpu_run], store)
    ok = as_cuda(cpu_run, tmp_path / "runs" / "e4_gpu_dense" / "method~dense" / "seed~1")
    bad = as_cuda(cpu_run, tmp_path / "runs" / "e4_gpu_dense" / "method~dense" / "seed~2")
    (bad / "summary.json").unlink()
    with pytest.raises(StoreError, match=r"seed~2: incomplete \(no summary.json\)"):
        add([ok, bad], store)  # the good one first: still nothing written
    assert not store.exists()
    s = json.loads((ok / "summary.json").read_text())
    stopped = as_cuda(cpu_run, tmp_path / "runs" / "x" / "method~dense" / "seed~3")
    atomic_write_json(stopped / "summary.json", {**s, "complete": False, "stopped": "max_wall_s"})
    with pytest.raises(StoreError, match="complete=false, stopped='max_wall_s'"):
        check_run(stopped)
    cut = as_cuda(cpu_run, tmp_path / "runs" / "x" / "method~dense" / "seed~4")
    (cut / "metrics.jsonl").write_text("".join((cut / "metrics.jsonl").read_text().splitlines(True)[:-1]))
    with pytest.raises(StoreError, match="corrupt"):
        check_run(cut)
    with pytest.raises(StoreError, match="not a run directory"):
        check_run(tmp_path)
    # the CLI: one line on stderr, exit status 2
    assert cli_main(["store", "add", str(cpu_run), "--to", str(store)]) == 2
    assert not store.exists()


def test_store_format_and_loader(cpu_run, tmp_path):
    src = tmp_path / "runs"
    run = as_cuda(cpu_run, src / "e4_gpu_dense" / "method~dense" / "seed~0")
    store = tmp_path / "paper" / "measured" / "gpu"
    (dest,) = add([run], store, max_lines=12)
    assert dest == store / "e4_gpu_dense" / "method~dense" / "seed~0"
    assert sorted(p.name for p in dest.iterdir()) == ["config.json", "metrics.jsonl", "provenance.json",
                                                      "summary.json"]
    lines, orig = read_jsonl(dest / "metrics.jsonl"), read_jsonl(run / "metrics.jsonl")
    assert len(orig) > 12 and len(lines) == 12 and lines[0] == orig[0] and lines[-1] == orig[-1]
    assert [ln["step"] for ln in lines] == sorted(ln["step"] for ln in lines)
    evals = [ln for ln in orig if ln.get("test_acc") is not None]
    assert all(e in lines for e in evals)  # every evaluation is kept (time to accuracy needs them)
    prov = json.loads((dest / "provenance.json").read_text())
    assert prov["gpu"] == FAKE_GPU and prov["cuda_version"] == "13.0" and prov["cuda_version_from"] == "torch build tag"
    assert prov["measured_date"] and prov["git_commit"] and prov["metrics_thinning"]["source_lines"] == len(orig)
    # the run recorded when it ran (config.json's provenance); older runs fall back to summary.json's mtime
    assert prov["measured_date_from"] == "provenance"
    assert prov["measured_at"] == json.loads((run / "config.json").read_text())["provenance"]["date"]
    c = json.loads((run / "config.json").read_text())
    c["provenance"]["date"] = "2026-11-22T10:00:00+00:00"  # a run whose provenance records its date
    atomic_write_json(run / "config.json", c)
    (dest,) = add([run], store, max_lines=12)
    prov = json.loads((dest / "provenance.json").read_text())
    assert prov["measured_date"] == "2026-11-22" and prov["measured_date_from"] == "provenance"
    summ = json.loads((dest / "summary.json").read_text())
    assert summ["source_metrics_lines"] == len(orig) and summ["metrics_lines"] == 12
    # the loader: load_runs' row of the source run, plus provenance columns
    got, want = load_store(store), load_runs(src)
    assert len(got) == 1 and got.loc[0, "gpu"] == FAKE_GPU and got.loc[0, "measured_date"] == prov["measured_date"]
    sealed = {"metrics_lines", "metrics_sha256", "source_metrics_lines", "source_metrics_sha256"}
    for col in set(want.columns) - sealed:
        assert got.loc[0, col] == want.loc[0, col], col
    index = json.loads((store / "index.json").read_text())
    assert index["runs"][0]["run"] == "e4_gpu_dense/method~dense/seed~0"
    # storing again replaces the run (a rerun of the profile)
    add([run], store)
    assert len(read_jsonl(dest / "metrics.jsonl")) == len(orig) and len(load_store(store)) == 1


def test_thin_keeps_first_last_and_evaluations():
    lines = [{"step": i, "test_acc": (0.1 if i % 50 == 0 else None)} for i in range(1000)]
    kept = thin(lines, 30)
    steps = [ln["step"] for ln in kept]
    assert len(kept) == 30 and steps[0] == 0 and steps[-1] == 999 and steps == sorted(set(steps))
    assert {i for i in range(0, 1000, 50)} <= set(steps)
    assert thin(lines[:5], 30) == lines[:5]
    with pytest.raises(ValueError, match="max_lines=1"):
        thin(lines, 1)


def test_report_shows_stored_gpu_runs_and_builds_without(cpu_run, tmp_path):
    src = tmp_path / "runs"
    runs = [as_cuda(cpu_run, src / "e4_gpu_dense" / "method~dense" / f"seed~{s}") for s in (0, 1)]
    store = tmp_path / "store"
    out = tmp_path / "generated"
    assert report_gpu.write(out, store) == [] and not (out / "gpu.tex").exists()  # no store: no file
    add(runs, store)
    files = report_gpu.write(out, store)
    tex = (out / "gpu.tex").read_text()
    date = json.loads((store / "e4_gpu_dense/method~dense/seed~0/provenance.json").read_text())["measured_date"]
    assert f"measured on {FAKE_GPU} on {date} (torch 2.11.0+cu130, CUDA 13.0)" in tex
    assert r"\label{tab:gpu}" in tex and "dense & -- & 40 & 2 &" in tex  # an image model: no dropout
    assert (out / "stats" / "gpu_methods.csv") in files
    shutil.rmtree(store)
    assert report_gpu.write(out, store) == [] and not (out / "gpu.tex").exists()  # an emptied store: removed


def test_the_kept_language_model_runs_are_read_by_their_loss():
    """The repository's GPU store holds gpt-medium runs: the GPU table reads them by validation loss, and its
    steps to the target are each run's own time_to_target record."""
    import json

    store = Path(__file__).resolve().parents[2] / "paper" / "measured" / "gpu"
    runs = sorted(store.glob("gpu_lm/method~*/seed~*/summary.json"))
    if not runs:
        pytest.skip("no language-model runs in the GPU store")
    st = report_gpu.stats(store)
    lm = st.tables["runs"][st.tables["runs"]["dataset"] == "shakespeare"]
    assert set(lm["metric"]) == {"val_loss"} and len(lm) == len(runs)
    for p in runs:
        s = json.loads(p.read_text())
        row = lm[lm["run"].str.endswith(str(p.parent.relative_to(store / "gpu_lm")))].iloc[0]
        assert row["final"] == s["final_val_loss"] and row["best"] == s["best_val_loss"]
        hit = (s["time_to_target"] or {}).get("val_loss<=1.6")
        assert (row["steps_to_target"] == hit["step"]) if hit else row["steps_to_target"] != row["steps_to_target"]
    assert "validation loss in nats/char" in report_gpu.table(st)


def test_cpu_runs_are_kept_only_when_asked(cpu_run, tmp_path):
    """``--cpu`` keeps a run measured on a CPU (the medium profile's anchor runs the default paper quotes); without
    it the store stays the GPU store."""
    to = tmp_path / "anchor"
    with pytest.raises(StoreError, match="not CUDA"):
        add([cpu_run], to)
    assert cli_main(["store", "add", "--cpu", "--to", str(to), str(cpu_run)]) == 0
    df = load_store(to)
    assert len(df) == 1 and df["gpu"].iloc[0] is None


def test_the_kept_anchor_runs_are_what_e4_quotes():
    """The repository keeps the gpt-small anchor's three seeds (medium profile, nanoGPT's CPU recipe): each ran
    2,000 steps and its final validation loss is within 0.05 of nanoGPT's 1.88, as E4's prose says when it is."""
    from lowbw.report import e4
    from lowbw.workflow.store import ANCHOR_STORE

    root = Path(__file__).resolve().parents[2] / ANCHOR_STORE
    df = load_store(root)  # committed with the repository: an empty store fails below
    assert set(df["model"]) == {"gpt-small"} and set(df["steps"]) == {2000} and len(df) == 3
    numbers = e4._anchor_numbers("EFourLm", df[["run", "seed", "model", "steps", "final_val_loss", "best_val_loss"]])
    mean = df["final_val_loss"].mean()
    assert numbers["EFourLmAnchorVerdict"].startswith("within" if abs(mean - 1.88) <= 0.05 else "outside")
