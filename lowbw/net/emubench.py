"""How much the userspace link emulator carries here: ``python -m lowbw.net.emubench [RATES...]``.

For each rate (Mbit/s per link) a 2-worker testbed with ``--delay`` on each uplink (default 20 ms) runs
bulk TCP between the workers for ``--seconds`` (``one``: rank 0 -> 1; ``duplex``: both ways, as in an
all-reduce) while a separate process on rank 0 sends small UDP pings to rank 1 every 10 ms (they take the
shapers' priority band, so they measure the path, not the bulk queue). Printed per rate: the ping's round
trip (median, p90, p99; the requested one is 2 x delay), the TCP goodput, and the emulator's CPU (share of
one core, and the kernel's part of it) and frame lateness. The largest rate whose median round trip stays
within 5% of 2 x delay is what :data:`lowbw.net.linkemu.MAX_TOTAL_BPS` allows (summed over uplinks).
Needs root; the check of MAX_TOTAL_BPS is lifted for the measurement.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import textwrap

from lowbw.net import linkemu
from lowbw.net.testbed import Testbed
from lowbw.net.units import keyed_number

__all__ = ["main", "measure"]

LOAD = textwrap.dedent("""
    import json, os, socket, sys, threading, time
    r = int(os.environ["RANK"]); mode, dur = sys.argv[1], float(sys.argv[2])
    me, peer = "10.231.0.%d" % (r + 1), "10.231.0.%d" % (2 - r)
    res = {"rank": r}

    def recv_bulk():
        s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind((me, 29800))
        s.listen(1); c = s.accept()[0]; got, t1 = 0, None; t0 = time.perf_counter()
        while (b := c.recv(1 << 20)):
            now = time.perf_counter()
            if t1 is None and now - t0 > 1.0:  # count from 1 s on: past TCP's start-up
                t1, got = now, 0
            got += len(b)
        res["mbit"] = got * 8 / (time.perf_counter() - t1) / 1e6 if t1 else 0.0

    def send_bulk():
        for _ in range(200):
            try:
                c = socket.create_connection((peer, 29800), timeout=2); break
            except OSError:
                time.sleep(0.05)
        c.settimeout(None); buf = b"x" * (1 << 20); end = time.time() + dur
        while time.time() < end:
            c.sendall(buf)
        c.close()

    if os.fork() == 0:  # the pings in their own process: a bulk thread could hold the GIL for milliseconds
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        if r == 1:
            s.bind((me, 29801)); s.settimeout(dur + 20)
            while (m := s.recvfrom(64))[0] != b"end":
                s.sendto(*m)
        else:
            s.settimeout(1); rtts = []; time.sleep(1.5); end = time.time() + dur - 2.0
            while time.time() < end:
                t = time.perf_counter(); s.sendto(b"p", (peer, 29801))
                try:
                    s.recvfrom(64); rtts.append((time.perf_counter() - t) * 1e3)
                except socket.timeout:
                    pass
                time.sleep(0.01)
            for _ in range(3):
                s.sendto(b"end", (peer, 29801))
            rtts.sort()
            os.write(1, (json.dumps({"rtt_ms": [rtts[int(q * (len(rtts) - 1))] for q in (0.5, 0.9, 0.99)]})
                         + "\\n").encode())
        os._exit(0)
    threads = [threading.Thread(target=recv_bulk)] if mode == "duplex" or r == 1 else []
    for t in threads:
        t.start()
    time.sleep(0.3)
    if mode == "duplex" or r == 0:
        send_bulk()
    for t in threads:
        t.join()
    os.wait()
    os.write(1, (json.dumps(res) + "\\n").encode())
""")


def measure(rate_mbit: float, delay: str = "20ms", mode: str = "duplex", seconds: float = 8.0) -> dict:
    """One measurement (see the module docstring) as a dict."""
    limit, linkemu.MAX_TOTAL_BPS = linkemu.MAX_TOTAL_BPS, float("inf")
    try:
        with tempfile.TemporaryFile("w+") as f:
            with Testbed(2, rate=f"{rate_mbit}mbit", delay=delay, prefix="lbwb", link_emulator="userspace") as tb:
                codes = tb.run([sys.executable, "-c", LOAD, mode, str(seconds)], timeout=seconds + 60, stdout=f)
            f.seek(0)
            rows = [json.loads(line) for line in f if line.startswith("{")]
    finally:
        linkemu.MAX_TOTAL_BPS = limit
    st = tb.emulator_stats or {}
    rtt = next((r["rtt_ms"] for r in rows if "rtt_ms" in r), None)
    return {"mode": mode, "rate_mbit": rate_mbit, "delay": delay, "exit_codes": codes, "rtt_ms_p50_p90_p99": rtt,
            "goodput_mbit": [round(r["mbit"], 1) for r in rows if "mbit" in r],
            "emulator_cpu": round(st.get("cpu_s", 0) / max(st.get("wall_s", 1), 1e-9), 3),
            "emulator_cpu_kernel_share": round(st.get("cpu_sys_s", 0) / max(st.get("cpu_s", 0), 1e-9), 2),
            "late_p99_ms": st.get("late_p99_s", 0) * 1e3, "late_max_ms": round(st.get("late_max_s", 0) * 1e3, 2),
            "scheduling": st.get("scheduling")}


def _mbit(text: str) -> float:
    """A rate in Mbit/s: a number, or text in that unit (lowbw.net.units)."""
    try:
        return float(keyed_number("mbit", text, "rate"))
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m lowbw.net.emubench", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("rates", nargs="*", type=_mbit, default=[10, 50, 100, 150, 200],
                    help="Mbit/s per link (10, or 10mbit; 10mbps is refused: tc reads it as megabytes per second)")
    ap.add_argument("--delay", default="20ms")
    ap.add_argument("--mode", choices=["one", "duplex"], default="duplex")
    ap.add_argument("--seconds", type=float, default=8.0)
    args = ap.parse_args(argv)
    for rate in args.rates:
        print(json.dumps(measure(rate, args.delay, args.mode, args.seconds)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
