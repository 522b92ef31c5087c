"""DDP communication hooks on shaped links: torch's own (none, fp16, bf16) and every lowbw compressor.

    python -m lowbw bench hooks [--rates 10mbit 100mbit 1gbit] [--steps 5] [--params 5e6] [--hooks fp16 powersgd ...]

For each link rate a :class:`lowbw.net.testbed.Testbed` with 2 workers is built (netns + tc with root, else
the labelled ``loopback-ratelimit`` emulation, which cannot slow torch's own gloo traffic). In it one DDP
training script of ours (an MLP of about ``--params`` parameters on fixed random data, SGD) runs every hook
in turn: 2 warm-up steps (DDP rebuilds its buckets after the first), then ``--steps`` timed ones, each
started after a barrier. Rows: median step time (s), bytes per step sent by rank 0 (metered by the hook's
meter, and expected from the compressor's payload sizes and the algorithm's pattern), loss after the
steps, and the time spent inside the hook *call* per step (what blocks backward). The wire time is the
expected bytes at the link rate. ``blockwise@native`` runs block-wise with gloo's all_gather next to
``blockwise`` (our ring, the hook's default for all-gathered payloads). torch's ``powerSGD_hook`` is not run: on
gloo/CPU in torch 2.13 it hangs (it calls ``Future.wait()`` inside ``then`` callbacks); compare with it on
NCCL (``python -m lowbw.bench.cuda``). Writes ``runs/bench/hooks.json`` with provenance and the targets.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel as DDP

import lowbw.compress as C
from lowbw.bench import bench_provenance
from lowbw.comm.hooks import HookTimer, make_hook, timed_hook
from lowbw.compress.artopk import index_dtype, topk_count
from lowbw.launch.rendezvous import init_process_group
from lowbw.measure import conditions
from lowbw.measure.conditions import add_strict_flag
from lowbw.net.ratelimit import install_from_env
from lowbw.net.testbed import Testbed
from lowbw.net.units import rate_mbit_arg
from lowbw.runs.io import atomic_write_json

TORCH_HOOKS = ("torch-none", "torch-fp16", "torch-bf16")
RATES_MBIT = (10, 100, 1000)
WORLD = 2


def all_hooks() -> list[str]:
    """torch's hooks each next to ours of the same kind (a drifting machine load hits both alike), then the
    other lowbw compressors, then block-wise over gloo's all_gather."""
    pairs = ["torch-none", "none", "torch-fp16", "fp16", "torch-bf16", "bf16"]
    return [*pairs, *(n for n in C.available() if n not in pairs), "blockwise@native"]


# ------------------------------------------------------------------------------------------------ worker
def _model(params: float):
    """An MLP of about ``params`` parameters: 512 -> h -> h -> 10."""
    # 512h + h^2 + 10h ~= params
    h = int((-522 + math.sqrt(522**2 + 4 * params)) / 2)
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(512, h), nn.ReLU(), nn.Linear(h, h), nn.ReLU(), nn.Linear(h, 10))


def _expected_bytes(name: str, comp, model, rec: dict, buckets: int) -> int | None:
    """Bytes rank 0 sends per step, from the payloads and the pattern (2 workers; ring or gloo's ring)."""
    dense = sum(p.numel() for p in model.parameters()) * 4
    if name in ("torch-none", "none"):
        return dense
    if name in ("torch-fp16", "torch-bf16", "fp16", "bf16"):
        return dense // 2
    if name == "powersgd":
        total = 0
        for p in model.parameters():
            ms = comp.matrix_shape(p.shape)
            total += 4 * ((ms[0] + ms[1]) * ms[2] if ms else p.numel())
        return total
    if name == "artopk":  # values all-reduced; the leader (step mod 2) also sends count + indices

        lead = rec["lead"]  # fraction of the timed steps rank 0 led
        total = 0.0
        for p in model.parameters():
            k = topk_count(comp.ratio, p.numel())
            total += 4 * k + lead * (8 + k * torch.empty(0, dtype=index_dtype(p.numel())).element_size())
        return round(total)
    if comp.summable:
        return rec["data"]
    return rec["nbytes"] + 80 * buckets  # one packed ring all-gather per bucket (+ its 80-byte header)


