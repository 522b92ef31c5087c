"""``python -m lowbw advise``: rank every method for the user's model, workers and network (see
:mod:`lowbw.advise`). Bad input is refused in one line naming it, before any work; nothing is trained.

    python -m lowbw advise --model resnet20 --workers 8 --rate 10mbit [--latency 20ms] [--json]
    python -m lowbw advise --model-file my_model.py:build --workers 4 --rate 100mbit --step-ms 35
    python -m lowbw advise --params 1.3e9 --workers 16 --rate 1gbit --step-ms 400
    python -m lowbw advise --build-efficiency runs paper/generated/stats/efficiency.csv
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from typing import Any

__all__ = ["add_parser", "main", "format_table"]

WIDTH = 100  # the table fits a terminal this wide


def add_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser("advise", help="which method reaches your target soonest on your model and network",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    m = p.add_mutually_exclusive_group()
    m.add_argument("--model", help="one of lowbw's models (lowbw.train.models.MODELS)")
    m.add_argument("--model-file", help="path/to/module.py:build, build() returns your torch.nn.Module")
    m.add_argument("--params", type=float, help="parameter count only (a transformer's shapes), e.g. 1.3e9")
    p.add_argument("--workers", type=int, help="data-parallel workers (>= 1)")
    p.add_argument("--rate", help="every worker's link rate each way, tc units: 10mbit, 1gbit")
    p.add_argument("--rates", help="one rate per worker, comma-separated (in place of --rate)")
    p.add_argument("--latency", default="0ms", help="one-way latency per message (default 0ms), e.g. 20ms")
    p.add_argument("--bucket-mb", type=float, default=25.0,
                   help="MB per bucket of a compressed exchange, one call per bucket and round (DDP's "
                        "bucket_cap_mb; default 25); 0: one call per tensor and part")
    t = p.add_mutually_exclusive_group()
    t.add_argument("--target", type=float, help="target test accuracy (a fraction, higher is better)")
    t.add_argument("--target-loss", type=float, help="target validation loss (lower is better)")
    c = p.add_mutually_exclusive_group()
    c.add_argument("--step-ms", type=float, help="your device's forward+backward time per step (ms)")
    c.add_argument("--measure", action="store_true",
                   help="time forward+backward and every method's compression on the device at hand (with "
                        "--model-file the file must also define example_input(batch), returning one batch of your "
                        "model's inputs)")
    p.add_argument("--device", default="cpu",
                   help="your device, whose compression times are used: cpu (this machine's, measured) or a GPU "
                   "(v100, a100, h100, h200: measured where stored, else modelled from its memory bandwidth)")
    p.add_argument("--batch", type=int, default=32, help="samples per worker and step (default 32)")
    p.add_argument("--dense-steps", type=float, help="dense training's steps to your target (default: measured "
                   "on a like workload, else 1000)")
    p.add_argument("--efficiency", help="efficiency table (default: paper/generated/stats/efficiency.csv if "
                   "built, else the one shipped with lowbw)")
    p.add_argument("--max-steps", type=float,
                   help="your training budget in steps: a method predicted to need more ranks after those that fit")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--top", type=int, default=0, help="rows to print (default all)")
    p.add_argument("--validate", action="store_true",
                   help="train the top three and dense for a short horizon on the testbed (root) and print "
                   "predicted against measured step time")
    p.add_argument("--validate-steps", type=int, default=24,
                   help="--validate: steps measured per method, rounded up to whole periods (default 24)")
    p.add_argument("--validate-dir", default="runs/advise_validate",
                   help="--validate: where the testbed runs and validation.json go (default runs/advise_validate)")
    p.add_argument("--validate-realtime", type=int, default=10, metavar="PRIO",
                   help="--validate: the testbed's workers under SCHED_RR at this priority, as if each emulated "
                   "machine had its CPU to itself (default 10); 0: the fair scheduler")
    p.add_argument("--build-efficiency", nargs=2, metavar=("RUNS", "OUT"),
                   help="write the efficiency table from the run directories under RUNS to OUT, and exit")
    return p


def _links(args) -> tuple:
    """The workers' links from --rate/--rates/--latency (one-line errors naming the bad value)."""
    # lazy: `lowbw --help` imports this module for its parser; the advisor loads when used
    from lowbw.advise.rates import delay_s, rate_bps
    from lowbw.net.costlinks import WorkerLink

    if args.workers is None or args.workers < 1:
        raise ValueError(f"--workers {args.workers!r}: give a number of workers >= 1")
    alpha = delay_s(args.latency)
    if args.rates:
        rates = [rate_bps(r) for r in args.rates.split(",")]
        if len(rates) != args.workers:
            raise ValueError(f"--rates {args.rates!r}: {len(rates)} rates for {args.workers} workers")
    elif args.rate:
        rates = [rate_bps(args.rate)] * args.workers
    else:
        raise ValueError("give --rate (e.g. 10mbit) or --rates")
    return tuple(WorkerLink(r, r, alpha, 0.0) for r in rates)


