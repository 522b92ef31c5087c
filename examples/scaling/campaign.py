"""Run config/scaling.yaml's campaign (issue 44) in the order its sweeps decide it, and store each finished run.

The profile (``snakemake --profile config/profiles/scaling``) reruns the same runs from the picks written in the
config as literals; this script makes them the first time, when the picks are not known yet:

1. the inner-lr sweep at gpt-tiny (DP, seed 0) -> gpt-tiny's inner lr;
2. the outer-lr sweep at gpt-tiny (every M, at its inner lr) -> the outer lr of each M;
3. the inner-lr sweeps at gpt-mini and gpt-mid -> their inner lrs;
4. DP and DiLoCo M = 1, 2, 4, 8 at every size, seed 0; 5. the other families at M = 4;
6. the outer lr checked at gpt-mini and gpt-mid (M = 4, the pick -+ 0.2); 7. seeds 1 and 2 of step 4.

Each pick is the run with the lowest final evaluation loss (``final_val_loss``); the weight decay follows the
inner lr as the recipe's 1/T (wd = 1 / (T lr)), and the cosine's floor as its 5% (lr_min = lr / 20). Picks are
written to ``runs/e12_picks.json`` as they are made.
Runs go to ``runs/<experiment>/<key~value>/...`` (``lowbw train``: a finished run is skipped, an interrupted one
resumes), ``--jobs`` at a time at the caller's priority (run it under ``nice -n 19``), and each finished run is
copied into the store (``python -m lowbw store add --cpu --to paper/measured/scaling``).

    nice -n 19 python examples/scaling/campaign.py --jobs 2 > runs/e12_campaign.log 2>&1 &
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import subprocess
import sys
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import yaml

from lowbw.workflow.grid import encode, expand, run_config

SIZES = ("tiny", "mini", "mid")
M_VALUES = (1, 2, 4, 8)
_STORE_LOCK = threading.Lock()  # one writer of the store's index.json at a time


def final_loss(run: Path) -> float | None:
    """The run's final evaluation loss, None while it is unfinished."""
    p = run / "summary.json"
    if not p.is_file():
        return None
    s = json.loads(p.read_text())
    return s.get("final_val_loss") if s.get("complete") else None


def apply_picks(cfg: dict[str, Any], picks: dict[str, Any]) -> dict[str, Any]:
    """A copy of the campaign config with the picks made so far in place of its written values."""
    cfg = copy.deepcopy(cfg)
    exps, methods = cfg["experiments"], cfg["methods"]
    for m, lr in (picks.get("outer_lr") or {}).items():
        methods[f"dl30m{m}"]["outer_lr"] = lr
        if int(m) == 4:
            methods["muloco30"]["outer_lr"] = lr
    for z, lr in (picks.get("inner_lr") or {}).items():
        names = [f"e12_{z}", f"e12_comp_{z}", f"e12_outer_{z}"]
        for n in names:
            base = exps[n]["base"]
            base["lr"], base["weight_decay"] = lr, round(1.0 / (base["steps"] * lr), 4)
            base["lr_min"] = round(0.05 * lr, 6)  # the recipe's cosine to 5% of the peak
    p4 = (picks.get("outer_lr") or {}).get("4")
    if p4 is not None:
        for z in ("mini", "mid"):
            exps[f"e12_outer_{z}"]["grid"]["outer_lr"] = [round(p4 - 0.2, 2), round(p4 + 0.2, 2)]
    return cfg


def literal_diffs(cfg: dict[str, Any], picks: dict[str, Any]) -> list[str]:
    """Where the config's written values differ from the picks (what to write into it, one line each)."""
    want, out = apply_picks(cfg, picks), []
    for name in cfg["methods"]:
        if want["methods"][name] != cfg["methods"][name]:
            out.append(f"methods.{name}: {want['methods'][name]}")
    for name in cfg["experiments"]:
        for part in ("base", "grid"):
            if want["experiments"][name].get(part) != cfg["experiments"][name].get(part):
                diff = {k: v for k, v in want["experiments"][name][part].items()
                        if cfg["experiments"][name][part].get(k) != v}
                out.append(f"experiments.{name}.{part}: {diff}")
    return out


