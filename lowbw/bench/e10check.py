"""E10's check against the testbed: each of E10's networks (experiment ``e10_<network>`` of
``config/medium.yaml``: per-worker rates, latencies, a trace) x a few methods, run on ``sim`` and on ``procs``
over per-worker tc-shaped links, with E8's training, calibration and rows (:mod:`lowbw.bench.e8.grid`,
:mod:`lowbw.bench.e8.calibration`, :mod:`lowbw.bench.e8.rows`) at E10's batch, compared per step.
``--scale`` multiplies every rate (a trace's too, its time axis unchanged), keeping E10's ratios of links; a
network the testbed cannot run (unequal compute) is skipped before any work; a trace cell's sim replays the
trace from where the procs run's first step met it (:func:`start_offset_s`).

    sudo python -m lowbw bench e10check --networks even,oneslow,asym,trace --methods dense,topk1,local16 \\
        --steps 20 --scale 10 --out runs/bench/e10check.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from lowbw.bench import bench_provenance
from lowbw.bench.e2e_probe import probe
from lowbw.bench.e8.calibration import cell_calibration, cell_sequence, cell_steps_per_sync, probe_summary
from lowbw.bench.e8.calls import call_sequence
from lowbw.bench.e8.grid import UNCALIBRATED, WARMUP_STEPS, cell_config, sim_twin
from lowbw.bench.e8.grid import plan as e2e_plan
from lowbw.bench.e8.rows import cell_row
from lowbw.measure import conditions
from lowbw.measure.conditions import add_strict_flag
from lowbw.measure.presets import method_config
from lowbw.net.trace import expand, rates_at, resolve_trace
from lowbw.runs.io import atomic_write_json
from lowbw.train.config import RunConfig
from lowbw.train.launch import run, testbed_links

__all__ = ["main", "NETWORKS", "network_keys", "scaled_trace_csv", "network_config", "network_row", "testbed_of",
           "start_offset_s", "shifted_trace_csv", "stalls", "summarise", "table", "DEFAULT_OUT"]

DEFAULT_OUT = "runs/bench/e10check.json"
NETWORKS = ("even", "oneslow", "asym", "trace", "straggler")
LINK_KEYS = ("worker_bandwidth_mbit", "worker_uplink_mbit", "worker_latency_ms", "bandwidth_trace", "worker_speeds")
RATE_KEYS = ("worker_bandwidth_mbit", "worker_uplink_mbit")
WORKERS = 4  # E10's


def _config(path: str | os.PathLike) -> dict[str, Any]:
    import yaml

    p = Path(path)
    if not p.exists():
        raise ValueError(f"--config {path}: no such file")
    return yaml.safe_load(p.read_text())


def network_keys(config: dict[str, Any], network: str) -> dict[str, Any]:
    """E10's network ``network``: its base rate ``bandwidth_mbit`` (the experiment's, else the defaults') and
    per-worker keys, from the experiment ``e10_<network>`` of a workflow config."""
    exp = (config.get("experiments") or {}).get(f"e10_{network}")
    if exp is None:
        raise ValueError(f"--networks: {network!r} has no experiment e10_{network} in the config (known: "
                         f"{', '.join(n for n in NETWORKS if f'e10_{n}' in config.get('experiments', {}))})")
    base = {**(config.get("train_defaults") or {}), **(exp.get("base") or {})}
    out = {"bandwidth_mbit": float(base.get("bandwidth_mbit", 10.0))}
    out.update({k: base[k] for k in LINK_KEYS if base.get(k)})
    return out


def scaled_trace_csv(name: str, workers: int, scale: float) -> str:
    """The trace ``name`` (packaged or a file) as CSV text ``t_s,worker,mbit[,delay_ms]`` with every rate x
    ``scale`` (times and delays unchanged)."""
    tr = resolve_trace(name, workers)
    rows = ["t_s,worker,mbit,delay_ms"]
    for s in tr.steps:
        who = "*" if s.rank is None else str(s.rank)
        delay = "" if s.delay_s is None else f"{s.delay_s * 1e3:g}"
        rows.append(f"{s.t_s:g},{who},{s.bps / 1e6 * scale:.6g},{delay}")
    return "\n".join(rows) + "\n"


def network_config(keys: dict[str, Any], scale: float, trace_dir: Path | None = None) -> dict[str, Any]:
    """The run-config keys of a network at ``scale`` x its rates (``bandwidth_mbit`` included); a trace
    becomes the file ``trace_dir/<name>_x<scale>.csv`` (written here) unless ``scale`` is 1."""
    out = dict(keys)
    out["bandwidth_mbit"] = float(keys["bandwidth_mbit"]) * scale
    for k in RATE_KEYS:
        if k in out:
            out[k] = [float(v) * scale for v in out[k]]
    if "bandwidth_trace" in out and scale != 1:
        if trace_dir is None:
            raise ValueError("a scaled trace needs a directory to be written to")
        name = Path(str(out["bandwidth_trace"])).stem
        path = trace_dir / f"{name}_x{scale:g}.csv"
        trace_dir.mkdir(parents=True, exist_ok=True)
        path.write_text(scaled_trace_csv(str(out["bandwidth_trace"]), WORKERS, scale))
        out["bandwidth_trace"] = str(path.resolve())
    return out


def start_offset_s(procs_dir: Path) -> float:
    """Seconds from a procs run's launch to its first training step, from its files: the launcher writes
    ``.worker-config.json`` just before it sets up the testbed and launches the workers; ``metrics.jsonl`` was
    last written at the loop's wall time ``t_wall`` of its last line, so the loop started at its mtime minus
    that; the first step started ``t_wall - t_step`` of its line later. The testbed's set-up (a few tenths of
    a second) is included: the trace starts a little later than this."""
    d = Path(procs_dir)
    lines = [json.loads(x) for x in (d / "metrics.jsonl").read_text().splitlines() if x.strip()]
    loop_start = (d / "metrics.jsonl").stat().st_mtime - float(lines[-1]["t_wall"])
    first = next(x for x in lines if x["step"] >= 1)
    return max(0.0, loop_start + float(first["t_wall"]) - float(first["t_step"])
               - (d / ".worker-config.json").stat().st_mtime)


def shifted_trace_csv(path: str | os.PathLike, offset_s: float, workers: int = WORKERS) -> str:
    """The trace at ``path`` as seen from ``offset_s`` seconds after its start (CSV text): every worker's rate
    in force then at time 0, the later steps ``offset_s`` earlier (a looping trace: modulo its period). The sim
    replays it from the first step; the testbed replayed the original from its launch, ``offset_s`` before."""
    if offset_s < 0:
        raise ValueError(f"offset {offset_s}: must be >= 0")
    tr = resolve_trace(str(path), workers)
    rows = ["t_s,worker,mbit,delay_ms"]
    for r, (bps, delay) in enumerate(rates_at(tr, offset_s, workers)):
        if bps is not None:
            rows.append(f"0,{r},{bps / 1e6:.9g},{'' if delay is None else f'{delay * 1e3:g}'}")
    horizon = offset_s + (tr.period_s or max((s.t_s for s in tr.steps), default=0.0)) + 1.0
    for s in expand(tr, horizon):
        if s.t_s > offset_s:
            who = "*" if s.rank is None else str(s.rank)
            delay = "" if s.delay_s is None else f"{s.delay_s * 1e3:g}"
            rows.append(f"{s.t_s - offset_s:.9g},{who},{s.bps / 1e6:.9g},{delay}")
    return "\n".join(rows) + "\n"


def _straggler_supported(net: dict[str, Any]) -> bool:
    """Whether procs on the testbed make ``worker_speeds`` real (the launcher passes the testbed faults)."""
    rc = RunConfig.from_dict({"dataset": "synthetic", "model": "mlp", "workers": WORKERS, "backend": "procs",
                              "testbed": True, **net})
    return bool(testbed_links(rc).get("faults"))


def cell(method: dict[str, Any], net: dict[str, Any], args, probe_res: dict[str, Any]) -> dict[str, Any]:
    """One cell's run config: E8's cell (:func:`lowbw.bench.e8.grid.cell_config`) at the network's base rate with
    the network's per-worker keys, E10's batch, every step logged, no evaluation but the last (the shapers'
    bucket, ``clock_shaper_burst_bytes``, as :mod:`lowbw.train.links` models it on per-worker links)."""
    cfg = cell_config(method, WORKERS, net["bandwidth_mbit"], args.steps, args, probe_res)
    cfg.update({k: v for k, v in net.items() if k != "bandwidth_mbit"})
    cfg.update(log_every=1, eval_every=100.0)
    RunConfig.from_dict({**cfg, "backend": "procs", "testbed": True})  # the network's keys checked too
    return cfg


def network_row(sim_dir: Path, procs_dir: Path, *, network: str, net: dict[str, Any], method: str, steps: int,
                target: float, probe_res: dict[str, Any], cfg: dict[str, Any]) -> dict[str, Any]:
    """One row of e10check.json: :func:`lowbw.bench.e8.rows.cell_row` of the two runs plus the network and its
    links (Mbit/s as run, after ``--scale``)."""
    row = cell_row(sim_dir, procs_dir, method=method, workers=WORKERS, rate=net["bandwidth_mbit"], steps=steps,
                       target=target, probe_res=probe_res, cfg=cfg)
    return {"network": network, "links": {k: v for k, v in net.items()}, **row, "testbed": testbed_of(procs_dir),
            "stalls": stalls(procs_dir, sim_dir)}


def testbed_of(procs_dir: Path) -> dict[str, Any] | None:
    """What the testbed of a procs run really shaped (its ``.testbed.json``): every worker's uplink and downlink
    (Mbit/s), the shapers' bucket, TCP's congestion control, the trace's applied rates; None without one."""
    p = Path(procs_dir) / ".testbed.json"
    if not p.is_file():
        return None
    d = json.loads(p.read_text())
    return {"links_mbit": [[w["up_bps"] / 1e6, w["down_bps"] / 1e6] for w in d.get("links") or []],
            "tbf": d.get("tbf"), "congestion_control": d.get("congestion_control"),
            "rate_changes": len(d.get("rate_log") or []), "trace": d.get("trace")}


