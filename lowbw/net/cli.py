"""``lowbw testbed``: run any torch.distributed program with each worker behind its own rate-limited link.

    python -m lowbw testbed --workers 4 --rate 100mbit --delay 5ms [--loss 0.1%] \\
        [--schedule "0:100mbit,10:10mbit"] -- python train.py
    python -m lowbw testbed --cleanup            # remove namespaces left by killed testbeds

Needs root and iproute2 (``ip``, ``tc``); otherwise ``--emulation auto`` falls back to loopback with
in-process rate limiting (labelled ``loopback-ratelimit``). The exit status is non-zero if any worker failed.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("testbed", help="run a command on N workers behind rate-limited links (netns + tc)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workers", "-n", type=int, default=2, help="number of workers (default 2)")
    p.add_argument("--rate", default="100mbit", help="link rate, tc units (100mbit, 1gbit); 'none' = unshaped")
    p.add_argument("--delay", default=None, help="one-way delay per message, e.g. 5ms (needs netem)")
    p.add_argument("--jitter", default=None, help="delay jitter, e.g. 1ms (needs netem)")
    p.add_argument("--loss", default=None, help="packet loss on each uplink, e.g. 0.1%%")
    p.add_argument("--queue", default="100ms",
                   help="queue of each shaped link as time at its rate (default 100ms; bufferbloat: e.g. 2s)")
    p.add_argument("--no-ack-priority", dest="ack_priority", action="store_false",
                   help="let ACKs queue behind bulk data (a plain FIFO bottleneck)")
    p.add_argument("--congestion-control", "--cc", dest="congestion_control", default=None,
                   help="TCP congestion control of the workers' links, e.g. cubic or bbr (default: the kernel's)")
    p.add_argument("--realtime", type=int, nargs="?", const=10, default=None, metavar="PRIO",
                   help="run the workers under SCHED_RR (priority PRIO, default 10): one CPU per emulated machine, "
                        "no wake-up delays from sharing cores (needs root; for communication benchmarks)")
    p.add_argument("--schedule", default=None, help='rate changes while running: "0:100mbit,10:10mbit" (s:rate)')
    p.add_argument("--emulation", default="auto", choices=["auto", "netns-tc", "loopback-ratelimit"])
    p.add_argument("--prefix", default="lbw", help="name prefix of namespaces (default lbw)")
    p.add_argument("--master-port", type=int, default=29500)
    p.add_argument("--timeout", type=float, default=None, help="kill the workers after this many seconds")
    p.add_argument("--grace", type=float, default=30.0,
                   help="seconds the other workers get after one fails before they are killed")
    p.add_argument("--show", action="store_true", help="print the qdiscs and the testbed description")
    p.add_argument("--cleanup", action="store_true", help="delete namespaces left by dead testbeds and exit")
    p.add_argument("--all", dest="cleanup_all", action="store_true",
                   help="with --cleanup: also those of running testbeds with this prefix")
    p.add_argument("cmd", nargs=argparse.REMAINDER, help="-- command to run on every worker")


def main(args: argparse.Namespace) -> int:
    from lowbw.net.testbed import RealtimeUnavailable, Testbed, TestbedUnavailable, cleanup, netns_missing

    if args.cleanup:
        missing = netns_missing()
        if missing:
            print("nothing to clean up without: " + "; ".join(missing), file=sys.stderr)
            return 1
        names = cleanup(args.prefix, all_=args.cleanup_all)
        print(f"removed {len(names)} namespace(s)" + (": " + " ".join(names) if names else ""))
        return 0
    cmd = list(args.cmd)
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    if not cmd:
        print("lowbw testbed: no command given (put it after --)", file=sys.stderr)
        return 2
    rate = None if str(args.rate).lower() in ("none", "0", "") else args.rate
    # SIGINT -> KeyboardInterrupt and SIGTERM/SIGHUP -> SystemExit unwind the with-block: teardown runs
    # (SIGINT explicitly: a shell starts background jobs with SIGINT ignored)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, lambda s, f: (_ for _ in ()).throw(SystemExit(128 + s)))
    signal.signal(signal.SIGHUP, lambda s, f: (_ for _ in ()).throw(SystemExit(128 + s)))
    try:
        with Testbed(args.workers, rate=rate, delay=args.delay, jitter=args.jitter, loss=args.loss,
                     schedule=args.schedule, emulation=args.emulation, prefix=args.prefix, queue=args.queue,
                     ack_priority=args.ack_priority, congestion_control=args.congestion_control,
                     master_port=args.master_port, realtime=args.realtime) as tb:
            if args.show:
                print(json.dumps(tb.describe(), indent=1), file=sys.stderr)
                print(tb.qdiscs(), file=sys.stderr)
            codes = tb.run(cmd, timeout=args.timeout, grace=args.grace)
    except (TestbedUnavailable, RealtimeUnavailable) as e:
        print(f"lowbw testbed: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("lowbw testbed: interrupted; torn down", file=sys.stderr)
        return 130
    failed = [(r, c) for r, c in enumerate(codes) if c != 0]
    if failed:
        print("lowbw testbed: worker(s) failed: " + ", ".join(f"rank {r} exit {c}" for r, c in failed),
              file=sys.stderr)
        # the first worker that failed by itself (a positive exit code) is the cause; the others were
        # probably stopped after it. Killed by a signal only: 128 + signal, as a shell reports it.
        positive = [c for _, c in failed if c > 0]
        if positive:
            return positive[0] if positive[0] < 256 else 1
        return min(255, 128 - failed[0][1])
    return 0
