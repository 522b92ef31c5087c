"""What random packet loss costs one message on the testbed, against the virtual clock's model of TCP's loss
recovery (:mod:`lowbw.net.tcploss`).

Two workers of a :class:`lowbw.net.testbed.Testbed`, every link shaped to ``--rate`` (tbf, both directions)
and every uplink dropping a fraction ``--losses`` of its packets at random, by each of ``--emulators``:
``kernel`` (the testbed's ``--loss`` by default: netem where the kernel has it, else a random-drop classifier
on each sender's own egress qdisc, which returns each drop to the sender's stack at once: a local congestion
drop, not a loss in the network) and ``userspace`` (the link emulator of :mod:`lowbw.net.linkemu`, dropping
frames on the wire, which the sender learns of only from its peer, as in a network, and what a training run
with ``link_loss`` on the testbed uses; without ``--delay`` a
1 us delay routes the frames through it at loss 0 too). Rank 0 sends messages of each of ``--sizes`` bytes
to rank 1 over one TCP connection, one at a time: rank 1 answers a complete message with one byte, and rank 0
sends the next one after that answer. A message's time runs from rank 0's send to
rank 1's last byte, on the host's one monotonic clock: what a step of a collective waits for. Per (loss,
size), after ``--warmup`` messages, as many as fit in ``--seconds`` (at least 5, at most ``--max-reps``):

* ``mean_s``, ``median_s``, ``p90_s``, ``max_s``: the measured times; ``stalled``: messages slower than the
  median of the same size at no loss by more than 10% + 4 ms (a tail probe or a timeout waited);
* ``model_s``: :func:`lowbw.net.tcploss.message_time` at the link's payload rate (``--rate`` x 1448/1514, the
  clock's ``link_goodput``), the round trip ``2 x delay`` + one segment's transmission, and the congestion
  control the testbed's links ran;
* ``extra_s`` and ``model_extra_s``: the mean time at this loss less the mean at no loss (the same size), and
  the model's; ``err_extra`` = model / measured - 1.

The expected time of a message is a mean over rare events (at 1% loss one message in a hundred waits for a
probe): ``extra_s`` carries that sampling noise, and the table prints how many messages stalled.

    python -m lowbw bench loss [--rate 10mbit] [--losses 0 0.01 0.1] [--sizes 4096 65536 1048576]
        [--seconds 12] [--delay 0ms] [--congestion-control bbr] [--prefix lbls] [--out runs/bench/loss.json]

Needs root (network namespaces). Writes ``runs/bench/loss.json`` with provenance and the machine's conditions
(:mod:`lowbw.measure.conditions`, per loss and over the whole run) and prints the table.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

from lowbw.measure import conditions
from lowbw.net import tcploss
from lowbw.net.tc import SUBNET
from lowbw.net.testbed import Testbed
from lowbw.net.units import parse_delay, parse_rate
from lowbw.runs.io import atomic_write_json, provenance

__all__ = ["main", "measure", "rows_of", "GOODPUT"]

GOODPUT = 1448 / 1514  # TCP payload per wire byte (RunConfig.link_goodput's default)
PORT = 29810
#: the sender's TcpExt counters recorded per (loss, size): timer waits (retransmission timeouts, tail loss
#: probes) against repairs while data flows (fast retransmits; RACK's lost retransmissions)
COUNTERS = ("TCPTimeouts", "TCPLossProbes", "TCPLossProbeRecovery", "TCPFastRetrans", "TCPLostRetransmit",
            "TCPSackRecovery", "TCPSackRecoveryFail", "TCPSpuriousRTOs")
STALL_FACTOR, STALL_S = 1.1, 0.004  # a message stalled: slower than 1.1 x the median at no loss + 4 ms

# one worker: rank 0 sends, rank 1 receives and answers; every wait has a timeout
WORKER = textwrap.dedent("""
    import json, os, socket, sys, time
    r = int(os.environ["RANK"]); spec = json.loads(sys.argv[1]); timeout = spec["timeout_s"]
    def stack():  # this namespace's TCP counters (/proc/net/netstat's TcpExt): how TCP recovered
        ls = open("/proc/net/netstat").read().splitlines()
        return {k: int(v) for h, x in zip(ls[0::2], ls[1::2]) if h.startswith("TcpExt:")
                for k, v in zip(h.split()[1:], x.split()[1:]) if k in spec["counters"]}
    counters = {}
    me, peer = "%s.%d" % (spec["subnet"], r + 1), "%s.%d" % (spec["subnet"], 2 - r)
    times = {}
    if r == 1:
        srv = socket.socket(); srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        srv.bind((me, spec["port"])); srv.listen(1); srv.settimeout(timeout)
        c = srv.accept()[0]; srv.close()
    else:
        end = time.monotonic() + timeout
        while True:
            try:
                c = socket.create_connection((peer, spec["port"]), timeout=2); break
            except OSError:
                if time.monotonic() > end:
                    raise
                time.sleep(0.05)
    c.settimeout(timeout); c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    for size, n in spec["plan"]:
        ts = []
        c0 = stack()
        if r == 1:
            for _ in range(n):
                need = size
                while need:
                    b = c.recv(min(need, 1 << 20))
                    if not b:
                        sys.exit("rank 1: the sender closed the connection")
                    need -= len(b)
                ts.append(time.monotonic())
                c.sendall(b"k")
        else:
            buf = b"x" * size
            for _ in range(n):
                ts.append(time.monotonic())
                c.sendall(buf)
                if c.recv(1) != b"k":
                    sys.exit("rank 0: no answer from rank 1")
        times[str(size)] = ts
        c1 = stack()
        counters[str(size)] = {k: c1[k] - c0[k] for k in c1}
    c.close()
    with open(spec["out"] % r, "w") as f:
        json.dump({"times": times, "counters": counters}, f)
