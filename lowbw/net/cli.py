"""``lowbw testbed``: run any torch.distributed program with each worker behind its own rate-limited link.

    python -m lowbw testbed --workers 4 --rate 100mbit --delay 5ms [--loss 0.1%] \\
        [--schedule "0:100mbit,10:10mbit"] -- python train.py
    python -m lowbw testbed --workers 3 --rates 1gbit,1gbit,10mbit --up 1gbit,1gbit,2mbit -- python train.py
    python -m lowbw testbed --cleanup            # remove namespaces left by killed testbeds

Needs root and iproute2 (``ip``, ``tc``); otherwise ``--emulation auto`` falls back to loopback with
in-process rate limiting (labelled ``loopback-ratelimit``). The exit status is non-zero if any worker failed.

Launch contract (--launcher direct, the default): the command runs once per worker, each in its own
network namespace behind its own shaped link, with torchrun's environment for a one-process node:
  RANK=0..N-1  WORLD_SIZE=N  LOCAL_RANK=0  LOCAL_WORLD_SIZE=1  GROUP_RANK=RANK
  MASTER_ADDR=<worker 0's address>  MASTER_PORT=<--master-port>  GLOO_SOCKET_IFNAME=<the shaped interface>
  OMP_NUM_THREADS=1 (unless set)  LOWBW_EMULATION, LOWBW_LINK_RATE_BPS, LOWBW_TESTBED (provenance)
so torch.distributed.init_process_group("gloo") (init_method env://) just works. Do not wrap the command
in torchrun yourself: `torchrun --nproc_per_node 1` in every namespace starts N separate 1-worker jobs
(no traffic on the links). Use --launcher torchrun instead: each namespace runs
  torchrun --nnodes N --node-rank RANK --nproc-per-node 1 --master-addr ... --master-port ... SCRIPT ARGS
with the command after -- being `[python] script.py args` (or `-m module args`).
All workers share the current directory (LOCAL_RANK is 0 everywhere, so files named after it collide):
--worker-dir 'DIR/w{rank}' runs each worker in its own directory (created; script paths given relative to
the current directory are made absolute).

Rates and delays need an explicit unit (lowbw.net.units): 100mbit, 1gbit, 500kbit (or 10MB/s for bytes);
20ms, 500us. `mbps`/`Mbps`/`MBps` (tc: megabytes per second) and bare numbers (tc: bit/s, microseconds)
are refused. At the end of a run the testbed prints, per worker, the bytes sent and received on its link
and the time the link was busy with them (--link-stats FILE: also as JSON); when every worker succeeded
but the links carried almost nothing (less than a fifth of what a rendezvous plus one collective puts on
them), it ends with a warning.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time

from lowbw.net import linkstats
from lowbw.net.faults import parse_fail, parse_partition, parse_straggle
from lowbw.net.link import links_from_values
from lowbw.net.testbed import RealtimeUnavailable, Testbed, TestbedUnavailable, cleanup, netns_missing, torchrun_argv


class _Formatter(argparse.RawDescriptionHelpFormatter):
    """The module docstring as written, and every option's default in its help unless it says it already."""

    def _get_help_string(self, action: argparse.Action) -> str:
        h = action.help or ""
        d = action.default
        if ("default" in h or d in (None, False, [], argparse.SUPPRESS) or not action.option_strings
                or action.nargs == 0):
            return h
        return f"{h} (default: {d})".strip()