def _workload(args):
    # lazy: `lowbw --help` imports this module for its parser; the advisor loads when used
    from lowbw.advise import workload

    if args.batch < 1:
        raise ValueError(f"--batch {args.batch}: must be >= 1")
    if args.step_ms is not None and not args.step_ms >= 0:
        raise ValueError(f"--step-ms {args.step_ms}: must be >= 0")
    if args.model:
        return workload.from_model(args.model, args.batch, args.step_ms, args.measure)
    if args.model_file:
        return workload.from_file(args.model_file, args.batch, args.step_ms, args.measure)
    if args.params is not None:
        if args.measure:
            raise ValueError("--measure needs a model (--model or --model-file), not --params")
        return workload.from_params(args.params, args.step_ms)
    raise ValueError("give --model, --model-file or --params")


def _fmt_s(s: float | None) -> str:
    if s is None or not math.isfinite(s):
        return "never"
    for unit, v in (("d", 86400), ("h", 3600), ("min", 60), ("s", 1)):
        if s >= v:
            return f"{s / v:.3g} {unit}"
    return f"{s * 1e3:.3g} ms"


def _fmt_b(b: float) -> str:
    for unit, v in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if b >= v:
            return f"{b / v:.3g} {unit}"
    return f"{b:.3g} B"


def format_table(ranking: list, top: int = 0) -> str:
    """The ranking as a plain-text table of at most ``WIDTH`` columns."""
    head = f"{'#':>2} {'method':<13}{'what':<21}{'collective':<11}{'bytes/step':>10}{'step':>9}{'steps':>7}" \
           f"{'to target':>11}  confidence"
    lines = [head, "-" * len(head)]
    for i, a in enumerate(ranking[:top or None], 1):
        d = a.as_dict()
        r = d["predicted_steps_ratio"]
        what = d["what"] if len(d["what"]) <= 20 else d["what"][:19] + "~"
        ttt = _fmt_s(d["predicted_ttt_s"]) if d["reaches"] or r is None else "> budget"
        lines.append(f"{i:>2} {d['method']:<13}{what:<21}{d['collective']:<11}{_fmt_b(d['bytes_per_step']):>10}"
                     f"{_fmt_s(d['predicted_step_s']):>9}{f'{r:.2f}x' if r is not None else 'never':>7}"
                     f"{ttt:>11}  {d['confidence']}")
    return "\n".join(ln[:WIDTH] for ln in lines)