def runs_of(cfg: dict[str, Any], exp: str, seeds: list[int] | None = None) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for params in expand(cfg["experiments"][exp], cfg["seeds"]):
        if seeds is None or params["seed"] in seeds:
            out.append((f"runs/{exp}/{encode(params)}", run_config(cfg, exp, params)))
    return out


def _same(out: Path, rc: dict[str, Any]) -> bool:
    """Whether the run at ``out`` was made with the settings ``rc`` (a pick that changed makes it stale)."""
    have = json.loads((out / "config.json").read_text())["config"]
    return all(have.get(k) == v for k, v in rc.items() if k != "name")


def train(run: tuple[str, dict[str, Any]], store: str) -> tuple[str, float | None]:
    out, rc = run
    stale = (Path(out) / "config.json").is_file() and not _same(Path(out), rc)
    if stale or final_loss(Path(out)) is None:
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
            json.dump(rc, f)
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        force = ["--force"] if stale else []  # a run of a superseded pick is redone with the new one
        r = subprocess.run([sys.executable, "-m", "lowbw", "train", "-c", f.name, "--out", out, *force], env=env,
                           capture_output=True, text=True)
        os.unlink(f.name)
        if r.returncode != 0:
            print(f"FAILED {out}: {(r.stderr or r.stdout).strip().splitlines()[-1:]}", flush=True)
            return out, None
    loss = final_loss(Path(out))
    with _STORE_LOCK:
        subprocess.run([sys.executable, "-m", "lowbw", "store", "add", "--cpu", "--to", store, out], check=False,
                       capture_output=True)
    print(f"done {out}: final_val_loss {loss}", flush=True)
    return out, loss


def phase(runs: list[tuple[str, dict[str, Any]]], jobs: int, store: str) -> dict[str, float | None]:
    with ThreadPoolExecutor(jobs) as ex:
        return dict(ex.map(lambda r: train(r, store), runs))


def best(results: dict[str, float | None], runs: list[tuple[str, dict[str, Any]]], key: str) -> float:
    ok = [(results[o], rc[key]) for o, rc in runs if results.get(o) is not None]
    if not ok:
        raise SystemExit(f"no finished run among {[o for o, _ in runs]}: cannot pick {key}")
    return min(ok)[1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="config/scaling.yaml")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--store", default="paper/measured/scaling")
    ap.add_argument("--picks", default="runs/e12_picks.json")
    ap.add_argument("--check", action="store_true",
                    help="print where the config's written values differ from --picks (exit 1 if any), run nothing")
    a = ap.parse_args()
    cfg0 = yaml.safe_load(Path(a.config).read_text())
    if a.check:
        diffs = literal_diffs(cfg0, json.loads(Path(a.picks).read_text()))
        print("\n".join(diffs) or "the config's values are the picks")
        return 1 if diffs else 0
    picks: dict[str, Any] = {"inner_lr": {}, "outer_lr": {}}

    def save():
        Path(a.picks).parent.mkdir(parents=True, exist_ok=True)
        Path(a.picks).write_text(json.dumps(picks, indent=1, sort_keys=True) + "\n")
        print(f"picks {json.dumps(picks, sort_keys=True)}", flush=True)

    def sweep_inner(z: str):
        runs = runs_of(apply_picks(cfg0, picks), f"e12_lr_{z}")
        picks["inner_lr"][z] = best(phase(runs, a.jobs, a.store), runs, "lr")
        save()

    sweep_inner("tiny")
    runs = runs_of(apply_picks(cfg0, picks), "e12_outer_tiny")
    res = phase(runs, a.jobs, a.store)
    for m in M_VALUES:
        sub = [r for r in runs if r[1]["workers"] == m]
        picks["outer_lr"][str(m)] = best(res, sub, "outer_lr")
    save()
    for z in ("mini", "mid"):
        sweep_inner(z)
    cfg = apply_picks(cfg0, picks)
    phase([r for z in SIZES for r in runs_of(cfg, f"e12_{z}", [0])], a.jobs, a.store)
    phase([r for z in SIZES for r in runs_of(cfg, f"e12_comp_{z}")], a.jobs, a.store)
    phase([r for z in ("mini", "mid") for r in runs_of(cfg, f"e12_outer_{z}")], a.jobs, a.store)
    for s in (1, 2):
        phase([r for z in SIZES for r in runs_of(cfg, f"e12_{z}", [s])], a.jobs, a.store)
    print("campaign complete", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