""")


def _plan(sizes: list[int], loss: float, rate_bps: float, rtt_s: float, seconds: float, warmup: int,
          max_reps: int, cc: str) -> list[tuple[int, int]]:
    """(size, messages incl. warm-up) per size: as many as the model expects in ``seconds``."""
    out = []
    for s in sizes:
        t = tcploss.message_time(s, rtt_s, rate_bps, loss, rtt_s, cc)  # + one round trip for the answer
        out.append((s, warmup + max(5, min(max_reps, int(seconds / max(t, 1e-6))))))
    return out


EMULATORS = {"kernel": "auto", "userspace": "userspace"}  # --emulators -> the testbed's link_emulator
EMULATOR_DELAY = "1us"  # userspace without --delay: the frames' path through the emulator, at loss 0 too


def measure(rate: str, loss: float, sizes: list[int], delay: str | None, seconds: float, warmup: int,
            max_reps: int, congestion_control: str | None, prefix: str, timeout_s: float,
            emulator: str = "kernel") -> dict[str, Any]:
    """One testbed at ``loss`` with ``emulator`` dropping the packets (``kernel``: netem where the kernel has it,
    else the random-drop classifier on each sender's own egress; ``userspace``: the link emulator, on the wire
    between the worker and the bridge): per size the measured message times (s, after the warm-up), the
    testbed's description and the machine's conditions."""
    if emulator == "userspace" and not delay:
        delay = EMULATOR_DELAY
    rate_bps, delay_s = float(parse_rate(rate)), float(parse_delay(delay)) if delay else 0.0
    payload_bps = rate_bps * GOODPUT
    rtt = 2 * delay_s + tcploss.MSS * 8 / payload_bps
    with tempfile.TemporaryDirectory(prefix="lowbw-loss-") as tmp:
        rec = conditions.record().start()
        with Testbed(2, rate=rate, delay=delay, loss=loss or None, prefix=prefix,
                     congestion_control=congestion_control, link_emulator=EMULATORS[emulator]) as tb:
            cc = tb.describe()["congestion_control"] or "bbr"
            plan = _plan(sizes, loss, payload_bps, rtt, seconds, warmup, max_reps, cc)
            spec = {"subnet": SUBNET, "port": PORT, "plan": plan, "timeout_s": timeout_s,
                    "out": str(Path(tmp) / "rank%d.json"), "counters": COUNTERS}
            budget = timeout_s + sum(n * (tcploss.message_time(s, rtt, payload_bps, loss, rtt, cc) + 0.5)
                                     for s, n in plan)
            codes = tb.run([sys.executable, "-c", WORKER, json.dumps(spec)], timeout=budget)
            net = tb.describe()
        cond = rec.stop()
        if any(codes):
            raise RuntimeError(f"{emulator} loss {loss}: the workers exited with {codes}")
        rank0 = json.loads((Path(tmp) / "rank0.json").read_text())
        sent, got = rank0["times"], json.loads((Path(tmp) / "rank1.json").read_text())["times"]
    times = {int(s): [b - a for a, b in zip(sent[s], got[s])][warmup:] for s in sent}
    return {"emulator": emulator, "loss": loss, "warmup": warmup,
            "loss_method": net.get("loss_method") or net.get("impairment"),
            "congestion_control": cc, "rtt_model_s": rtt, "payload_bps": payload_bps, "delay_s": delay_s,
            "times_s": {str(s): t for s, t in times.items()}, "testbed": net,
            "sender_counters": rank0["counters"],  # per size, warm-up included
            "conditions": cond.to_json(samples=False)}


def _se(xs: list[float]) -> float:
    """Standard error of the mean of ``xs`` (the sampling noise of a mean over rare stalls)."""
    return statistics.stdev(xs) / math.sqrt(len(xs)) if len(xs) > 1 else math.nan


def _per_message(cell: dict[str, Any], size: str, *counters: str) -> float | None:
    """The sender's ``counters`` summed per message of ``size`` (warm-up included), None if not recorded."""
    got = (cell.get("sender_counters") or {}).get(size)
    if not got:
        return None
    n = len(cell["times_s"][size]) + cell.get("warmup", 0)
    return sum(got.get(k, 0) for k in counters) / n


