"""Bandwidth/delay traces: the CSV and Mahimahi formats, looping, the shipped synthetic traces (no root),
and (root) a trace changing each worker's rate and delay on the testbed while it runs."""

from __future__ import annotations

import secrets
import statistics
import sys
import time
from pathlib import Path

import pytest

from lowbw.net import trace as T
from lowbw.net.link import LinkSpec
from lowbw.net.trace import Trace, TraceStep
from tests.conftest import netns_tun as netns
from tests.netscripts import udp_echo

TRACES = Path(T.__file__).parent / "traces"


def test_csv_rows_per_worker_or_all_with_optional_delay():
    tr = T.parse_csv("t_s,worker,mbit,delay_ms\n# comment\n1.5,1,10\n0,*,100,20\n2,0,0\n", workers=2)
    assert tr.steps == (TraceStep(0.0, None, 1e8, 0.02), TraceStep(1.5, 1, 1e7, None),
                        TraceStep(2.0, 0, T.MIN_BPS, None))
    assert tr.period_s is None and tr.changes_delay and tr.first_rate(1) == 1e8 and tr.peak_bps(1) == 1e8


@pytest.mark.parametrize("text, culprit", [
    ("0,2,10\n", "line 1: worker '2' is not * or a rank below 2"),
    ("0,*,fast\n", "line 1: mbit 'fast' is not a number"),
    ("t_s,worker,mbit\n0,*\n", "line 2: '0,*' is not t_s,worker,mbit"),
    ("-1,*,10\n", "time '-1' must be >= 0"),
    ("t_s,worker,mbit\n", "no rows"),
])
def test_bad_csv_names_the_line(text, culprit):
    with pytest.raises(ValueError, match=culprit.replace("*", r"\*").replace("(", r"\(")):
        T.parse_csv(text, workers=2)


def test_mahimahi_becomes_a_looping_rate_per_window():
    # 0-100 ms: 10 opportunities (1.2 Mbit/s), 100-200 ms: none, 200-250 ms: 5 (0.6 Mbit/s over 100 ms)
    stamps = [5] * 10 + [210, 220, 230, 240, 250]
    tr = T.parse_mahimahi("\n".join(map(str, stamps)) + "\n")
    assert [s.bps for s in tr.steps] == [pytest.approx(1.2e6), T.MIN_BPS, pytest.approx(0.6e6)]
    assert tr.period_s == pytest.approx(0.3) and all(s.rank is None for s in tr.steps)
    looped = list(T.expand(tr, 0.65))
    assert [round(s.t_s, 2) for s in looped] == [0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6]
    with pytest.raises(ValueError, match="line 2: 'x'"):
        T.parse_mahimahi("1\nx\n")
    with pytest.raises(ValueError, match="must not decrease"):
        T.parse_mahimahi("5\n3\n")


def test_load_detects_the_format_and_names_a_missing_file(tmp_path):
    (tmp_path / "m.trace").write_text("1\n2\n150\n")
    (tmp_path / "c.csv").write_text("0,*,5\n")
    assert T.load_trace(tmp_path / "m.trace", 2).period_s == pytest.approx(0.2)
    assert T.load_trace(tmp_path / "c.csv", 2).steps == (TraceStep(0.0, None, 5e6),)
    with pytest.raises(ValueError, match="--trace '.*nope.csv': No such file"):
        T.load_trace(tmp_path / "nope.csv", 2)


def test_peak_links_raise_uplinks_to_the_traces_highest_rate():
    tr = Trace((TraceStep(0, None, 1e7), TraceStep(1, 1, 3e8)))
    links = T.peak_links([LinkSpec.parse("100mbit")] * 2, tr)
    assert [link.up_bps for link in links] == [1e8, 3e8] and T.peak_links(links, None) == links


@pytest.mark.parametrize("kind", sorted(T.SYNTHETIC))
def test_shipped_traces_are_what_the_generator_makes_and_match_their_stated_statistics(kind):
    assert (TRACES / f"{kind}.csv").read_text() == T.synthetic_csv(kind)
    tr = T.load_trace(TRACES / f"{kind}.csv", 4)
    mbit = [s.bps / 1e6 for s in tr.steps]
    want = T.SYNTHETIC[kind]["median_mbit"]
    assert len(mbit) == 120 and 0.7 * want < statistics.median(mbit) < 1.3 * want
    assert min(mbit) < 0.3 * want  # at least one dip
    assert tr.changes_delay == (T.SYNTHETIC[kind]["delay_ms"] is not None)
    with pytest.raises(ValueError, match="unknown synthetic trace 'dsl'"):
        T.synthetic_csv("dsl")


# ------------------------------------------------------------------------------------------- root
RTT = udp_echo(29741, """
s.settimeout(1); out = []; lost = 0
for phase in (0.3, 1.3):  # before and after the trace's step at 0.8 s
    while time.time() - float(os.environ["LOWBW_T0"]) < phase:
        time.sleep(0.01)
    rtts = []
    while len(rtts) < 10:  # UDP: a datagram may be lost (counted, and the test allows few)
        t = time.perf_counter(); s.sendto(b"p", addr)
        try:
            s.recvfrom(64); rtts.append(time.perf_counter() - t)
        except socket.timeout:
            lost += 1
            assert lost < 5
        time.sleep(0.02)
    out.append(statistics.median(rtts) * 1e3)
for _ in range(3):
    s.sendto(b"end", addr)
os.write(1, b"RTT %f %f %d\\n" % (*out, lost))
""")


@pytest.mark.netns
@netns
def test_a_trace_changes_each_workers_rate_and_delay_while_running(tmp_path):
    from lowbw.net.testbed import Testbed

    (tmp_path / "t.csv").write_text("t_s,worker,mbit,delay_ms\n0,*,40,10\n0,1,10,\n0.8,0,20,30\n")
    prefix = "lbwr" + secrets.token_hex(3)
    out = tmp_path / "out.txt"
    with Testbed(2, rate="100mbit", prefix=prefix, trace=str(tmp_path / "t.csv")) as tb, open(out, "w") as f:
        assert tb.impairment == "userspace"  # the trace changes delays
        procs = tb.launch([sys.executable, "-c", RTT], stdout=f)
        time.sleep(0.4)
        early = tb.qdiscs()
        assert tb.wait(procs, timeout=60) == [0, 0]
        late = tb.qdiscs()
        d = tb.describe()
    before, after, lost = map(float, out.read_text().split()[1:4])
    assert lost <= 2
    # RTT = rank 1's uplink delay + rank 0's: 10 + 10 ms, then 10 + 30 ms (plus ~1 ms for the emulator)
    # the configured delays are a floor; the trace's +20 ms shows as the difference (a busy machine adds to both)
    assert before > 19 and after > 39 and 17 < after - before < 24, (before, after)
    assert early.count("rate 40Mbit") == 2 and early.count("rate 10Mbit") == 2
    assert late.count("rate 20Mbit") == 2 and late.count("rate 10Mbit") == 2
    assert d["trace"].endswith("t.csv") and [link["delay_s"] for link in d["links"]] == [0.03, 0.01]


def test_trace_and_schedule_are_exclusive_and_loopback_refuses_a_trace(tmp_path):
    from lowbw.net.testbed import Testbed

    (tmp_path / "t.csv").write_text("0,*,10\n")
    with pytest.raises(ValueError, match="schedule or a trace, not both"):
        Testbed(2, schedule="0:10mbit", trace=str(tmp_path / "t.csv"))
    with pytest.raises(ValueError, match="trace needs the netns-tc emulation"):
        Testbed(2, emulation="loopback-ratelimit", trace=str(tmp_path / "t.csv")).start()
