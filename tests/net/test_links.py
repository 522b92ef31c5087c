"""Per-worker and asymmetric links: parsing (no root) and real rates on the testbed (root)."""

from __future__ import annotations

import secrets
import subprocess
import sys
import textwrap

import pytest

from lowbw.net.link import LinkSpec, links_from_values, per_worker
from tests.conftest import netns


def test_one_value_or_one_per_worker():
    assert per_worker("10mbit", 3, "--rate") == ["10mbit"] * 3 and per_worker(None, 2, "--up") == [None, None]
    assert per_worker("1gbit, 1gbit,10mbit", 3, "--rates") == ["1gbit", "1gbit", "10mbit"]
    with pytest.raises(ValueError, match=r"--rates '1gbit,10mbit' has 2 values for 3 workers \(give 1 or 3\)"):
        per_worker("1gbit,10mbit", 3, "--rates")


def test_links_from_values_sets_each_direction_and_worker():
    links = links_from_values(3, "1gbit,1gbit,10mbit", up="1gbit,1gbit,2mbit", delay="5ms,5ms,40ms",
                              down_delay="1ms", loss="0.1%")
    assert [(link.up_bps, link.down_bps) for link in links] == [(1e9, 1e9), (1e9, 1e9), (2e6, 1e7)]
    assert [link.delay_s for link in links] == [0.005, 0.005, 0.04]
    assert all(link.down_delay_s == 0.001 and link.loss == 0.001 for link in links)
    assert links_from_values(2, None) == [LinkSpec()] * 2  # unshaped
    with pytest.raises(ValueError, match="--down-delay '1ms,2ms' has 2 values for 3 workers"):
        links_from_values(3, "1gbit", down_delay="1ms,2ms")
    with pytest.raises(ValueError, match="--rate 'fast' is not a rate"):
        links_from_values(2, "10mbit,fast")


def test_cli_names_a_bad_per_worker_value_in_one_line(capsys):
    from lowbw.cli import main

    for argv, culprit in ((["--rates", "10mbit,0"], "--rate '0' must be a rate > 0"),
                          (["--workers", "3", "--up", "1mbit,2mbit"], "--up '1mbit,2mbit' has 2 values for 3")):
        rc = main(["testbed", *argv, "--", sys.executable, "-c", "pass"])
        err = capsys.readouterr().err.strip().splitlines()
        assert rc == 2 and len(err) == 1 and culprit in err[0], err


# ------------------------------------------------------------------------------------------- root
# Rank SRC sends N bytes to rank DST; DST prints the goodput. Others idle.
FLOW = textwrap.dedent("""
    import os, socket, sys, time
    r = int(os.environ["RANK"]); src, dst, n = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    addr = ("10.231.0.%d" % (dst + 1), 29731)
    if r == dst:
        s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(addr); s.listen(1)
        c, _ = s.accept(); got = 0; t0 = None
        while (b := c.recv(1 << 20)):
            t0 = t0 or time.perf_counter(); got += len(b)
        os.write(1, b"MBIT %f\\n" % (got * 8 / (time.perf_counter() - t0) / 1e6))
    elif r == src:
        for _ in range(100):
            try:
                c = socket.create_connection(addr, timeout=2); break
            except OSError:
                time.sleep(0.1)
        c.sendall(b"x" * n); c.close()
""")


def _goodput(tb, src: int, dst: int, nbytes: int, tmp_path) -> float:
    out = tmp_path / f"flow{src}{dst}.txt"
    with open(out, "w") as f:
        assert tb.run([sys.executable, "-c", FLOW, str(src), str(dst), str(nbytes)], timeout=90, stdout=f) == \
            [0] * tb.workers
    return float(out.read_text().split("MBIT")[1].split()[0])


@pytest.mark.netns
@netns
def test_each_worker_gets_its_own_rate_and_direction(tmp_path):
    from lowbw.net.testbed import Testbed

    prefix = "lbwl" + secrets.token_hex(3)
    links = links_from_values(3, "40mbit,40mbit,10mbit", up="40mbit,10mbit,10mbit")
    with Testbed(3, links=links, prefix=prefix) as tb:
        q = tb.qdiscs()
        assert q.count("rate 40Mbit") == 3 and q.count("rate 10Mbit") == 3 and tb.rate_bps is None
        assert [d["up_bps"] for d in tb.describe()["links"]] == [4e7, 1e7, 1e7]
        fast = _goodput(tb, 0, 1, 3_000_000, tmp_path)  # up 40, down 40
        slow_down = _goodput(tb, 0, 2, 1_000_000, tmp_path)  # up 40, down 10
        slow_up = _goodput(tb, 1, 0, 1_000_000, tmp_path)  # up 10, down 40
    # each shaper caps its direction (a busy machine can only lower what gets through), and the 40 Mbit/s path
    # carries more than a 10 Mbit/s shaper would let through: each worker and direction has its own rate
    for mbit, rate in ((fast, 40), (slow_down, 10), (slow_up, 10)):
        assert mbit < 1.05 * rate, (fast, slow_down, slow_up)
    assert fast > 1.05 * 10, (fast, slow_down, slow_up)
    listing = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert prefix not in listing
