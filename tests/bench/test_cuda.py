"""lowbw.bench.cuda (the GPU path checks) runs its same checks on host tensors here, so it cannot rot in CI."""

from __future__ import annotations

import pytest

from lowbw.bench.cuda import check_world, main


def test_cuda_checks_pass_on_host_tensors():
    r = check_world("gloo", 2, ["ring", "butterfly", "native"], time_mb=1, reps=1, device_type="cpu")
    assert r["ok"], r.get("errors") or r
    assert r["allreduce_checks"] == 3 * 3 * 3 * 2  # algorithms x dtypes x sizes x ranks
    assert {a["compressor"] for a in r["aggregate"]} == {"none", "fp16", "blockwise", "topk", "powersgd"}
    assert r["ddp"]["bytes_sent"] > 0 and set(r["times"]) == {"ring", "butterfly", "native"}


def test_cuda_bench_refuses_bad_worlds():
    with pytest.raises(SystemExit):
        main(["--worlds", "mpi:2"])