def advise(args) -> dict[str, Any]:
    """The ranking and its inputs (what --json prints)."""
    # lazy: `lowbw --help` imports this module for its parser; the advisor loads when used
    from lowbw.advise import efficiency
    from lowbw.advise.device import device
    from lowbw.advise.rank import rank, reasons

    links = _links(args)  # cheap checks first: bad input fails before torch is imported
    dev = device(args.device)
    if args.validate:
        # lazy: `lowbw --help` imports this module for its parser; the advisor loads when used
        from lowbw.advise.validate import check_inputs

        if args.validate_steps < 1:
            raise ValueError(f"--validate-steps {args.validate_steps}: must be >= 1")
        if not 0 <= args.validate_realtime <= 99:
            raise ValueError(f"--validate-realtime {args.validate_realtime}: a SCHED_RR priority is 1-99 (0: the "
                             "fair scheduler)")
        check_inputs(args.model, realtime=args.validate_realtime)
    if args.bucket_mb < 0:
        raise ValueError(f"--bucket-mb {args.bucket_mb:g}: MB per bucket is >= 0 (0: one call per tensor)")
    if args.max_steps is not None and not args.max_steps > 0:
        raise ValueError(f"--max-steps {args.max_steps:g}: a budget is a positive number of steps")
    if args.target is not None and not 0 < args.target <= 1:
        raise ValueError(f"--target {args.target}: an accuracy is a fraction in (0, 1]")
    rows = efficiency.read(args.efficiency)
    w = _workload(args)
    metric, target = (("val_loss", args.target_loss) if args.target_loss is not None
                      else ("test_acc", args.target) if args.target is not None
                      else ("val_loss" if w.kind == "lm" else "test_acc", None))
    if target is None:  # the middle of the targets measured for this metric
        have = sorted({r["target"] for r in rows if r["metric"] == metric})
        target = have[len(have) // 2] if have else None
    bucket_mb = args.bucket_mb or None
    if args.measure:
        from lowbw.advise.device import device_at_hand  # lazy: imports torch

        if dev.kind != device_at_hand():
            raise ValueError(f"--device {args.device} with --measure: the device at hand is {device_at_hand()}")
    ranking = rank(w, links, rows, metric, target, args.dense_steps, budget=args.max_steps, bucket_mb=bucket_mb,
                   dev=dev, measure=args.measure)
    bases = sorted({a.compression.basis for a in ranking if a.compression and a.candidate.compressor != "none"})
    from lowbw.advise import size_trend  # lazy: `lowbw --help` imports this module; the trends load when used

    ranking, size_lines = size_trend.annotate(ranking, w.params, len(links), size_trend.read())
    inputs = {"model": w.model, "params": w.params, "kind": w.kind, "workers": len(links),
              "rates_bps": [x.up_bps for x in links], "latency_s": links[0].up_alpha_s, "metric": metric,
              "target": target, "compute_s": w.compute_s, "compute_basis": w.compute_basis, "batch": args.batch,
              "dense_steps": ranking[0].dense_steps if ranking else None,
              "dense_steps_source": _dense_source(args, ranking), "max_steps": args.max_steps,
              "bucket_mb": bucket_mb, "efficiency_table": str(args.efficiency or efficiency.default_path()),
              "device": dev.name, "compress_bases": bases}
    return {"ranking": [a.as_dict() for a in ranking], "inputs": inputs,
            "reasons": reasons(ranking, links), "size_trend": size_lines, "_ranking": ranking, "_links": links}


def _dense_source(args, ranking: list) -> str:
    """Where "dense needs N steps" comes from: the user's --dense-steps, the measured runs (workload, workers,
    target, experiment, as the efficiency table names them), or the default where no dense run reached it."""
    if args.dense_steps:
        return "your --dense-steps"
    dense = next((a for a in ranking if a.candidate.name == "dense"), None)
    if dense is not None and math.isfinite(dense.efficiency.dense_steps):
        return "dense's mean in the runs of " + dense.efficiency.basis.partition(" in ")[2]
    return "no measured dense run reached this target: a default (give --dense-steps)"


def main(args) -> int:
    try:
        if args.build_efficiency:
            # lazy: `lowbw --help` imports this module for its parser; the advisor loads when used
            from lowbw.advise import efficiency

            rows, prov = efficiency.build(args.build_efficiency[0])
            print(efficiency.write(rows, prov, args.build_efficiency[1]))
            return 0
        out = advise(args)
    except ValueError as e:
        print(f"lowbw advise: {e}", file=sys.stderr)
        return 2
    ranking = out.pop("_ranking")
    out.pop("_links")
    if not args.json:
        i = out["inputs"]
        roof = " (a roofline of its memory bandwidth: --json per row)" if "modelled" in i["compress_bases"] else ""
        print(f"{i['model']} ({i['params']:,} parameters), {i['workers']} workers; compute "
              f"{_fmt_s(i['compute_s'])} per step: {i['compute_basis']}; compression on {i['device']}: "
              f"{' / '.join(i['compress_bases']) or '-'}{roof}")
        tgt = f"{i['metric']} {i['target']:g}" if i["target"] is not None else i["metric"]
        print(f"target: {tgt}; times assume dense needs {i['dense_steps']:.0f} steps ({i['dense_steps_source']}); "
              f"efficiency: {i['efficiency_table']}")
        print(format_table(ranking, args.top))
        print("\nwhy:")
        print("\n".join("  " + r for r in out["reasons"]), flush=True)
        if out["size_trend"]:
            print("\n" + "\n".join(out["size_trend"]), flush=True)
    if args.validate:
        out.update(_validate(args, ranking, out["inputs"]))
    if args.json:
        print(json.dumps(out, indent=1))
    return 0


def _validate(args, ranking: list, inputs: dict[str, Any]) -> dict[str, Any]:
    """--validate after the ranking: the checks (printed as a table unless --json) and the machine's
    conditions while they ran, as --json's ``validation`` and ``validation_conditions``."""
    # lazy: `lowbw --help` imports this module for its parser; the advisor loads when used
    from lowbw.advise.validate import TOLERANCE, format_checks, validate, write_checks
    from lowbw.measure import conditions

    with conditions.record() as rec:
        checks = validate(ranking, inputs, args.validate_dir, args.validate_steps, args.validate_realtime)
    cond = rec.stop()
    conditions.check(cond, "lowbw advise --validate")
    where = write_checks(args.validate_dir, checks, {**inputs, "validate_realtime": args.validate_realtime},
                         cond.to_json(samples=False))
    if not args.json:
        sched = (f"SCHED_RR {args.validate_realtime}" if args.validate_realtime else "the fair scheduler")
        print(f"\nvalidate: {len(checks)} methods on the testbed, {inputs['workers']} processes on "
              f"{cond.cores} cores under {sched} ({conditions.describe(cond)}); ms per step; the CPU terms "
              f"(compute, opt, compress, outer) x the co-location factor; rest = step - compute - compress - comm")
        print(format_checks(checks))
        for src in dict.fromkeys(c.colocation_source for c in checks):
            print(f"co-location: {src}")
        ok = sum(c.within for c in checks)
        print(f"{ok} of {len(checks)} methods within {100 * TOLERANCE:.0f}% of the measured step; {where}")
    return {"validation": [c.as_dict() for c in checks], "validation_conditions": cond.to_json(samples=False)}
