"""python -m lowbw bench loss: a message's extra time under random loss against the clock's model -- the rows
from measured cells, bad flags refused before any work, and a short run on the testbed (root)."""

from __future__ import annotations

import json
import statistics

import pytest

from lowbw.bench import loss as bench
from lowbw.net import tcploss
from tests.conftest import netns_tun


def _cell(emulator: str, p: float, times: list[float]) -> dict:
    return {"emulator": emulator, "loss": p, "loss_method": None, "congestion_control": "bbr", "rtt_model_s": 0.002,
            "payload_bps": 9.56e6, "delay_s": 0.0, "times_s": {"65536": times}, "conditions": {"busy": False}}


def test_rows_against_the_same_emulators_lossless_cell():
    cells = [_cell("kernel", 0.0, [0.050, 0.052, 0.054]), _cell("kernel", 0.1, [0.060, 0.058, 0.300]),
             _cell("userspace", 0.0, [0.060, 0.060, 0.060]), _cell("userspace", 0.1, [0.070, 0.070, 0.070])]
    rows = {(r["emulator"], r["loss"]): r for r in bench.rows_of(cells)}
    k = rows[("kernel", 0.1)]
    assert k["extra_s"] == pytest.approx((0.060 + 0.058 + 0.300) / 3 - 0.052)
    assert k["stalled"] == 1  # only the 300 ms message: beyond 1.1 x the lossless median + 4 ms
    model = tcploss.extra_time(65536, 0.0, 9.56e6, 0.1, 0.002, "bbr")
    assert k["model_extra_s"] == pytest.approx(model) and k["err_extra"] == pytest.approx(model / k["extra_s"] - 1)
    assert rows[("userspace", 0.1)]["extra_s"] == pytest.approx(0.010)  # against userspace's own loss 0
    assert rows[("kernel", 0.0)]["err_extra"] is None and rows[("kernel", 0.0)]["extra_s"] == 0.0
    se = (statistics.stdev([0.060, 0.058, 0.300]) ** 2 / 3 + statistics.stdev([0.050, 0.052, 0.054]) ** 2 / 3) ** 0.5
    assert k["extra_se_s"] == pytest.approx(se)  # the noise of a mean over rare stalls, both cells'
    assert k["timer_waits"] is None  # no counters recorded in this cell


def test_timer_waits_per_message_from_the_senders_counters():
    c = {**_cell("userspace", 0.1, [0.07] * 8), "warmup": 2,
         "sender_counters": {"65536": {"TCPTimeouts": 3, "TCPLossProbes": 2, "TCPFastRetrans": 40}}}
    assert bench.rows_of([c])[0]["timer_waits"] == pytest.approx(5 / 10)


@pytest.mark.parametrize("argv, words", [(["--losses", "0.5"], "--losses 0.5"), (["--rate", "10"], "10"),
                                         (["--sizes", "0"], "--sizes")])
def test_bad_flags_are_refused_before_any_work(argv, words, tmp_path, capsys):
    assert bench.main([*argv, "--out", str(tmp_path / "x.json")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("lowbw bench loss:") and words in err and "\n" not in err
    assert not (tmp_path / "x.json").exists()


@netns_tun
@pytest.mark.slow
def test_a_short_measurement_on_the_testbed(tmp_path):
    out = tmp_path / "loss.json"
    assert bench.main(["--losses", "0.1", "--sizes", "8192", "--seconds", "0.5", "--warmup", "1", "--max-reps", "5",
                       "--prefix", "lblt", "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["provenance"]["host"] and "load1_max" in doc["conditions"]
    got = {(r["emulator"], r["loss"]) for r in doc["rows"]}
    assert got == {("kernel", 0.0), ("kernel", 0.1), ("userspace", 0.0), ("userspace", 0.1)}
    assert all(r["messages"] >= 5 and r["mean_s"] > 0 for r in doc["rows"])
    by = {(c["emulator"], c["loss"]): c["loss_method"] for c in doc["cells"]}
    assert by[("userspace", 0.1)] == "userspace" and by[("kernel", 0.1)] in ("cbpf-random-drop", "netem")
    counted = next(c for c in doc["cells"] if (c["emulator"], c["loss"]) == ("userspace", 0.1))["sender_counters"]
    assert set(counted["8192"]) == set(bench.COUNTERS)  # the sender's namespace's own TcpExt counters