def stalls(procs_dir: Path, sim_dir: Path, factor: float = 3.0, slack_s: float = 0.5) -> list[list[float]]:
    """Steps whose measured communication took more than ``factor`` x the sim's for the same step plus
    ``slack_s`` seconds: a stall of the testbed's TCP (retransmission time-outs back off 0.2, 0.4, 0.8 ... s),
    not something the clock models. ``[[step, measured seconds], ...]``. After one, a trace cell's later steps
    meet a later part of the trace than the sim's."""
    def per_step(d: Path, key: str) -> dict[int, float]:
        lines = [json.loads(x) for x in (Path(d) / "metrics.jsonl").read_text().splitlines() if x.strip()]
        return {int(b["step"]): b[key] - a[key] for a, b in zip(lines, lines[1:]) if b["step"] > a["step"]}

    meas, pred = per_step(procs_dir, "t_comm"), per_step(sim_dir, "t_virtual_comm")
    return [[k, float(m)] for k, m in sorted(meas.items()) if k in pred and m > factor * pred[k] + slack_s]


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Worst |err_step| and |err_comm| per network and per method."""
    out: dict[str, Any] = {"worst_abs_err_step_by_network": {}, "worst_abs_err_step_by_method": {},
                           "worst_abs_err_comm_by_network": {},
                           "stalled_cells": [f"{r['network']}/{r['method']}" for r in rows if r.get("stalls")]}
    for r in rows:
        for key, group in (("worst_abs_err_step_by_network", r["network"]),
                           ("worst_abs_err_step_by_method", r["method"])):
            if r.get("err_step") is not None:
                out[key][group] = max(out[key].get(group, 0.0), abs(r["err_step"]))
        if r.get("err_comm") is not None and r.get("predicted_comm_s", 0) > 0:
            k = "worst_abs_err_comm_by_network"
            out[k][r["network"]] = max(out[k].get(r["network"], 0.0), abs(r["err_comm"]))
    return out


def _parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m lowbw bench e10check", description=__doc__.splitlines()[0])
    ap.add_argument("--networks", default="even,oneslow,asym,trace,straggler",
                    help=f"comma-separated E10 networks ({', '.join(NETWORKS)}: experiments e10_<name>)")
    ap.add_argument("--methods", default="dense,topk1,local16",
                    help="comma-separated presets of the config's methods")
    ap.add_argument("--steps", type=int, default=20,
                    help=f"training steps per run (> {WARMUP_STEPS}: the first {WARMUP_STEPS} are warm-up)")
    ap.add_argument("--scale", type=float, default=10.0, help="every rate of the networks x this factor")
    ap.add_argument("--config", default="config/medium.yaml", help="the workflow config holding e10_* and methods")
    ap.add_argument("--model", default="mlp")
    ap.add_argument("--dataset", default="mnist")
    ap.add_argument("--batch-size", type=int, default=64, help="global batch (E10's)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--target", type=float, default=0.9, help="test accuracy for time-to-accuracy (rarely reached)")
    ap.add_argument("--runs-dir", default="runs/bench/e10check", help="where the cells' run directories go")
    ap.add_argument("--out", default=DEFAULT_OUT)
    ap.add_argument("--dry-run", action="store_true", help="check the arguments and print the cells, run nothing")
    ap.add_argument("--reanalyse", action="store_true",
                    help="recompute the rows' stalls and summary of --out from its cells' run directories (no runs)")

    add_strict_flag(ap)
    return ap.parse_args(argv)


def plan(args) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]], dict[str, str]]:
    """(networks' keys as run, methods' keys, skipped networks -> why); ValueError naming the bad value for any
    argument or cell that would not run, before any work (a scaled trace is written only by the run)."""
    if args.steps <= WARMUP_STEPS:
        raise ValueError(f"--steps {args.steps}: needs more than the {WARMUP_STEPS} warm-up steps")
    if not args.scale > 0:
        raise ValueError(f"--scale {args.scale}: needs a factor > 0")
    if args.batch_size % WORKERS:
        raise ValueError(f"--batch-size {args.batch_size}: not a multiple of the {WORKERS} workers")
    config = _config(args.config)
    names = [n.strip() for n in args.networks.split(",") if n.strip()]
    if not names:
        raise ValueError("--networks: none given")
    nets = {n: network_keys(config, n) for n in names}
    presets = dict(config.get("methods") or {})
    wanted = [m.strip() for m in args.methods.split(",") if m.strip()]
    if not wanted:
        raise ValueError("--methods: none given")
    mcfg = {m: method_config(m, presets) for m in wanted}
    skipped = {}
    for n, keys in nets.items():
        if keys.get("worker_speeds") and not _straggler_supported(keys):
            skipped[n] = ("worker_speeds is the virtual clock's only: procs on the testbed get no straggler "
                          "(lowbw.train.launch.testbed_links passes no faults)")
            continue
        run_keys = {**keys, "bandwidth_mbit": keys["bandwidth_mbit"] * args.scale}
        for k in RATE_KEYS:
            if k in run_keys:
                run_keys[k] = [float(v) * args.scale for v in run_keys[k]]
        run_keys.pop("bandwidth_trace", None)  # the scaled file exists only once the run writes it
        for m, c in mcfg.items():
            try:
                cell(c, run_keys, args, UNCALIBRATED)
            except ValueError as e:
                raise ValueError(f"network {n}, method {m}: {e}") from None
    return nets, mcfg, skipped


def _require_root() -> None:
    if os.geteuid() != 0:
        raise ValueError("the testbed's per-worker links need root (netns + tc): run it with sudo")


def _replay(method: dict[str, Any], rate: float, args, shape, sim_dir: Path) -> dict[str, Any]:
    """What a method's probe replays (:func:`lowbw.bench.e2e_probe.probe`'s ``sequence`` and ``twin``): its calls
    of one exchange with the CPU work before each (:func:`lowbw.bench.e8.calibration.cell_sequence`), from an
    uncalibrated sim run on an even network at ``rate`` (the links do not change a step's CPU work), that run's
    config, and the steps between its synchronisations (``steps_per_sync``, for the compute factor)."""
    twin = sim_twin(cell(method, {"bandwidth_mbit": rate}, args, UNCALIBRATED))
    run(twin, sim_dir, overwrite=True, quiet=True)
    exchange = call_sequence(twin, WORKERS, shape)
    return {"sequence": cell_sequence(exchange, sim_dir, args.steps, WORKERS), "twin": twin,
            "steps_per_sync": cell_steps_per_sync(sim_dir, args.steps, WORKERS, len(exchange))}


def run_check(args, nets, mcfg, skipped) -> dict[str, Any]:
    """Every cell (see the module docstring), grouped by base rate: a probe, every network's procs runs, a
    second probe, then the sims with the pooled calibration; writes ``args.out`` after every group. The
    machine's conditions (:mod:`lowbw.measure.conditions`) are recorded per testbed run (``rows[].conditions``)
    and for the check; a busy machine gets a warning, and with ``args.strict`` nothing is written."""
    _, shape = e2e_plan(argparse.Namespace(methods="dense", workers=[], rates=[], steps=args.steps, model=args.model,
                                           dataset=args.dataset, batch_size=args.batch_size, seed=args.seed,
                                           target=args.target))
    runs_dir, out = Path(args.runs_dir), Path(args.out)
    t_start = time.perf_counter()
    rows: list[dict[str, Any]] = []
    probes: list[dict[str, Any]] = []
    load = [os.getloadavg()[0]]
    strict = bool(getattr(args, "strict", False))
    whole = conditions.record().start()
    run_nets = {n: network_config(k, args.scale, runs_dir / "traces") for n, k in nets.items() if n not in skipped}
    for rate in sorted({net["bandwidth_mbit"] for net in run_nets.values()}):
        group = {n: net for n, net in run_nets.items() if net["bandwidth_mbit"] == rate}
        base = {k: v for k, v in cell({}, {"bandwidth_mbit": rate}, args, UNCALIBRATED).items()}
        # per method a probe that replays its calls of an exchange, before and after the group's cells
        replay = {m: _replay(c, rate, args, shape, runs_dir / f"sequence_{m}_r{rate:g}") for m, c in mcfg.items()}
        pre = {m: probe(base, WORKERS, rate, shape, sequence=replay[m]["sequence"], twin=replay[m]["twin"])
               for m in mcfg}
        first = next(iter(pre.values()))
        tbf = {"emulation": first["emulation"], "shaper_burst_bytes": first["shaper_burst_bytes"]}
        pr = {m: {**probe_summary([pre[m]], WORKERS), **tbf, "steps_per_sync": replay[m]["steps_per_sync"]}
              for m in mcfg}
        for m, x in pr.items():
            print(f"probe at {rate:g} Mbit/s, {m}: overhead {x['overhead_sequence_ms']:.2f} ms/message in its "
                  f"calls, compute x{x['compute_scale']:.2f} ({x['emulation']})", flush=True)
        done = []
        for name, net in group.items():
            for m in mcfg:
                d = runs_dir / f"{name}_{m}"
                t0 = time.perf_counter()
                with conditions.record() as here:
                    run({**cell(mcfg[m], net, args, pr[m]), "backend": "procs", "testbed": True}, d / "procs",
                        overwrite=True, quiet=True)
                done.append((name, net, m, d, time.perf_counter() - t0, here.conditions))
                print(f"  procs {name} {m}: {done[-1][4]:.0f} s", flush=True)
        try:
            post = {m: probe(base, WORKERS, rate, shape, sequence=replay[m]["sequence"], twin=replay[m]["twin"])
                    for m in mcfg}
            post_error = None
        except RuntimeError as e:  # the cells are measured: calibrate them with the first probes alone
            post, post_error = {}, str(e)
            print(f"second probe failed ({e}): the first ones alone calibrate", flush=True)
        for m in mcfg:
            pr[m] = {**probe_summary([pre[m]] + ([post[m]] if m in post else []), WORKERS), **tbf,
                     "steps_per_sync": replay[m]["steps_per_sync"]}
            probes.append({"rate_mbit": rate, "networks": list(group), "method": m, "post_probe_error": post_error,
                           **pr[m]})
        for name, net, m, d, wall, here_c in done:
            offset = None
            if "bandwidth_trace" in net:  # replay the trace in the sim from where the testbed's first step met it
                offset = start_offset_s(d / "procs")
                shifted = d / "trace_from_first_step.csv"
                shifted.write_text(shifted_trace_csv(net["bandwidth_trace"], offset))
                net = {**net, "bandwidth_trace": str(shifted.resolve())}
            cfg = cell(mcfg[m], net, args, pr[m])
            run(sim_twin(cfg), d / "sim", overwrite=True, quiet=True)  # the cell's CPU gap between calls
            pc = cell_calibration(pr[m], d / "sim", args.steps, WORKERS)
            cfg = cell(mcfg[m], net, args, pc)
            run(sim_twin(cfg), d / "sim", overwrite=True, quiet=True)
            row = network_row(d / "sim", d / "procs", network=name, net=net, method=m, steps=args.steps,
                              target=args.target, probe_res=pc, cfg=cfg)
            row["wall_s"] = wall
            row["trace_offset_s"] = offset
            row["conditions"] = here_c.to_json(samples=False)
            rows.append(row)
            print(_fmt_row(row), flush=True)
        load.append(os.getloadavg()[0])
        if not strict:
            atomic_write_json(out, _result(rows, probes, skipped, args, t_start, load, complete=False))
    res = _result(rows, probes, skipped, args, t_start, load, complete=True, conditions=whole.stop().to_json())
    if conditions.check(whole.conditions, "lowbw bench e10check", out, strict):
        atomic_write_json(out, res)
    return res


def _result(rows, probes, skipped, args, t_start, load, complete: bool,
            conditions: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"provenance": bench_provenance(), "complete": complete, "seconds": time.perf_counter() - t_start,
            "args": {k: v for k, v in vars(args).items() if k != "dry_run"}, "workers": WORKERS,
            "warmup_steps": WARMUP_STEPS, "load_1min": load, "conditions": conditions, "probes": probes,
            "skipped": skipped, "rows": rows, "summary": summarise(rows)}


def _pct(x: float | None) -> str:
    return "     --" if x is None else f"{100 * x:+6.1f}%"


def _fmt_row(r: dict[str, Any]) -> str:
    stalled = "".join(f"  stall: step {k} {c:.1f} s" for k, c in r.get("stalls") or [])
    return (f"{r['network']:<10} {r['method']:<10} step {r['predicted_step_s']:8.4f} / {r['measured_step_s']:8.4f} s "
            f"{_pct(r['err_step'])}   comm {r['predicted_comm_s']:8.4f} / {r['measured_comm_s']:8.4f} s "
            f"{_pct(r['err_comm'])}   compute {r['predicted_compute_s']:.4f} / {r['measured_compute_s']:.4f} s"
            + stalled)


def table(res: dict[str, Any]) -> str:
    """The check as text: per cell predicted / measured seconds per step and the error."""
    head = (f"E10 check: sim vs procs on the testbed, {res['workers']} workers, rates x{res['args']['scale']:g}, "
            f"steps {res['warmup_steps']}..{res['args']['steps']} (predicted / measured)")
    lines = [head] + [_fmt_row(r) for r in res["rows"]]
    lines += [f"skipped {n}: {why}" for n, why in res.get("skipped", {}).items()]
    return "\n".join(lines)


def reanalyse(args) -> dict[str, Any]:
    """The stalls and summary of an existing ``--out`` recomputed from its cells' run directories."""
    res = json.loads(Path(args.out).read_text())
    for r in res["rows"]:
        d = Path(args.runs_dir) / f"{r['network']}_{r['method']}"
        r["stalls"] = stalls(d / "procs", d / "sim")
    res.update(summary=summarise(res["rows"]), reanalysed=bench_provenance())
    atomic_write_json(Path(args.out), res)
    return res


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    if args.reanalyse:
        if not Path(args.out).is_file():
            print(f"lowbw bench e10check: --reanalyse: {args.out} does not exist", file=sys.stderr)
            return 2
        print(table(reanalyse(args)))
        return 0
    try:
        nets, mcfg, skipped = plan(args)
        if not args.dry_run:
            _require_root()
    except ValueError as e:
        print(f"lowbw bench e10check: {e}", file=sys.stderr)
        return 2
    if args.dry_run:
        for n, keys in nets.items():
            why = skipped.get(n)
            print(f"{n}: {json.dumps(keys)}" + (f"  (skipped: {why})" if why else f"  x {', '.join(mcfg)}"))
        return 0
    res = run_check(args, nets, mcfg, skipped)
    if args.strict and res["conditions"]["busy"]:
        return 1  # run_check printed why and wrote nothing
    print(table(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
