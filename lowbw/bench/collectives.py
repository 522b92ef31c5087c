"""E1: every all-reduce algorithm on rate-limited links, against the bound and the calibrated cost model.

For each world size N and link rate a :class:`lowbw.net.testbed.Testbed` is built (netns + tc when
root, else the labelled ``loopback-ratelimit`` emulation); one worker process per namespace first measures
ping-pong times between ranks 0 and 1 (the calibration of alpha and beta, least squares), then times every
algorithm at every size (median of ``reps`` after a warm-up; a repetition's time is the slowest rank's)
and checks the result. Combinations the nominal model predicts longer than ``max_seconds`` are skipped.

Each row: measured time, algorithm and bus bandwidth (algbw = M/t, busbw = algbw 2(N-1)/N, as
nccl-tests), the bandwidth-optimal lower bound 2(N-1)/N M b at the nominal rate, the calibrated model's
prediction and its relative error, the emulation mode; the file carries provenance and the targets.

    python -m lowbw.bench.collectives [--quick] [--workers 2 3 4] [--rates 10mbit 100mbit 1gbit]
        [--sizes 1 10 100] [--algorithms ring native ...] [--reps 3] [--out runs/bench/my_collectives.json]

Sizes are in MB (10^6 bytes) of float32 per rank; rates are written with their unit (``lowbw.net.units``) and
recorded in Mbit/s (10^6 bit/s). By hand the file defaults to ``runs/bench/my_collectives.json``; the
workflow's ``runs/bench/collectives.json`` is written only when ``--out`` names it.
The grid's plan and defaults are :mod:`lowbw.bench.collectives_plan`; one rank's measurements are
:mod:`lowbw.bench._collectives_worker`.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from lowbw.bench._collectives_worker import main as worker_main
from lowbw.bench.collectives_plan import (
    DEFAULTS,
    IDLE_MIN_S,
    MIN_SOFTWARE_REPS,
    QUICK,
    emulator_refusal,
    pingpong_sizes,
    plan_grid,
    predicted_seconds,
    software_plan,
    trace_plan,
)
from lowbw.bench.collectives_results import (
    calibration_key,
    merge_software,
    merge_start_lag,
    merge_testbeds,
    remodel,
    summarize,
    table,
    targets,
    trace_model,
)
from lowbw.comm.registry import get as collective_spec
from lowbw.measure import conditions
from lowbw.measure.conditions import add_strict_flag
from lowbw.net.calibrated import (
    SOFTWARE_BYTES,
    calibrate,
    calibrated_time,
    handshake_steps,
    refilled_burst_bytes,
    software_calibration,
    step_messages,
    window_wait,
)
from lowbw.net.costmodel import LinkParams, allreduce_time, lower_bound
from lowbw.net.testbed import Testbed, realtime_available
from lowbw.net.units import rate_mbit_arg
from lowbw.runs.io import atomic_write_json, provenance

__all__ = ["DEFAULTS", "QUICK", "run", "plan_grid", "merge_software", "emulator_refusal", "calibration_key",
           "predicted_seconds", "pingpong_sizes", "IDLE_MIN_S", "MIN_SOFTWARE_REPS",
           "handshake_steps", "step_messages", "refilled_burst_bytes", "window_wait", "calibrated_time", "remodel",
           "summarize", "table", "targets", "main"]

# --------------------------------------------------------------------------------- controller


def run(config: dict | None = None, out: str | os.PathLike | None = "runs/bench/collectives.json",
        quick: bool = False, log: Any = print, timeout: float = 3600, strict: bool = False) -> dict:
    """Run the benchmark grid (``config`` keys as in ``config/schema.yaml``'s bench.collectives; missing
    keys from ``DEFAULTS``, or ``QUICK`` with ``quick``) and write ``out``. Returns the result dict.

    The machine's conditions (:mod:`lowbw.measure.conditions`) are recorded over the whole grid (``conditions``)
    and per testbed (``testbeds[].conditions``); a busy machine gets a warning, and with ``strict`` nothing is
    written (not even the progress after each testbed)."""
    cfg = dict(DEFAULTS)
    if quick:
        cfg.update(QUICK)
    cfg.update({k: v for k, v in (config or {}).items() if v is not None})
    trace_plan(cfg)  # a bad trace: an error before any testbed
    cells, skipped = plan_grid(cfg)
    if cfg.get("calibration_only"):
        cells = [{**c, "plan": []} for c in cells]
        skipped = [x for x in skipped if x.get("cell")]
    rows: list[dict] = []
    traces: list[dict] = []
    calibration: dict[str, Any] = {}
    testbeds: list[dict] = []
    t_start = time.time()
    whole = conditions.record().start()
    for cell in cells:  # one testbed each
        n, rate_mbit, delay_ms, plan = cell["workers"], cell["rate_mbit"], cell["delay_ms"], cell["plan"]
        rate_bps = float(rate_mbit) * 1e6
        delay_s = float(delay_ms) / 1e3
        calls = predicted_seconds([cell])
        log(f"[collectives] N={n} rate={rate_mbit} Mbit/s delay={delay_ms} ms: {len(plan)} measurements, "
            f"~{calls:.0f} s predicted")
        res, desc = _run_testbed(n, rate_bps, delay_s, cfg, plan, timeout)
        testbeds.append(desc)
        pp = res["pingpong"]
        key = calibration_key(n, rate_mbit, delay_ms)
        calibration[key] = cal = calibrate(pp, rate_bps, res.get("gamma_s_per_byte"),
                                            (desc.get("tbf") or {}).get("burst"))
        if res.get("software"):
            cal["software"] = software_calibration(cal, res["software"], n)
        if res.get("trace"):
            traces.extend(_trace_records(cal, n, rate_mbit, delay_ms, res["trace"], desc))
        nominal = LinkParams(alpha_s=delay_s, bandwidth_bps=rate_bps)
        for m in res["measurements"]:
            t = m["time_s"]
            nb = m["nbytes"]
            lb = lower_bound(nb, n, nominal)
            chunk = res.get("chunk_bytes")
            model = calibrated_time(cal, m["algorithm"], nb, n, chunk) if m.get("ok") else None
            row = {
                "workers": n, "rate_mbit": rate_mbit, "delay_ms": delay_ms, "size_mb": m["size_mb"], "nbytes": nb,
                "algorithm": m["algorithm"], "emulation": desc["emulation"], "ok": m.get("ok", False),
                "error": m.get("error"), "reps": len(m.get("times_s", [])), "times_s": m.get("times_s", []),
                "full_warmup": m.get("full_warmup"),
                # "aligned": every rank starts at one instant of the host's clock; older files: after a barrier
                "start": m.get("start", "barrier"), "late_starts": m.get("late_starts"),
                "time_s": t, "lower_bound_s": lb, "model_nominal_s": allreduce_time(m["algorithm"], nb, n, nominal),
                "model_s": model, "chunk_bytes": chunk,
                # under loopback-ratelimit gloo's built-in all-reduce cannot be paced per message: it is
                # padded to the model's time, so that row is modelled, not measured
                "timing": "padded-to-model" if (desc["emulation"] == "loopback-ratelimit"
                                                and collective_spec(m["algorithm"]).opaque) else "measured",
            }
            if t:
                row["algbw_bps"] = nb * 8 / t
                row["busbw_bps"] = row["algbw_bps"] * 2 * (n - 1) / n
                row["frac_of_bound"] = lb / t
                row["model_rel_err"] = (model - t) / t if model is not None else None
            rows.append(row)
        result = _result(cfg, rows, skipped, calibration, testbeds, t_start, traces)
        if out and not strict:
            atomic_write_json(out, {**result, "provenance": provenance()})
    whole.stop()
    result = _result(cfg, rows, skipped, calibration, testbeds, t_start, traces)
    result["provenance"] = provenance()
    result["conditions"] = whole.conditions.to_json()
    if conditions.check(whole.conditions, "lowbw bench collectives", out, strict) and out:
        atomic_write_json(out, result)
    return result


def _result(cfg, rows, skipped, calibration, testbeds, t_start, traces=None) -> dict:
    emul = sorted({r["emulation"] for r in rows} or {t["emulation"] for t in testbeds})
    return {"benchmark": "collectives", "config": cfg, "rows": rows, "skipped": skipped, "traces": traces or [],
            "calibration": calibration, "testbeds": testbeds, "emulation": emul[0] if len(emul) == 1 else emul,
            "targets": targets(rows), "elapsed_s": time.time() - t_start,
            "finished_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "units": {"size_mb": "1e6 bytes of float32 per rank", "rate_mbit": "1e6 bit/s per link and direction",
                      "time_s": "median over reps of the slowest rank's time", "busbw_bps": "algbw * 2(N-1)/N"}}


def _run_testbed(n: int, rate_bps: float, delay_s: float, cfg: dict, plan: list[dict], timeout: float
                 ) -> tuple[dict, dict]:
    with tempfile.TemporaryDirectory(prefix="lowbw-bench-") as tmp:
        plan_path = Path(tmp, "plan.json")
        res_path = Path(tmp, "result.json")
        os.chmod(tmp, 0o755)
        env = dict(os.environ)
        root = str(Path(__file__).resolve().parents[2])
        env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")

        load0 = os.getloadavg()
        bed_conditions = conditions.record(interval_s=0).start()
        rt = cfg.get("realtime") or None
        if rt is not None and not realtime_available():
            print(f"[collectives] realtime={rt} not allowed here: workers under the fair scheduler "
                  "(recorded in testbeds[].scheduling)", file=sys.stderr)
            rt = None
        with Testbed(n, rate=rate_bps, delay=delay_s or None, emulation=cfg.get("emulation", "auto"),
                     queue=float(cfg.get("queue_ms") or 100) / 1e3,
                     congestion_control=cfg.get("congestion_control") or None, realtime=rt) as tb:
            # idle time before each timed call: twice what refills the shapers' token buckets, so that every
            # call starts on idle links with full buckets (as the cost model's burst term assumes, and as
            # in training, where compute separates the all-reduces); without it a call's burst depended on
            # the barrier's length (1 MB at 1 Gbit/s: ~10% of the call)
            burst = tb.tbf_params(rate_bps)["burst"] if tb.emulation == "netns-tc" else 0
            restart = _no_restart_after_idle([w.namespace for w in tb.info if w.namespace])
            idle_s = max(IDLE_MIN_S, 2 * burst * 8 / rate_bps)
            plan_path.write_text(json.dumps({"plan": plan, "pingpong_sizes": pingpong_sizes(rate_bps),
                                             "chunk_bytes": cfg.get("chunk_bytes"), "idle_s": idle_s,
                                             "software": software_plan(cfg, n, rate_bps, delay_s),
                                             "trace": trace_plan(cfg), "out": str(res_path)}))
            log_path = Path(tmp, "workers.log")
            with open(log_path, "w") as lf:
                codes = tb.run([sys.executable, "-m", "lowbw.bench.collectives", "--worker", str(plan_path)],
                               env=env, timeout=timeout, grace=60, stdout=lf, stderr=subprocess.STDOUT)
            desc = tb.describe()
            desc.update(idle_before_call_s=idle_s, tcp_slow_start_after_idle=restart)
        # other load on the machine disturbs the timings: record it (1-min load average, before/after)
        desc.update(loadavg_before=load0[0], loadavg_after=os.getloadavg()[0], cpu_count=os.cpu_count(),
                    conditions=bed_conditions.stop().to_json(samples=False))
        st = tb.emulator_stats  # the userspace link emulator's own account (delay lines' lateness, its CPU)
        if st:
            desc["link_emulator"] = {k: st.get(k) for k in ("scheduling", "frames", "bytes", "lost", "overflow",
                                                            "late_p50_s", "late_p99_s", "late_max_s", "cpu_s",
                                                            "wall_s")}
        if any(codes) or not res_path.exists():
            tail = log_path.read_text()[-4000:]
            raise RuntimeError(f"benchmark workers failed (exit codes {codes}):\n{tail}")
        return json.loads(res_path.read_text()), desc


def _trace_records(cal: dict, n: int, rate_mbit, delay_ms, traces: list, desc: dict) -> list[dict]:
    """Each traced size's calls with the calibrated model's predictions (:func:`trace_model`)."""
    out = []
    for t in traces:
        rec = {"workers": n, "rate_mbit": rate_mbit, "delay_ms": delay_ms, **t["plan"]}
        out.append({**rec, **trace_model(cal, rec), "loadavg_before": desc.get("loadavg_before"),
                    "calls": t["calls"]})
    return out


def _no_restart_after_idle(namespaces: list[str]) -> str | None:
    """Switch off TCP's restart from the initial window after idle (``net.ipv4.tcp_slow_start_after_idle=0``,
    a per-namespace sysctl) in every worker's namespace: between timed calls a connection that only some
    algorithms use (the butterfly's partners, the star of the parameter server) idles past its
    retransmission timeout (round trip + 200 ms), and with 50 ms links the restart, or the decay of an
    application-limited window that the same sysctl governs, costs round trips per message that no
    alpha-beta model has; tuned long-distance hosts switch it off too. Returns what is in force ("0"), the
    error where it could not be set, or None without namespaces (loopback emulation)."""
    if not namespaces:
        return None
    for ns in namespaces:
        p = subprocess.run(["ip", "netns", "exec", ns, "sysctl", "-qw", "net.ipv4.tcp_slow_start_after_idle=0"],
                           capture_output=True, text=True, timeout=30)
        if p.returncode:
            msg = f"could not set it in {ns}: {(p.stderr or p.stdout).strip()[:200]}"
            print(f"[collectives] tcp_slow_start_after_idle: {msg}", file=sys.stderr)
            return msg
    return "0"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m lowbw.bench.collectives", description=__doc__.splitlines()[0])
    ap.add_argument("--worker", metavar="PLAN", help=argparse.SUPPRESS)
    ap.add_argument("--quick", action="store_true", help="a small grid (N 2,3; 100 Mbit/s; 1 MB)")
    ap.add_argument("--workers", type=int, nargs="+")
    ap.add_argument("--rates", type=rate_mbit_arg("--rates"), nargs="+", dest="rates_mbit",
                    help="link rates with their unit, e.g. 10mbit 100mbit 1gbit")
    ap.add_argument("--sizes", type=float, nargs="+", dest="sizes_mb", help="MB per rank")
    ap.add_argument("--algorithms", nargs="+")
    ap.add_argument("--reps", type=int)
    ap.add_argument("--delay-ms", type=float, nargs="+", help="one-way delay per link, ms (several: a latency axis)")
    ap.add_argument("--queue-ms", type=float, help="tbf queue of each link, in ms at its rate (default 100)")
    ap.add_argument("--max-seconds", type=float)
    ap.add_argument("--congestion-control", help="TCP congestion control on the links (default cubic)")
    ap.add_argument("--chunk-bytes", type=int, help="message size of our algorithms (default: lowbw.comm's)")
    ap.add_argument("--emulation", choices=["auto", "netns-tc", "loopback-ratelimit"])
    ap.add_argument("--realtime", type=int, metavar="PRIO",
                    help="SCHED_RR priority of the workers where allowed (default 10; 0 = fair scheduler)")
    ap.add_argument("--software-bytes", type=int,
                    help=f"tiny call measuring each algorithm's software cost per step (default {SOFTWARE_BYTES}; "
                    "0: off)")
    ap.add_argument("--trace", metavar="ALG:MB[,MB..]:REPS",
                    help="per-message timings of REPS calls of ALG at each MB per rank (after the calibration)")
    ap.add_argument("--calibration-only", action="store_true", default=None,
                    help="only each testbed's calibration (ping-pong, gamma, software cost) and trace")
    ap.add_argument("--merge-software-into", metavar="FILE",
                    help="then give FILE's testbeds this run's software cost per step and remodel FILE")
    ap.add_argument("--merge-start-lag-into", metavar="FILE",
                    help="then give FILE's testbeds this run's start lag per call only (FILE's tiny calls kept)")
    ap.add_argument("--from-run", metavar="RUN",
                    help="with a --merge-* option: merge RUN (a previous run's JSON) and measure nothing")
    ap.add_argument("--merge-into", metavar="FILE",
                    help="then replace FILE's testbeds that this run measured (rows tagged with this run) and remodel")
    ap.add_argument("--config-json", help="bench.collectives config as JSON (keys as in config/schema.yaml)")
    ap.add_argument("--out", default="runs/bench/my_collectives.json",
                    help="JSON file (default %(default)s; the workflow's is runs/bench/collectives.json)")

    add_strict_flag(ap)
    a = ap.parse_args(argv)
    if a.worker:

        return worker_main(a.worker)
    cfg = json.loads(a.config_json) if a.config_json else {}
    for k in ("workers", "rates_mbit", "sizes_mb", "algorithms", "reps", "delay_ms", "queue_ms", "max_seconds",
              "chunk_bytes", "congestion_control", "emulation", "realtime", "software_bytes", "calibration_only"):
        v = getattr(a, k)
        if v is not None:
            cfg[k] = v
    if a.trace:
        parts = a.trace.split(":")
        if len(parts) != 3:
            raise SystemExit(f"--trace {a.trace!r}: expected ALG:MB[,MB..]:REPS, e.g. tree:0.016,0.064:20")
        cfg["trace"] = {"algorithm": parts[0], "sizes_mb": [float(x) for x in parts[1].split(",")],
                        "reps": int(parts[2])}
        trace_plan(cfg)  # a bad algorithm: an error before any testbed
    for flag, path in (("--merge-software-into", a.merge_software_into), ("--merge-into", a.merge_into),
                       ("--merge-start-lag-into", a.merge_start_lag_into), ("--from-run", a.from_run)):
        if path and not Path(path).is_file():
            raise SystemExit(f"{flag} {path}: no such file")
    if a.from_run:
        result = json.loads(Path(a.from_run).read_text())
        a.out = a.from_run
    else:
        result = run(cfg, out=a.out, quick=a.quick, log=lambda s: print(s, file=sys.stderr, flush=True),
                     strict=a.strict)
        if a.strict and result["conditions"]["busy"]:
            return 1  # run() printed why and wrote nothing
    if a.merge_start_lag_into:
        target = json.loads(Path(a.merge_start_lag_into).read_text())
        keys = merge_start_lag(target, result, a.out)
        atomic_write_json(a.merge_start_lag_into, target)
        print(f"[collectives] start lag merged into {a.merge_start_lag_into}: {keys}", file=sys.stderr)
    if a.merge_software_into:
        target = json.loads(Path(a.merge_software_into).read_text())
        keys = merge_software(target, result, a.out)
        atomic_write_json(a.merge_software_into, target)
        print(f"[collectives] software cost merged into {a.merge_software_into}: {keys}", file=sys.stderr)
    if a.merge_into:
        target = json.loads(Path(a.merge_into).read_text())
        keys = merge_testbeds(target, result, a.out)
        atomic_write_json(a.merge_into, target)
        print(f"[collectives] testbeds replaced in {a.merge_into}: {keys}", file=sys.stderr)
    print(table(result))
    print(json.dumps(result["targets"], indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