def _q(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * (len(s) - 1) + 0.5))]


def rows_of(cells: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (emulator, loss, size) of :func:`measure`'s cells: the measured statistics, the model's time
    and both extras over the same emulator's loss-0 cell of the size (NaN without one)."""
    base = {(c["emulator"], s): (statistics.fmean(t), statistics.median(t), _se(t)) for c in cells
            if c["loss"] == 0 for s, t in c["times_s"].items()}
    rows = []
    for c in cells:
        cc, rtt, bps, d = c["congestion_control"], c["rtt_model_s"], c["payload_bps"], c["delay_s"]
        for s, t in c["times_s"].items():
            size, mean = int(s), statistics.fmean(t)
            b_mean, b_med, b_se = base.get((c["emulator"], s), (math.nan, math.nan, math.nan))
            extra = mean - b_mean
            model_extra = tcploss.extra_time(size, d, bps, c["loss"], rtt, cc)
            rows.append({"emulator": c["emulator"], "loss_method": c["loss_method"], "loss": c["loss"],
                         "size": size, "messages": len(t), "mean_s": mean, "median_s": statistics.median(t),
                         "p90_s": _q(t, 0.9), "max_s": max(t),
                         "stalled": (sum(1 for x in t if x > STALL_FACTOR * b_med + STALL_S)
                                     if math.isfinite(b_med) else None),
                         "model_s": tcploss.message_time(size, d, bps, c["loss"], rtt, cc), "extra_s": extra,
                         "extra_se_s": math.hypot(_se(t), b_se),
                         "timer_waits": _per_message(c, s, "TCPTimeouts", "TCPLossProbes"),
                         "model_extra_s": model_extra,
                         "err_extra": (model_extra / extra - 1) if c["loss"] and extra > 0 else None,
                         "congestion_control": cc, "busy": bool(c["conditions"].get("busy"))})
    return rows


def _table(rows: list[dict[str, Any]]) -> str:
    head = (f"{'dropped by':<17} {'loss':>6} {'bytes':>9} {'msgs':>5} {'mean ms':>9} {'p50 ms':>8} {'p90 ms':>8} "
            f"{'max ms':>8} {'stalled':>7} {'timers':>6} {'model ms':>9} {'extra ms':>15} {'model +ms':>9} {'err':>7}")
    lines = [head, "-" * len(head)]
    for r in rows:
        err = "" if r["err_extra"] is None else f"{100 * r['err_extra']:+.0f}%"
        by = f"{r['emulator']}/{r['loss_method'] or '-'}"
        lines.append(f"{by:<17} {100 * r['loss']:>5.1f}% {r['size']:>9,} {r['messages']:>5} "
                     f"{1e3 * r['mean_s']:>9.2f} {1e3 * r['median_s']:>8.2f} {1e3 * r['p90_s']:>8.2f} "
                     f"{1e3 * r['max_s']:>8.1f} {'' if r['stalled'] is None else r['stalled']:>7} "
                     f"{'' if r.get('timer_waits') is None else format(r['timer_waits'], '.3f'):>6} "
                     f"{1e3 * r['model_s']:>9.2f} {_pm(r):>15} {1e3 * r['model_extra_s']:>9.2f} "
                     f"{err:>7}" + (" (busy)" if r["busy"] else ""))
    return "\n".join(lines)


def _pm(r: dict[str, Any]) -> str:
    """``extra ms +- its standard error``."""
    se = r.get("extra_se_s")
    return f"{1e3 * r['extra_s']:.2f}" + (f" +-{1e3 * se:.2f}" if se is not None and math.isfinite(se) else "")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="lowbw bench loss", description=__doc__.split("\n\n")[0])
    ap.add_argument("--rate", default="10mbit", help="every link's rate per direction (default 10mbit)")
    ap.add_argument("--losses", nargs="+", type=float, default=[0.0, 0.01, 0.1],
                    help="fractions of packets each uplink drops (default 0 0.01 0.1; 0 is added if missing)")
    ap.add_argument("--sizes", nargs="+", type=int, default=[4096, 65536, 1048576],
                    help="message sizes in bytes (default 4096 65536 1048576)")
    ap.add_argument("--emulators", nargs="+", choices=list(EMULATORS), default=list(EMULATORS),
                    help="what drops the packets: kernel (netem where the kernel has it, else a random-drop "
                    "classifier on each sender's own egress, which its TCP sees at once), userspace (the link "
                    "emulator, on the wire: a loss the sender learns of from its peer, as in a network); default "
                    "both")
    ap.add_argument("--delay", default=None, help="one-way delay of every uplink (default none)")
    ap.add_argument("--seconds", type=float, default=12.0, help="seconds of messages per (loss, size), as the "
                    "model expects them (default 12)")
    ap.add_argument("--warmup", type=int, default=3, help="untimed messages per size first (default 3)")
    ap.add_argument("--max-reps", type=int, default=400, help="most timed messages per cell (default 400)")
    ap.add_argument("--congestion-control", default=None, help="TCP congestion control of the links (default: "
                    "the kernel's)")
    ap.add_argument("--prefix", default="lbls", help="namespace name prefix (default lbls)")
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds any wait on the peer may take")
    ap.add_argument("--out", default="runs/bench/loss.json")
    conditions.add_strict_flag(ap)
    a = ap.parse_args(argv)
    try:  # every bad value before any work
        parse_rate(a.rate)
        if a.delay:
            parse_delay(a.delay)
        bad = [x for x in a.losses if not 0 <= x < 0.5]
        if bad:
            raise ValueError(f"--losses {bad[0]}: a fraction in [0, 0.5)")
        if min(a.sizes) < 1 or a.seconds <= 0 or a.warmup < 0 or a.max_reps < 5:
            raise ValueError(f"--sizes {a.sizes} (>= 1 byte), --seconds {a.seconds} (> 0), --warmup {a.warmup} "
                             f"(>= 0), --max-reps {a.max_reps} (>= 5)")
    except ValueError as e:
        print(f"lowbw bench loss: {e}", file=sys.stderr)
        return 2
    losses = sorted(set([0.0, *a.losses]))
    whole = conditions.record().start()
    t0 = time.perf_counter()
    cells = [measure(a.rate, p, a.sizes, a.delay, a.seconds, a.warmup, a.max_reps, a.congestion_control,
                     a.prefix, a.timeout, emulator) for emulator in a.emulators for p in losses]
    cond = whole.stop()
    if not conditions.check(cond, "lowbw bench loss", a.out, a.strict):
        return 1
    rows = rows_of(cells)
    doc = {"benchmark": "loss", "provenance": provenance(), "conditions": cond.to_json(),
           "setting": {"rate": a.rate, "delay": a.delay, "losses": losses, "sizes": a.sizes,
                       "emulators": a.emulators, "seconds": a.seconds, "warmup": a.warmup, "max_reps": a.max_reps,
                       "congestion_control": cells[0]["congestion_control"],
                       "model": "lowbw.net.tcploss.message_time"},
           "seconds": time.perf_counter() - t0, "rows": rows, "cells": cells}
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    atomic_write_json(Path(a.out), doc)
    print(f"2 workers, {a.rate} links, delay {a.delay or 'none'}, TCP {cells[0]['congestion_control']} "
          f"({cells[0]['testbed'].get('emulation')}); {conditions.describe(cond)}")
    print(_table(rows))
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