def _run_hook(name: str, spec: dict, dist, rank: int) -> dict:
    model = _model(spec["params"])
    ddp = DDP(model)
    state, comp = None, None
    rec = {"nbytes": 0, "data": 0, "steps": 0}
    if name.startswith("torch-"):
        hook = {"torch-none": None, "torch-fp16": default_hooks.fp16_compress_hook,
                "torch-bf16": default_hooks.bf16_compress_hook}[name]
        st = None
    else:
        base, _, gather = name.partition("@")
        state, hook = make_hook(base, module=model, seed=rank, gather=gather or "auto", timeout=600,
                                **spec["params_of"].get(base, {}))
        comp = state.compressor
        orig = comp.compress

        def compress(*a, **k):
            p = orig(*a, **k)
            if rec["steps"] > 0:  # count the timed steps only
                rec["nbytes"] += p.nbytes
                rec["data"] += p.data_nbytes
            return p

        comp.compress = compress
        st = state

    timer = HookTimer()
    if hook is not None:
        timed, timer = timed_hook(hook)
        ddp.register_comm_hook(st, timed)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    g = torch.Generator().manual_seed(1000 + rank)
    x, y = torch.randn(spec["batch"], 512, generator=g), torch.randint(0, 10, (spec["batch"],), generator=g)
    times, hooks, loss = [], [], float("nan")
    for step in range(2 + spec["steps"]):
        timed_step = step >= 2
        if timed_step and state is not None and rec["steps"] == 0:
            rec["steps"] = 1
            m0, b0 = state.meter.bytes_sent, state.stats.buckets
        dist.barrier()
        timer.seconds = 0.0
        t0 = time.perf_counter()
        opt.zero_grad()
        out = F.cross_entropy(ddp(x), y)
        out.backward()
        opt.step()
        dt = time.perf_counter() - t0
        loss = float(out.detach())
        if timed_step:
            times.append(dt)
            hooks.append(timer.seconds)
    k = spec["steps"]
    row = {"hook": name, "step_s": statistics.median(times), "hook_call_s": statistics.median(hooks),
           "loss": loss, "params": sum(p.numel() for p in model.parameters())}
    if state is not None:
        buckets = (state.stats.buckets - b0) // k
        row["bytes_metered"] = (state.meter.bytes_sent - m0) / k
        per_step = {kk: v / k for kk, v in rec.items()}
        per_step["lead"] = sum(1 for s in range(2, 2 + k) if s % WORLD == 0) / k  # warm-up: steps 0, 1
        row["bytes_expected"] = _expected_bytes(name.partition("@")[0], comp, model, per_step, buckets)
        row["buckets"] = buckets
        state.close()
    else:
        row["bytes_metered"] = None
        row["bytes_expected"] = _expected_bytes(name, None, model, rec, 0)
    return row


def _worker(spec_path: str) -> int:
    from datetime import timedelta

    spec = json.loads(Path(spec_path).read_text())
    install_from_env()  # loopback-ratelimit only; the kernel shapes netns-tc links
    init_process_group("gloo", timedelta(seconds=600))  # its store listens on MASTER_ADDR only
    torch.set_num_threads(1)
    rank = dist.get_rank()
    rows = []
    for name in spec["hooks"]:
        rows.append(_run_hook(name, spec, dist, rank))
        if rank == 0:
            print(f"[hooks] {spec['rate_mbit']} Mbit/s {name}: {rows[-1]['step_s']:.3f} s/step", file=sys.stderr)
    if rank == 0:
        Path(spec["out"]).write_text(json.dumps(rows))
    dist.destroy_process_group()
    return 0


# ------------------------------------------------------------------------------------------------ driver
def run(rates=RATES_MBIT, hooks=None, steps: int = 5, params: float = 5e6, batch: int = 32,
        emulation: str = "auto", out: str | None = "runs/bench/hooks.json", timeout: float = 3000,
        strict: bool = False) -> dict:
    hooks = list(hooks or all_hooks())
    rows, testbeds = [], []
    whole = conditions.record().start()
    for rate in rates:
        bed = conditions.record().start()  # this rate's: its rows' mark
        with tempfile.TemporaryDirectory(prefix="lowbw-hooks-") as tmp:
            os.chmod(tmp, 0o755)
            spec_path, res_path, log_path = Path(tmp, "spec.json"), Path(tmp, "rows.json"), Path(tmp, "log")
            spec_path.write_text(json.dumps({"hooks": hooks, "steps": steps, "params": params, "batch": batch,
                                             "rate_mbit": rate, "out": str(res_path),
                                             "params_of": {"twobit": {"threshold": 0.001}}}))
            env = dict(os.environ)
            root = str(Path(__file__).resolve().parents[2])
            env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
            with Testbed(WORLD, rate=f"{rate}mbit", emulation=emulation) as tb, open(log_path, "w") as lf:
                codes = tb.run([sys.executable, "-m", "lowbw.bench.hooks", "--worker", str(spec_path)], env=env,
                               timeout=timeout, grace=30, stdout=lf, stderr=subprocess.STDOUT)
                desc = tb.describe()
            if any(codes) or not res_path.exists():
                raise RuntimeError(f"hook benchmark workers failed at {rate} Mbit/s (exit codes {codes}):\n"
                                   + log_path.read_text()[-4000:])
            desc["conditions"] = bed.stop().to_json(samples=False)
            testbeds.append(desc)
            for r in json.loads(res_path.read_text()):
                wire = r["bytes_expected"] * 8 / (rate * 1e6) if r["bytes_expected"] is not None else None
                rows.append({**r, "rate_mbit": rate, "wire_s": wire, "emulation": desc["emulation"],
                             "busy": desc["conditions"]["busy"]})
    result = {
        "rows": rows, "targets": targets(rows), "testbeds": testbeds,
        "config": {"rates_mbit": list(rates), "hooks": hooks, "steps": steps, "params": params, "batch": batch,
                   "workers": WORLD},
        "notes": ["torch's powerSGD_hook is not run: on gloo/CPU in torch 2.13 it hangs (Future.wait() inside "
                  "then callbacks); compare on NCCL with python -m lowbw.bench.cuda"],
        "provenance": bench_provenance(),
        "conditions": whole.stop().to_json(),
    }
    if conditions.check(whole.conditions, "lowbw bench hooks", out, strict) and out:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        atomic_write_json(out, result)
    return result