def _strict(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """``p``, made to refuse unknown options with its own usage line (a subcommand's parser otherwise hands
    them to the top-level one, which would print ``lowbw``'s usage, not the testbed's)."""

    class Strict(type(p)):  # type: ignore[misc]
        def parse_known_args(self, args=None, namespace=None):
            ns, extras = super().parse_known_args(args, namespace)
            if extras:
                self.error(f"unrecognized arguments: {' '.join(extras)}")
            return ns, extras

    p.__class__ = Strict
    return p


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = _strict(sub.add_parser("testbed", help="run a command on N workers behind rate-limited links (netns + tc)",
                               description=__doc__, formatter_class=_Formatter))
    p.add_argument("--workers", "-n", type=int, default=2, help="number of workers")
    p.add_argument("--rate", "--rates", dest="rate", default="100mbit",
                   help="link rate each way with its unit (100mbit, 1gbit, 500kbit, 10MB/s; mbps and bare numbers "
                        "are refused: tc reads them as bytes/s and bit/s), or one per worker (1gbit,1gbit,10mbit); "
                        "'none' = unshaped (default: 100mbit = 100 Mbit/s each way)")
    p.add_argument("--up", default=None, help="uplink rate(s) (worker -> switch), overriding --rate, e.g. 10mbit")
    p.add_argument("--down", default=None, help="downlink rate(s) (switch -> worker), overriding --rate")
    p.add_argument("--delay", "--delays", dest="delay", default=None,
                   help="one-way delay added to each uplink with its unit (5ms, 500us; a bare number is refused: tc "
                        "reads it as microseconds), or one per worker (5ms,5ms,40ms) "
                        "(netem, or the userspace link emulator)")
    p.add_argument("--down-delay", default=None, help="one-way delay added to each downlink (userspace emulator)")
    p.add_argument("--jitter", default=None, help="delay jitter (standard deviation), e.g. 1ms (or one per worker)")
    p.add_argument("--link-emulator", default="auto", choices=["auto", "netem", "userspace"],
                   help="what adds delay/jitter/loss: auto (netem if the kernel has it, else userspace), netem, "
                        "userspace (TAP devices and a delay line per direction, lowbw.net.linkemu)")
    p.add_argument("--loss", default=None, help="packet loss on each uplink, e.g. 0.1%% (or one per worker)")
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
    p.add_argument("--trace", default=None, metavar="FILE",
                   help="replay a bandwidth (and delay) trace: CSV t_s,worker,mbit[,delay_ms] (worker * = all) or "
                        "a Mahimahi packet-delivery trace; examples: lowbw/net/traces/{wifi,lte}.csv")
    p.add_argument("--straggle", action="append", default=[], metavar="RANK:FACTOR",
                   help="slow worker RANK down FACTOR times (SIGSTOP/SIGCONT duty cycle); repeatable")
    p.add_argument("--fail", action="append", default=[], metavar="RANK@SECONDS",
                   help="kill worker RANK SECONDS after launch; repeatable")
    p.add_argument("--partition", action="append", default=[], metavar="RANK@SECONDS:DURATION",
                   help="drop every packet of worker RANK's link for DURATION seconds from SECONDS; repeatable")
    p.add_argument("--emulation", default="auto", choices=["auto", "netns-tc", "loopback-ratelimit"],
                   help="netns-tc (root, iproute2), loopback-ratelimit (no root: in-process pacing), auto (netns-tc "
                        "where possible)")
    p.add_argument("--prefix", default="lbw", help="name prefix of namespaces (default lbw)")
    p.add_argument("--master-port", type=int, default=29500, help="MASTER_PORT of the workers")
    p.add_argument("--launcher", default="direct", choices=["direct", "torchrun"],
                   help="direct: run the command per worker with torchrun's environment (default); torchrun: run "
                        "a one-process torchrun node per worker (--nnodes N --node-rank RANK)")
    p.add_argument("--worker-dir", default=None, metavar="'DIR/w{rank}'",
                   help="each worker's working directory ({rank} is filled in; created); default: the current one")
    p.add_argument("--timeout", type=float, default=None, help="kill the workers after this many seconds")
    p.add_argument("--grace", type=float, default=30.0,
                   help="seconds the other workers get after one fails before they are killed")
    p.add_argument("--show", action="store_true", help="print the qdiscs and the testbed description")
    p.add_argument("--link-stats", metavar="FILE", default=None,
                   help="also write what crossed each worker's link (bytes sent and received, seconds busy) and the "
                        "exit codes to FILE as JSON (they are printed at the end of every run)")
    p.add_argument("--cleanup", action="store_true", help="delete namespaces left by dead testbeds and exit")
    p.add_argument("--all", dest="cleanup_all", action="store_true",
                   help="with --cleanup: also those of running testbeds with this prefix")
    p.add_argument("cmd", nargs=argparse.REMAINDER, help="-- command to run on every worker")


def main(args: argparse.Namespace) -> int:
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
    if args.worker_dir is not None and "{rank}" not in args.worker_dir:
        print(f"lowbw testbed: --worker-dir {args.worker_dir!r} has no {{rank}}: the workers would share it",
              file=sys.stderr)
        return 2
    if args.worker_dir is not None:
        cmd = _absolute_paths(cmd)
    rate = None if str(args.rate).strip().lower() == "none" else args.rate
    # SIGINT -> KeyboardInterrupt and SIGTERM/SIGHUP -> SystemExit unwind the with-block: teardown runs
    # (SIGINT explicitly: a shell starts background jobs with SIGINT ignored)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, lambda s, f: (_ for _ in ()).throw(SystemExit(128 + s)))
    signal.signal(signal.SIGHUP, lambda s, f: (_ for _ in ()).throw(SystemExit(128 + s)))
    try:  # bad values (delay, loss, schedule, queue, ...) are named in one line before anything is set up
        faults = [*(parse_straggle(v, args.workers) for v in args.straggle),
                  *(parse_fail(v, args.workers) for v in args.fail),
                  *(parse_partition(v, args.workers) for v in args.partition)]
        links = links_from_values(args.workers, rate, args.up, args.down, args.delay, args.down_delay, args.jitter,
                                  args.loss, args.queue)
        testbed = Testbed(args.workers, links=links, schedule=args.schedule, emulation=args.emulation,
                          prefix=args.prefix,
                          ack_priority=args.ack_priority, congestion_control=args.congestion_control,
                          master_port=args.master_port, realtime=args.realtime,
                          link_emulator=args.link_emulator, trace=args.trace, faults=faults)
    except ValueError as e:
        print(f"lowbw testbed: {e}", file=sys.stderr)
        return 2
    timed_out = False
    try:
        with testbed as tb:
            if args.show:
                print(json.dumps(tb.describe(), indent=1), file=sys.stderr)
                print(tb.qdiscs(), file=sys.stderr)
            per_rank = None
            if args.launcher == "torchrun":
                try:
                    cmd = torchrun_argv(cmd, args.workers, tb.info[0].address, args.master_port)
                except ValueError as e:
                    print(f"lowbw testbed: {e}", file=sys.stderr)
                    return 2
                per_rank = {r: {"PET_NODE_RANK": str(r)} for r in range(args.workers)}
            meter = tb.link_meter().start()
            procs = tb.launch(cmd, cwd=args.worker_dir, per_rank_env=per_rank)
            t_wait = time.monotonic()
            codes = tb.wait(procs, timeout=args.timeout, grace=args.grace)
            timed_out = bool(args.timeout) and time.monotonic() - t_wait >= args.timeout
            usage = meter.stop()
            _report_links(usage, meter.seconds, codes, tb, args.link_stats)
            for t, kind, rank in tb.faults.log:
                if kind != "straggle":
                    print(f"lowbw testbed: injected {kind} of rank {rank} at {t:g} s", file=sys.stderr)
    except (TestbedUnavailable, RealtimeUnavailable) as e:
        print(f"lowbw testbed: {e}", file=sys.stderr)
        return 1
    except ValueError as e:  # links the chosen emulation cannot carry: refused before anything is built
        print(f"lowbw testbed: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("lowbw testbed: interrupted; torn down", file=sys.stderr)
        return 130
    failed = [(r, c) for r, c in enumerate(codes) if c != 0]
    if failed and timed_out:
        print(f"lowbw testbed: --timeout {args.timeout:g}s fired: the workers were killed "
              f"({', '.join(f'rank {r} exit {c}' for r, c in failed)})", file=sys.stderr)
        return 124  # as timeout(1)
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


def _report_links(usage, seconds: float, codes: list[int], tb, path: str | None) -> bool:
    """Print what crossed each worker's link (and write it to ``path`` as JSON); then, if every worker
    succeeded but the links stayed (almost) idle, a loud warning. Returns whether it warned."""
    if usage is not None:
        for line in linkstats.report_lines(usage, seconds):
            print(f"lowbw testbed: {line}" if not line.startswith(" ") else line, file=sys.stderr)
    warn = linkstats.idle(usage, codes)
    if path:
        doc = {"emulation": tb.emulation, "workers": tb.workers, "seconds": seconds, "exit_codes": list(codes),
               "idle_warning": warn, "links": linkstats.as_json(usage),
               "note": None if usage is not None else "no per-worker links to count on loopback-ratelimit"}
        with open(path, "w") as f:
            json.dump(doc, f, indent=1)
            f.write("\n")
    if warn:
        bar = "!" * 78
        expected = linkstats.MIN_EXCHANGE_BYTES_PER_WORKER
        print(f"{bar}\nlowbw testbed: WARNING: every worker succeeded, but their shaped links carried almost "
              f"nothing\n({', '.join(f'rank {u.rank}: {u.sent_bytes + u.received_bytes} B' for u in usage)}; "
              f"a rendezvous plus one collective puts at least\n~{expected // 1024} KB on each link). The workers "
              "did not talk to each other through the testbed: did the\ncommand start its own rendezvous (e.g. "
              "torchrun --nproc_per_node inside each namespace: use\n--launcher torchrun), bind to another address "
              "than MASTER_ADDR / GLOO_SOCKET_IFNAME, or not\ncommunicate at all? See python -m lowbw testbed "
              f"--help.\n{bar}", file=sys.stderr)
    return warn


def _absolute_paths(cmd: list[str]) -> list[str]:
    """Arguments naming existing files relative to the current directory, made absolute (the workers
    run elsewhere with --worker-dir)."""
    import os

    return [os.path.abspath(a) if not a.startswith("-") and not os.path.isabs(a) and os.path.isfile(a) else a
            for a in cmd]
