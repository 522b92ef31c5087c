"""python -m lowbw bench hooks: a tiny run of the harness (loopback emulation: runs without root)."""

from __future__ import annotations

import json

import pytest

from lowbw.bench import hooks as B


def test_hook_benchmark_writes_rows_provenance_and_targets(tmp_path, capsys):
    out = tmp_path / "hooks.json"
    rc = B.main(["--rates", "1gbit", "--steps", "1", "--params", "2e4", "--emulation", "loopback-ratelimit",
                 "--hooks", "torch-fp16", "fp16", "none", "powersgd", "topk", "artopk", "--out", str(out)])
    assert rc == 0
    res = json.loads(out.read_text())
    assert set(res["provenance"]) >= {"host", "cores", "torch", "commit", "date"}
    rows = {r["hook"]: r for r in res["rows"]}
    assert list(rows) == ["torch-fp16", "fp16", "none", "powersgd", "topk", "artopk"]
    for name in ("fp16", "none", "powersgd", "topk", "artopk"):  # the meter agrees with the payloads' sizes
        assert rows[name]["bytes_metered"] == rows[name]["bytes_expected"], name
    assert rows["torch-fp16"]["bytes_metered"] is None and rows["torch-fp16"]["step_s"] > 0
    assert rows["powersgd"]["bytes_metered"] < 0.2 * rows["none"]["bytes_metered"]
    t = res["targets"]["powersgd_bytes_vs_dense_1000mbit"]
    frac = rows["powersgd"]["bytes_metered"] / rows["none"]["bytes_expected"]
    assert t["fraction"] == pytest.approx(frac) and t["ok"] is (frac <= 0.05)
    assert {r["emulation"] for r in res["rows"]} == {"loopback-ratelimit"}
    table = capsys.readouterr().out
    assert "torch-fp16" in table and "target fp16_step_vs_torch_1000mbit" in table


def test_bad_arguments_are_named(capsys):
    assert B.main(["--hooks", "carrier-pigeon"]) == 2
    assert "unknown hook 'carrier-pigeon'" in capsys.readouterr().err
    assert B.main(["--steps", "0"]) == 2
    assert "--steps >= 1 (got 0)" in capsys.readouterr().err