def targets(rows: list[dict]) -> dict:
    """The issue's targets, evaluated where the rows allow (None: not measured)."""
    by = {(r["hook"], r["rate_mbit"]): r for r in rows}
    out: dict = {}
    for rate in sorted({r["rate_mbit"] for r in rows}):
        ours, theirs = by.get(("fp16", rate)), by.get(("torch-fp16", rate))
        if ours and theirs and rate >= 100:
            ratio = ours["step_s"] / theirs["step_s"]
            out[f"fp16_step_vs_torch_{rate}mbit"] = {"ratio": ratio, "target": 1.03, "ok": ratio <= 1.03}
        if ours and ours.get("wire_s"):
            frac = ours["hook_call_s"] / ours["wire_s"]
            out[f"fp16_hook_call_vs_wire_{rate}mbit"] = {"fraction": frac, "target": 0.10, "ok": frac < 0.10}
        ps, dense = by.get(("powersgd", rate)), by.get(("none", rate)) or by.get(("torch-none", rate))
        if ps and dense and ps.get("bytes_metered") is not None:
            frac = ps["bytes_metered"] / dense["bytes_expected"]
            out[f"powersgd_bytes_vs_dense_{rate}mbit"] = {"fraction": frac, "target": 0.05, "ok": frac <= 0.05}
        bw, bn = by.get(("blockwise", rate)), by.get(("blockwise@native", rate))
        if bw and bn:
            out[f"blockwise_ring_vs_native_gather_{rate}mbit"] = {"ratio": bw["step_s"] / bn["step_s"]}
    return out


def table(result: dict) -> str:
    def f(x, spec):
        return "-" if x is None else format(x, spec)

    lines = [f"{'Mbit/s':>6} {'hook':<17} {'step s':>8} {'MB/step':>8} {'expected':>8} {'wire s':>7} "
             f"{'in hook ms':>10} {'loss':>7}"]
    for r in result["rows"]:
        mb = None if r["bytes_metered"] is None else r["bytes_metered"] / 1e6
        lines.append(f"{r['rate_mbit']:>6} {r['hook']:<17} {r['step_s']:>8.3f} {f(mb, '.3f'):>8} "
                     f"{f(r['bytes_expected'] / 1e6, '.3f'):>8} {f(r['wire_s'], '.3f'):>7} "
                     f"{r['hook_call_s'] * 1e3:>10.2f} {r['loss']:>7.4f}")
    for k, v in result["targets"].items():
        lines.append(f"target {k}: " + ", ".join(f"{a}={b:.4g}" if isinstance(b, float) else f"{a}={b}"
                                                  for a, b in v.items()))
    em = sorted({r["emulation"] for r in result["rows"]})
    lines.append(f"emulation: {', '.join(em)}; bytes: sent by rank 0 per step; wire s: expected bytes at the rate")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m lowbw bench hooks", description=__doc__.splitlines()[0])
    ap.add_argument("--worker", metavar="SPEC", help=argparse.SUPPRESS)
    ap.add_argument("--rates", type=rate_mbit_arg("--rates"), nargs="+", default=list(RATES_MBIT),
                    help="link rates with their unit, e.g. 10mbit 100mbit 1gbit")
    ap.add_argument("--hooks", nargs="+", default=None, help="hooks to run (default: all): " + " ".join(all_hooks()))
    ap.add_argument("--steps", type=int, default=5, help="timed steps per hook (after 2 warm-up steps)")
    ap.add_argument("--params", type=float, default=5e6, help="model parameters (about)")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--emulation", default="auto", choices=["auto", "netns-tc", "loopback-ratelimit"])
    ap.add_argument("--timeout", type=float, default=3000, help="seconds per link rate before the workers are killed")
    ap.add_argument("--out", default="runs/bench/hooks.json")

    add_strict_flag(ap)
    a = ap.parse_args(argv)
    if a.worker:
        return _worker(a.worker)
    known = all_hooks()
    for h in a.hooks or []:
        if h not in known:
            print(f"lowbw bench hooks: unknown hook {h!r}; allowed: {' '.join(known)}", file=sys.stderr)
            return 2
    if a.steps < 1 or a.params < 1e3 or any(r <= 0 for r in a.rates):
        print(f"lowbw bench hooks: need --steps >= 1 (got {a.steps}), --params >= 1000 (got {a.params:g}) and "
              f"positive --rates (got {a.rates})", file=sys.stderr)
        return 2
    rates = [int(r) if float(r).is_integer() else r for r in a.rates]
    res = run(rates, a.hooks, a.steps, a.params, a.batch, a.emulation, a.out, a.timeout, a.strict)
    if a.strict and res["conditions"]["busy"]:
        return 1  # run printed why and wrote nothing
    print(table(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
