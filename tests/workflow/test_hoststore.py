"""lowbw.workflow.hoststore: the host's benchmark files kept in the repository with their provenance, refused
without it, and read by the report where the build did not measure them itself (its captions then say so)."""

from __future__ import annotations

import json

import pytest

from lowbw.report.experiment import Context
from lowbw.workflow import hoststore

COND = {"host": "box", "cores": 2, "date": "2026-11-27T15:00:00+00:00", "load_before": [3.0, 2.0, 1.0],
        "load_after": [5.0, 3.0, 1.0], "load1_max": 9.5, "steal": 0.0, "others_cores": 1.2, "busy": True,
        "reasons": ["other processes used 1.20 of 2 cores"]}
PROV = {"host": "box", "cpu": "Xeon", "cpu_count": 2, "git_commit": "abcdef1234567890", "date": "2026-11-27T15:00:00"}


def _bench(tmp_path, name, doc):
    (tmp_path / "bench").mkdir(parents=True, exist_ok=True)
    (tmp_path / "bench" / f"{name}.json").write_text(json.dumps(doc))


def test_keep_copies_and_indexes_with_provenance(tmp_path):
    _bench(tmp_path, "models", {"rows": [], "provenance": PROV, "conditions": COND})
    bench_prov = {"host": "box", "cores": 2, "cpu": "Xeon", "commit": "0123456789abcdef", "date": "2026-11-27"}
    _bench(tmp_path, "e2e", {"rows": [], "provenance": bench_prov, "conditions": {**COND, "busy": False, "reasons": []},
                             "appended": [{"conditions": {**COND, "load1_max": 12.0}}]})
    store = tmp_path / "store"
    out = hoststore.keep(["models", "e2e"], tmp_path / "bench", store)
    assert [p.name for p in out] == ["models.json", "e2e.json"]
    assert json.loads((store / "e2e.json").read_text())["provenance"] == bench_prov  # copied as it was
    idx = hoststore.load_index(store)
    assert idx["models"]["git_commit"] == PROV["git_commit"] and idx["models"]["host"] == "box"
    assert idx["models"]["busy"] and idx["models"]["load1_max"] == 9.5
    assert idx["e2e"]["git_commit"] == "0123456789abcdef" and idx["e2e"]["cores"] == 2  # bench_provenance's keys
    assert idx["e2e"]["repeats"] == 2 and idx["e2e"]["load1_max"] == 12.0 and idx["e2e"]["busy"]  # the repeat's


@pytest.mark.parametrize("doc,match", [
    (None, "no such measurement"),
    ({"rows": [], "conditions": COND}, "provenance lacks host, date, commit"),
    ({"rows": [], "provenance": PROV}, "no recorded machine conditions"),
])
def test_keep_refuses_before_writing(tmp_path, doc, match):
    _bench(tmp_path, "models", {"rows": [], "provenance": PROV, "conditions": COND})
    if doc is not None:
        _bench(tmp_path, "e2e", doc)
    with pytest.raises(hoststore.HostStoreError, match=match):
        hoststore.keep(["models", "e2e"], tmp_path / "bench", tmp_path / "store")
    assert not (tmp_path / "store").exists()  # the good file was not written either
    with pytest.raises(hoststore.HostStoreError, match="unknown host measurement"):
        hoststore.keep(["e99"], tmp_path / "bench", tmp_path / "store")


def test_report_reads_this_machine_first_then_the_store(tmp_path):
    from lowbw.report.e3 import E3

    row = {"model": "resnet20", "params": 270000, "grad_bytes": 1080000, "sample_s": 0.01, "ref_global_batch": 128,
           "ref_steps": 64000}
    store = tmp_path / "store"
    _bench(tmp_path / "src", "models", {"rows": [row], "provenance": PROV, "conditions": COND})
    hoststore.keep(["models"], tmp_path / "src" / "bench", store)
    runs = tmp_path / "runs"
    runs.mkdir(exist_ok=True)
    cfg = {"report": {"bandwidths_mbit": [10]}, "bench": {"stored": str(store)}}
    assert E3.stats(Context({"report": {"bandwidths_mbit": [10]}}, runs, tmp_path / "o")) is None  # no store named
    tab = E3.table(E3.stats(Context(cfg, runs, tmp_path / "o")))
    assert f"Source: {store}/models.json, kept in the repository" in tab.replace(r"\_", "_")
    assert "Measured on box (commit abcdef123456), 2026-11-27T15:00 UTC" in tab
    mine = {"rows": [row], "provenance": {**PROV, "host": "mine"}, "conditions": {**COND, "host": "mine"}}
    _bench(runs, "models", mine)
    tab = E3.table(E3.stats(Context(cfg, runs, tmp_path / "o")))
    assert "measured on this build's machine" in tab and "Measured on mine" in tab and "kept in" not in tab
