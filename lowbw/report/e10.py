"""E10 -- unequal and unsteady networks (``runs/e10_<network>``): the same schemes of four workers on five
networks (the language model: eight; one experiment per network, the network in its base): ``even`` (every
link the same), ``oneslow`` (one worker's link slower), ``asym`` (uplinks slower than downlinks), ``trace``
(every link following a bandwidth trace), ``straggler`` (one worker computing longer), and on the language
model (issue 48) ``loss1``/``loss10`` (1% and 10% of every uplink's packets lost at random: TCP resends them,
the clock charges its recovery, :mod:`lowbw.net.tcploss`) and ``churn`` (a worker leaves and rejoins; only
the schemes that tolerate it run there). Which schemes degrade gracefully, and by how much?

Every time here is the run's own virtual clock (``t_virtual``: per-worker links timed by
:mod:`lowbw.net.costlinks`, the trace read at each step's virtual time, a synchronous step waiting for its
slowest worker), never a re-timing at another link: the alpha-beta coefficients a run records are those of
equal links and cannot say what unequal ones cost.

Slow-down of a scheme on a network = its virtual time to the target accuracy there / on ``even``, per seed
(the same scheme and seed: for synchronous schemes on the model clock the two runs train identically and
differ only in time), then mean and standard deviation over the seeds where both reached the target.

At a fixed wall-clock budget: a network's budget is its shortest run (so that every seed of every method has a
value at it), and each run is judged by its last evaluation at or before it (``at_budget``; ``at_even_budget``:
at the even network's budget, what the same wall-clock buys on each network); the method with the best mean over
all seeds leads, by its margin over the next.

Top-k whose collective the cost model chooses (``adaptive: moo`` at one density, :mod:`lowbw.train.adaptive`): which
collective its policy picks on each network is recomputed here from the run's config at every logged step's
virtual time (:func:`lowbw.train.adaptive.run_collective`, the links the run's clock had then), and it is compared
with the same top-k without the policy (``FIXED``).

The check against the testbed (``runs/bench/e10check.json``, ``python -m lowbw bench e10check``; optional:
the paper builds without it) is the table ``check`` and the ``ETenCheck*`` numbers, labelled with the machine
and date that measured it; the language model's numbers carry ``runs/bench/loss.json`` (``python -m lowbw bench
loss``: what loss costs one message on the testbed, against the clock's model of this commit) as
``ETenLmLossBench*``, and ``runs/bench/loss_train.json`` (``python -m lowbw bench loss_train``: what loss costs a
training run's exchanges on the testbed, against the same run's clock) as ``ETenLmLossTrain*``.
"""

from __future__ import annotations

import json
import math
from functools import partial

import pandas as pd

from lowbw.bench.loss import rows_of as loss_rows
from lowbw.net.units import parse_rate
from lowbw.report.catalog import E10_NETWORKS, MACROS, PREFIX, word
from lowbw.report.common import fmt_duration, plotting, training_runs
from lowbw.report.experiment import Context, Experiment, Stats
from lowbw.report.goal import goal_of
from lowbw.report.latex import booktabs, escape, fmt_num
from lowbw.report.stats import censored
from lowbw.report.training import time_to_target
from lowbw.train.adaptive import run_collective
from lowbw.train.config import RunConfig
from lowbw.train.faults import parse_faults
from lowbw.train.targets import Target
from lowbw.workflow.hoststore import cores_of

__all__ = ["E10", "E10LM", "NETWORKS", "BASELINE_NETWORK", "EXPERIMENTS", "TARGET", "RUNS_PREFIX"]

BASELINE_NETWORK = "even"  # every other network is compared with it
# the synchronous method the asynchronous methods' papers compare with: each method's time to its final loss
REFERENCE = "diloco16"
# the highest target test accuracy: the config's target for the dataset unless that is higher, because E10's
# runs are half as long as E9's and the methods that communicate every 16 steps end MNIST near 88%
TARGET = 0.85
NETWORKS = [BASELINE_NETWORK, *E10_NETWORKS]  # in the order of the table and figure
# experiment key -> the prefix of its runs' experiments, one per network: e10_even, ...; e10_lm_even, ...
RUNS_PREFIX = {"e10": "e10_", "e10lm": "e10_lm_"}
EXPERIMENTS = [f"e10_{n}" for n in NETWORKS]
AUTO_FIXED = {"topk1auto": "topk1"}  # a method whose collective the policy chooses -> the same without policy
# the chosen collectives in words
COLLECTIVE_WORDS = {"allgather": "all-gather", "artopk-ring": "AR-Top-$k$ over a ring",
                    "artopk-tree": "AR-Top-$k$ over a tree"}
# panel titles of the figure
TITLES = {"oneslow": "one slow worker link", "asym": "slow uplinks", "trace": "bandwidth trace",
          "straggler": "one straggler", "loss1": "1% packet loss", "loss10": "10% packet loss",
          "churn": "a worker leaves, rejoins"}


def _links_label(r) -> str:
    """What the network of a run is, from its config: the per-worker rates, uplinks, trace or speeds."""

    def _mbit(v) -> str:
        return fmt_num(float(v))

    def _lst(v) -> list:
        if isinstance(v, str):  # lowbw.runs.results spells list-valued config keys as JSON text
            v = json.loads(v) if v.startswith("[") else []
        return list(v) if isinstance(v, list | tuple) else []

    rates, ups, speeds = _lst(r.get("worker_bandwidth_mbit")), _lst(r.get("worker_uplink_mbit")), _lst(
        r.get("worker_speeds"))
    parts = []
    if rates and len(set(rates)) > 1:
        slow = min(rates)
        parts.append(f"{sum(1 for x in rates if x == slow)} of {len(rates)} at {_mbit(slow)} Mbit/s, "
                     f"the rest {_mbit(max(rates))}")
    elif rates:
        parts.append(f"{_mbit(rates[0])} Mbit/s")
    else:
        parts.append(f"{_mbit(r['bandwidth_mbit'])} Mbit/s")
    if ups:
        parts.append(f"uplinks {_mbit(min(ups))} Mbit/s")
    if r.get("bandwidth_trace"):
        parts = [f"trace {r['bandwidth_trace']}"]
    if speeds and max(speeds) != min(speeds):
        parts.append(f"one worker {fmt_num(max(speeds) / min(speeds))}x compute")
    v = r.get("link_loss")
    loss = float(v) if v is not None and v == v else 0.0  # NaN: a run of a config without the key
    if loss:
        parts.append(f"{fmt_num(round(100 * loss, 6))}% of packets lost on every uplink")
    for c in parse_faults([str(f) for f in _lst(r.get("faults"))], int(r["workers"])):
        parts.append(f"worker {c.rank} away after step {c.leave_step}"
                     + (f", back after {c.rejoin_step}" if c.rejoin_step is not None else " for good"))
    return ", ".join(parts)


def stats(ctx: Context, key: str = "e10") -> Stats | None:
    """Tidy ``runs`` (per run: network, method, seed, ``ttt_s`` virtual seconds to the target (NaN: never),
    ``t_end_s`` the whole run's virtual seconds, final test accuracy, ``ttt_ratio``/``end_ratio`` against the
    same method and seed on ``even``) and ``slowdown`` (per network and method: means and standard deviations
    over seeds, ``seeds_reached``: seeds with a finite ``ttt_ratio``)."""
    import numpy as np

    pre = RUNS_PREFIX[key]
    runs, mets = training_runs(ctx, [f"{pre}{n}" for n in NETWORKS])
    if runs is None or BASELINE_NETWORK not in {e.removeprefix(pre) for e in runs["experiment"]}:
        return None
    goal = goal_of(ctx.config, runs)
    if goal.metric == "test_acc" and goal.target.value > TARGET:
        goal = goal_of({"targets": {str(runs["dataset"].iloc[0]): TARGET}}, runs)
    target = goal.target
    rows, curves = [], []
    for _, r in runs.iterrows():
        m = mets[(mets["run"] == r["run"]) & (mets["experiment"] == r["experiment"])]
        curves.append(m)
        rows.append({"network": r["experiment"].removeprefix(pre), "method": r["method"], "seed": int(r["seed"]),
                     "run": r["run"], "links": _links_label(r), "ttt_s": time_to_target(m, target),
                     "t_end_s": float(r["t_virtual"]), "quality": float(r[goal.final]),
                     "workers": int(r["workers"]), "steps": int(r["step"])})
    per_run = pd.DataFrame(rows)
    # the wall-clock budget of a network: its shortest run, so that every seed of every method has a value at it
    budget = per_run.groupby("network")["t_end_s"].min().to_dict()
    per_run["budget_s"] = per_run["network"].map(budget)
    per_run["at_budget"] = [_at_time(m, goal.metric, b) for m, b in zip(curves, per_run["budget_s"])]
    # ... and the even network's, on every network: what the same wall-clock buys there
    b0 = budget.get(BASELINE_NETWORK, math.nan)
    per_run["at_even_budget"] = [_at_time(m, goal.metric, b0) for m in curves]
    # ... and the wall-clock of the same seed's dense run on the even network (what loss costs at equal time)
    dense = per_run[(per_run["network"] == BASELINE_NETWORK) & (per_run["method"] == "dense")]
    dense_end = dict(zip(dense["seed"], dense["t_end_s"]))
    per_run["at_dense_end"] = [_at_time(m, goal.metric, dense_end.get(s, math.nan))
                               for m, s in zip(curves, per_run["seed"])]
    # DiLoCo's final quality on each network (mean over seeds), and each run's time to reach it: the
    # asynchronous methods' papers claim a time to DiLoCo's (or synchronous training's) loss
    ref = per_run[per_run["method"] == REFERENCE]
    ref_quality = ref.groupby("network")["quality"].mean().to_dict()
    ref_end = {(r["network"], r["seed"]): r["t_end_s"] for _, r in ref.iterrows()}
    op = ">=" if goal.higher_is_better else "<="
    to_ref = [time_to_target(m, Target(goal.metric, op, ref_quality[net])) if net in ref_quality else math.nan
              for m, net in zip(curves, per_run["network"])]
    per_run["ref_speedup"] = [ref_end.get((net, s), math.nan) / t if t > 0 else math.nan
                              for net, s, t in zip(per_run["network"], per_run["seed"], to_ref)]
    base = per_run[per_run["network"] == BASELINE_NETWORK].set_index(["method", "seed"])
    ttt_ratio, end_ratio = [], []
    for _, r in per_run.iterrows():
        b = base.loc[(r["method"], r["seed"])] if (r["method"], r["seed"]) in base.index else None
        ttt_ratio.append(r["ttt_s"] / b["ttt_s"] if b is not None else math.nan)
        end_ratio.append(r["t_end_s"] / b["t_end_s"] if b is not None else math.nan)
    per_run = per_run.assign(ttt_ratio=ttt_ratio, end_ratio=end_ratio)
    order = {n: i for i, n in enumerate(NETWORKS)}
    per_run = per_run.sort_values(["network", "method", "seed"], key=lambda c: c.map(order) if c.name == "network"
                                  else c, kind="stable", ignore_index=True)

    def _ms(x) -> tuple[float, float]:
        """Mean and std over every seed; NaN where a seed has none (a time to target that never came: the
        mean of the arrivals alone is never taken, the median over all seeds is, below)."""
        x = np.asarray(x, dtype=float)
        if not len(x) or not np.isfinite(x).all():
            return math.nan, math.nan
        return float(x.mean()), float(x.std(ddof=1)) if len(x) > 1 else 0.0

    slow = []
    for (net, meth), g in per_run.groupby(["network", "method"], sort=False):
        tr, er, tt, acc = _ms(g["ttt_ratio"]), _ms(g["end_ratio"]), _ms(g["ttt_s"]), _ms(g["quality"])
        bq, eq, dq = _ms(g["at_budget"]), _ms(g["at_even_budget"]), _ms(g["at_dense_end"])
        rq = _ms(g["ref_speedup"])
        slow.append({"network": net, "method": meth, "links": g["links"].iloc[0], "ttt_mean_s": tt[0],
                     "budget_s": float(g["budget_s"].iloc[0]), "at_budget_mean": bq[0], "at_budget_std": bq[1],
                     "at_even_budget_mean": eq[0], "at_dense_end_mean": dq[0], "ref_speedup_mean": rq[0],
                     "ttt_std_s": tt[1], "ttt_median_s": censored(g["ttt_s"]).median,
                     "ttt_ratio_median": censored(g["ttt_ratio"]).median,
                     "ttt_ratio_mean": tr[0], "ttt_ratio_std": tr[1],
                     "end_ratio_mean": er[0], "end_ratio_std": er[1], f"{goal.metric}_mean": acc[0],
                     f"{goal.metric}_std": acc[1],
                     "seeds_reached": int(np.isfinite(g["ttt_ratio"].to_numpy(float)).sum()),
                     "seeds": len(g)})
    slowdown = pd.DataFrame(slow)
    tables = {"runs": per_run, "slowdown": slowdown}
    auto = _auto_choices(ctx, runs, mets, pre)
    if auto is not None:
        tables["auto"] = auto
    check = ctx.bench("e10check") if key == "e10" else None  # the testbed check ran the MLP's networks
    if check and check.get("rows"):
        tables["check"] = _check_table(check)
    loss_bench = ctx.bench("loss") if key == "e10lm" else None  # TCP's loss recovery: testbed against the clock
    if loss_bench and loss_bench.get("rows"):
        # the measured cells against the model of this commit (the one that charges the runs), not the
        # model of the commit that measured them
        tables["loss_bench"] = pd.DataFrame(loss_rows(loss_bench["cells"]) if loss_bench.get("cells")
                                            else loss_bench["rows"])
    loss_train = ctx.bench("loss_train") if key == "e10lm" else None  # a lossy training run on the testbed
    if loss_train and loss_train.get("rows"):
        tables["loss_train"] = pd.DataFrame(loss_train["rows"])
    return Stats(tables,
                 {"source": f"runs/{pre}*", "key": key, "goal": goal, "metric": goal.metric,
                  "target": target.value, "seeds": int(per_run["seed"].nunique()),
                  "workers": sorted(int(n) for n in per_run["workers"].unique()),
                  "steps": sorted(int(n) for n in per_run["steps"].unique()),
                  "networks": [n for n in NETWORKS if n in set(per_run["network"])],
                  "methods": _method_order(ctx, per_run, pre), "baseline": BASELINE_NETWORK,
                  "check": _check_meta(check) if check and check.get("rows") else None,
                  "loss_bench": _loss_meta(loss_bench) if loss_bench and loss_bench.get("rows") else None,
                  "loss_train": ({**_loss_meta(loss_train), "steps": loss_train["setting"].get("steps"),
                                  "model": loss_train["setting"].get("model"),
                                  "workers": loss_train["setting"].get("workers")}
                                 if loss_train and loss_train.get("rows") else None)})


def _at_time(m, metric: str, t: float) -> float:
    """The run's last evaluation of ``metric`` at virtual time <= ``t`` (a run that ended before keeps its last
    one); NaN where it has none by then."""
    if metric not in m or not math.isfinite(t):
        return math.nan
    e = m[m[metric].notna() & (m["t_virtual"] <= t * (1 + 1e-12))]
    return float(e.sort_values("t_virtual")[metric].iloc[-1]) if not e.empty else math.nan


def _loss_meta(doc: dict) -> dict:
    """Where and how ``runs/bench/loss.json`` (:mod:`lowbw.bench.loss`) measured."""
    prov, cond, setting = doc.get("provenance") or {}, doc.get("conditions") or {}, doc.get("setting") or {}
    return {"date": str(prov.get("date", "?"))[:10], "host": f"{prov.get('cpu', '?')}, {cores_of(prov)} cores",
            "origin": prov.get("origin"), "rate": setting.get("rate"), "cc": setting.get("congestion_control"),
            "load": cond.get("load1_max"), "busy": bool(cond.get("busy"))}


# where lowbw.bench.loss's emulators drop the packets, in words
DROPPED = {"kernel": "dropped at the sender", "userspace": "dropped on the wire"}


def _loss_bench_numbers(st: Stats) -> dict[str, str]:
    """The clock's model of TCP's loss recovery against the testbed: per lossy cell, the extra time a message
    took (mean over the cell's messages, less the same size's at no loss) and what the model charges."""
    t, meta = st.tables.get("loss_bench"), st.meta.get("loss_bench")
    if t is None or t.empty or not meta:
        return {}
    p = PREFIX[st.meta["key"]]
    cells = t[t["loss"] > 0].sort_values([c for c in ("emulator", "loss", "size") if c in t], kind="stable")

    def kb(n: int) -> str:
        return f"{fmt_num(n / 1024, 3)}\\,KiB" if n < 1 << 20 else f"{fmt_num(n / (1 << 20), 3)}\\,MiB"

    out = {f"{p}LossBenchDate": escape(meta["date"]), f"{p}LossBenchHost": escape(meta["host"]),
           f"{p}LossBenchCc": escape(str(meta["cc"])),
           f"{p}LossBenchRate": rf"{fmt_num(parse_rate(meta['rate']) / 1e6)}\,Mbit/s",
           f"{p}LossBenchList": "; ".join(
               rf"{kb(int(r['size']))} at {fmt_num(round(100 * r['loss'], 6))}\,\% "
               rf"{DROPPED.get(r.get('emulator'), 'dropped')}: {fmt_num(1e3 * r['extra_s'], 2)} ms measured, "
               rf"{fmt_num(1e3 * r['model_extra_s'], 2)} ms modelled" + (" (busy)" if r["busy"] else "")
               for _, r in cells.iterrows())}
    if meta["load"] is not None:
        out[f"{p}LossBenchLoad"] = fmt_num(float(meta["load"]), 2)
    return out


def _reference_numbers(st: Stats) -> dict[str, str]:
    """Per network, how much sooner than DiLoCo (:data:`REFERENCE`: its whole run) each method reaches DiLoCo's
    final quality there (mean over seeds, every seed reaching it; the others are left out), fastest first, and
    the fastest; what the asynchronous methods' papers claim (a time to the same loss)."""
    sd, p = st.tables["slowdown"], PREFIX[st.meta["key"]]
    out: dict[str, str] = {}
    for net in st.meta["networks"]:
        w = "Even" if net == BASELINE_NETWORK else E10_NETWORKS.get(net)
        t = sd[(sd["network"] == net) & (sd["method"] != REFERENCE) & sd["ref_speedup_mean"].notna()]
        if w is None or t.empty:
            continue
        t = t.sort_values("ref_speedup_mean", ascending=False, kind="stable")
        out[f"{p}{w}VsDiloco"] = ", ".join(rf"{escape(r['method'])} {fmt_num(float(r['ref_speedup_mean']), 3)}$\times$"
                                           for _, r in t.iterrows())
        out[f"{p}{w}VsDilocoBest"] = escape(t["method"].iloc[0])
        out[f"{p}{w}VsDilocoBestRatio"] = fmt_num(float(t["ref_speedup_mean"].iloc[0]), 3)
    return {k: v for k, v in out.items() if k in MACROS}


def _loss_train_numbers(st: Stats) -> dict[str, str]:
    """A training run under loss on the testbed (:mod:`lowbw.bench.loss_train`): per method and lossy cell, what
    loss added to the measured comm per step and what the clock charged for it."""
    t, meta = st.tables.get("loss_train"), st.meta.get("loss_train")
    if t is None or t.empty or not meta:
        return {}
    p = PREFIX[st.meta["key"]]
    cells = t[(t["loss"] > 0) & t["extra_s"].notna()]
    out = {f"{p}LossTrainDate": escape(meta["date"]), f"{p}LossTrainHost": escape(meta["host"]),
           f"{p}LossTrainSetting": escape(f"{meta['workers']} workers, {meta['model']}, {meta['steps']} steps"),
           f"{p}LossTrainList": "; ".join(
               rf"{escape(r['method'])} at {fmt_num(round(100 * r['loss'], 6))}\,\%: "
               rf"{fmt_num(1e3 * r['extra_s'], 2)} ms measured, {fmt_num(1e3 * r['clock_extra_s'], 2)} ms charged"
               + (" (busy)" if r.get("busy") else "") for _, r in cells.iterrows())}
    errs = cells["err_extra"].dropna().abs()
    if not errs.empty:
        out[f"{p}LossTrainWorst"] = fmt_num(100 * float(errs.max()), 2)
    same = t.groupby("method")["final_val_loss"].nunique()
    out[f"{p}LossTrainSameLoss"] = "the same" if bool((same == 1).all()) else "not the same"
    if meta["load"] is not None:
        out[f"{p}LossTrainLoad"] = fmt_num(float(meta["load"]), 2)
    return out


def _auto_choices(ctx: Context, runs, mets, pre: str):
    """Per adaptive run and logged step: the collective its policy chooses at that step's virtual time on the
    run's links (:func:`lowbw.train.adaptive.run_collective` on the run's ``config.json``); None without such runs."""
    if "adaptive" not in runs:
        return None
    rows = []
    for _, r in runs[runs["adaptive"].astype(str) == "moo"].iterrows():
        cfg = json.loads((ctx.runs_dir / r["experiment"] / r["run"] / "config.json").read_text())["config"]
        rc = RunConfig.from_dict({**cfg, "clock": "measured", "backend": "sim"})
        m = mets[(mets["run"] == r["run"]) & (mets["experiment"] == r["experiment"])]
        for _, x in m.iterrows():
            name, t = run_collective(rc, float(x["t_virtual"]))
            rows.append({"network": r["experiment"].removeprefix(pre), "method": r["method"],
                         "seed": int(r["seed"]), "step": int(x["step"]), "t_virtual_s": float(x["t_virtual"]),
                         "collective": name, "modelled_s": t})
    return pd.DataFrame(rows) if rows else None


def _check_table(check: dict):
    """One row per cell of ``runs/bench/e10check.json``: network, method, predicted and measured seconds per
    step and of communication, the errors."""
    keep = ("network", "method", "rate_mbit", "predicted_step_s", "measured_step_s", "err_step",
            "predicted_comm_s", "measured_comm_s", "err_comm", "predicted_compute_s", "measured_compute_s",
            "compute_scale", "overhead_ms")
    return pd.DataFrame([{**{k: r.get(k) for k in keep}, "busy": bool((r.get("conditions") or {}).get("busy")),
                          "stalls": "; ".join(f"step {int(k)}: {c:.1f} s" for k, c in r.get("stalls") or [])}
                         for r in check["rows"]])


def _check_meta(check: dict) -> dict:
    prov = check.get("provenance") or {}
    args = check.get("args") or {}
    return {"date": str(prov.get("date", "?"))[:10], "host": f"{prov.get('cpu', '?')}, {prov.get('cores', '?')} cores",
            "commit": str(prov.get("commit", "?"))[:10], "scale": args.get("scale"), "steps": args.get("steps"),
            "warmup": check.get("warmup_steps"), "skipped": dict(check.get("skipped") or {}),
            "load": [float(x) for x in check.get("load_1min") or []]
            + ([float(check["conditions"]["load1_max"])] if check.get("conditions") else [])}


def _method_order(ctx: Context, per_run, pre: str) -> list[str]:
    """The methods in the order the config's even-network grid lists them (then any others as found)."""
    exp = (ctx.config.get("experiments") or {}).get(f"{pre}{BASELINE_NETWORK}") or {}
    listed = list((exp.get("grid") or {}).get("method") or [])
    found = list(dict.fromkeys(per_run["method"]))
    return [m for m in listed if m in found] + [m for m in found if m not in listed]


def _complete(sd, net: str):
    """Rows of network ``net`` whose every seed reached the target on it and on ``even``."""
    t = sd[sd["network"] == net]
    return t[(t["seeds_reached"] == t["seeds"]) & t["ttt_ratio_mean"].notna()]


def numbers(st: Stats) -> dict[str, str]:
    sd = st.tables["slowdown"]
    p, goal = PREFIX[st.meta["key"]], st.meta["goal"]
    out = {f"{p}Target": goal.fmt(goal.target.value), f"{p}Seeds": str(st.meta["seeds"]),
           f"{p}Workers": " and ".join(str(n) for n in st.meta["workers"]),
           f"{p}Methods": str(len(st.meta["methods"])),
           f"{p}Networks": str(int(sd["network"].nunique()))}
    even = sd[(sd["network"] == BASELINE_NETWORK) & (sd["seeds_reached"] == sd["seeds"])]
    if not even.empty:
        best = even.loc[even["ttt_mean_s"].idxmin()]
        out[f"{p}EvenFastest"] = escape(best["method"])
        out[f"{p}EvenFastestTtt"] = fmt_duration(float(best["ttt_mean_s"]))
        out[f"{p}EvenLinks"] = escape(best["links"])
    for net, w in E10_NETWORKS.items():
        t = _complete(sd, net)
        if t.empty:
            continue
        out[f"{p}{w}Links"] = escape(t["links"].iloc[0])
        lo, hi = t.loc[t["ttt_ratio_mean"].idxmin()], t.loc[t["ttt_ratio_mean"].idxmax()]
        out[f"{p}{w}Best"] = escape(lo["method"])
        out[f"{p}{w}BestRatio"] = fmt_num(float(lo["ttt_ratio_mean"]), 3)
        out[f"{p}{w}Worst"] = escape(hi["method"])
        out[f"{p}{w}WorstRatio"] = fmt_num(float(hi["ttt_ratio_mean"]), 3)
        dense = t[t["method"] == "dense"]
        if not dense.empty:
            out[f"{p}{w}DenseRatio"] = fmt_num(float(dense["ttt_ratio_mean"].iloc[0]), 3)
        run = sd[(sd["network"] == net) & sd["end_ratio_mean"].notna()]
        if not run.empty:  # the same samples' whole run: defined also where a method misses the target
            lo = run.loc[run["end_ratio_mean"].idxmin()]
            out[f"{p}{w}RunBest"] = escape(lo["method"])
            out[f"{p}{w}RunBestRatio"] = fmt_num(float(lo["end_ratio_mean"]), 3)
    out.update(_budget_numbers(st))
    out.update(_loss_bench_numbers(st))
    out.update(_loss_train_numbers(st))
    out.update(_reference_numbers(st))
    if st.meta["key"] == "e10":  # the adaptive collective and the testbed check ran on the MLP's grid
        out.update(_auto_numbers(st))
        out.update(_check_numbers(st))
    return out


def _leader(sd, net: str, higher_is_better: bool):
    """(leader, runner-up) rows of network ``net`` by the quality at its budget (every seed counted), or None
    with fewer than two methods measured there."""
    t = sd[(sd["network"] == net) & sd["at_budget_mean"].notna()]
    if len(t) < 2:
        return None
    t = t.sort_values("at_budget_mean", ascending=not higher_is_better, kind="stable")
    return t.iloc[0], t.iloc[1]


def _budget_numbers(st: Stats) -> dict[str, str]:
    """Which method leads at each network's wall-clock budget (its shortest run) and by how much over the next;
    on the lossy networks, what the loss cost dense: its perplexity there after the wall-clock of its whole run
    on the even network (same seed) against that run's, and the final loss at equal steps (TCP resends every
    packet: the same math)."""
    sd, goal = st.tables["slowdown"], st.meta["goal"]
    p, hib = PREFIX[st.meta["key"]], goal.higher_is_better
    out: dict[str, str] = {}
    leads = []
    for net in st.meta["networks"]:
        w = "Even" if net == BASELINE_NETWORK else E10_NETWORKS.get(net)
        pair = _leader(sd, net, hib)
        if w is None or pair is None:
            continue
        a, b = pair
        by = abs(float(a["at_budget_mean"]) - float(b["at_budget_mean"]))
        vals = {"Budget": fmt_duration(float(a["budget_s"])), "Lead": escape(a["method"]),
                "LeadValue": goal.fmt(float(a["at_budget_mean"])), "LeadNext": escape(b["method"]),
                "LeadBy": goal.fmt(by, 2)}
        out.update({f"{p}{w}{k}": v for k, v in vals.items()})  # where catalogued: E10_LEAD_NETWORKS' on the LM
        leads.append(f"{escape(net)}: {vals['Lead']} ({vals['LeadValue']} at {vals['Budget']}, {vals['LeadBy']} "
                     f"ahead of {vals['LeadNext']})")
    if leads:
        out[f"{p}BudgetLeads"] = "; ".join(leads)
    if goal.metric != "val_loss":
        return {k: v for k, v in out.items() if k in MACROS}
    even = sd[(sd["network"] == BASELINE_NETWORK) & (sd["method"] == "dense")]
    for net, w in E10_NETWORKS.items():
        lossy = sd[(sd["network"] == net) & (sd["method"] == "dense")]
        if not net.startswith("loss") or lossy.empty or even.empty:
            continue
        x, y = float(lossy["at_dense_end_mean"].iloc[0]), float(even["at_dense_end_mean"].iloc[0])
        if math.isfinite(x) and math.isfinite(y):  # perplexity = exp(loss per character)
            out[f"{p}{w}DensePpl"] = fmt_num(100 * (math.exp(x - y) - 1), 2)
        gap = float(lossy[f"{goal.metric}_mean"].iloc[0]) - float(even[f"{goal.metric}_mean"].iloc[0])
        out[f"{p}{w}DenseFinalGap"] = fmt_num(gap, 2) if gap else "0"  # signed
    return {k: v for k, v in out.items() if k in MACROS}


def _auto_numbers(st: Stats) -> dict[str, str]:
    """What choosing the collective did: the collectives chosen, the communication and the time to the target
    of the adaptive method against the same top-k without the policy, per network."""
    auto = st.tables.get("auto")
    runs = st.tables["runs"]
    out: dict[str, str] = {}
    if auto is None or auto.empty:
        return out
    method = next((m for m in AUTO_FIXED if m in set(auto["method"])), None)
    fixed = AUTO_FIXED.get(method)
    if method is None:
        return out
    a = auto[auto["method"] == method]
    per_net = {n: sorted(set(g["collective"])) for n, g in a.groupby("network")}
    names = {tuple(v) for v in per_net.values()}
    words = [word(COLLECTIVE_WORDS, c, "E10 chosen collective") for c in sorted(set(a["collective"]))]
    if len(names) == 1:
        out["ETenAutoChoice"] = " and ".join(words) + " on every network"
    else:
        out["ETenAutoChoice"] = "; ".join(f"{escape(n)}: " + " and ".join(COLLECTIVE_WORDS[c] for c in v)
                                          for n, v in per_net.items())
    out["ETenAutoMethod"], out["ETenAutoFixed"] = escape(method), escape(fixed)
    mine, base = runs[runs["method"] == method], runs[runs["method"] == fixed]
    if base.empty:
        return out
    out["ETenAutoAcc"] = fmt_num(100 * float(mine.loc[mine["network"] == BASELINE_NETWORK, "quality"].mean()), 3)
    out["ETenAutoFixedAcc"] = fmt_num(100 * float(base.loc[base["network"] == BASELINE_NETWORK, "quality"].mean()),
                                      3)
    end = []
    ttt = []
    for net in NETWORKS:
        x, y = mine[mine["network"] == net], base[base["network"] == net]
        if x.empty or y.empty:
            continue
        end.append(float(x["t_end_s"].mean()) / float(y["t_end_s"].mean()))
        tx, ty = x["ttt_s"].to_numpy(float), y["ttt_s"].to_numpy(float)
        if _all_finite(tx) and _all_finite(ty):
            ttt.append(f"{escape(net)} {fmt_num(float(tx.mean() / ty.mean()), 2)}")
    if end:
        out["ETenAutoRunMin"], out["ETenAutoRunMax"] = fmt_num(min(end), 2), fmt_num(max(end), 2)
    if ttt:
        out["ETenAutoTttList"] = ", ".join(ttt)
    return out


def _all_finite(x) -> bool:
    return len(x) > 0 and all(math.isfinite(v) for v in x)


def _pct(x) -> str:
    """A relative error as signed percent with one decimal (``+20.2``, ``-2.9``)."""
    return f"{100 * float(x):+.1f}"


def _check_numbers(st: Stats) -> dict[str, str]:
    """The check against the testbed: where it was measured, its cells, every cell's error, the worst among the
    cells without a stall of the testbed's TCP (``stalls``), and those stalls."""
    t, meta = st.tables.get("check"), st.meta.get("check")
    if t is None or t.empty or not meta:
        return {}
    err = t["err_step"].astype(float)
    clean = t[t["stalls"].fillna("") == ""] if "stalls" in t else t
    worst = (clean if not clean.empty else t).loc[lambda x: x["err_step"].astype(float).abs().idxmax()]
    out = {"ETenCheckDate": escape(meta["date"]), "ETenCheckHost": escape(meta["host"]),
           "ETenCheckCells": str(len(t)), "ETenCheckScale": fmt_num(float(meta["scale"] or 1.0)),
           "ETenCheckSteps": f"{meta['warmup']}--{meta['steps']}",
           "ETenCheckWorst": _pct(worst["err_step"]),
           "ETenCheckWorstWhere": f"{escape(worst['network'])}, {escape(worst['method'])}",
           "ETenCheckWithinTen": str(int((err.abs() <= 0.10).sum())),
           # a cell measured while the machine was busy: "(busy)" after its error
           "ETenCheckList": "; ".join(f"{escape(r['network'])} {escape(r['method'])} "
                                      rf"{_pct(r['err_step'])}\,\%" + (" (busy)" if r.get("busy") is True else "")
                                      for _, r in t.iterrows())}
    dense = t[t["method"] == "dense"]
    if not dense.empty:
        out["ETenCheckDenseList"] = ", ".join(
            rf"{escape(r['network'])} {_pct(r['err_comm'])}\,\%" for _, r in dense.iterrows()
            if r["err_comm"] is not None and math.isfinite(float(r["err_comm"])))
    stalled = t[t["stalls"].fillna("") != ""] if "stalls" in t else t.iloc[0:0]
    if not stalled.empty:
        out["ETenCheckStallCells"] = str(len(stalled))
        out["ETenCheckStalls"] = "; ".join(f"{escape(r['network'])} {escape(r['method'])} ({escape(r['stalls'])})"
                                           for _, r in stalled.iterrows())
    if meta["load"]:
        out["ETenCheckLoad"] = fmt_num(max(meta["load"]), 2)
    if meta["skipped"]:
        out["ETenCheckSkipped"] = ", ".join(escape(n) for n in meta["skipped"])
    return out


def _cell(r, ratio: bool) -> str:
    k, n = int(r["seeds_reached"]), int(r["seeds"])
    # every seed arrived: the mean; else the median over all seeds (a seed that never arrived, or whose run on
    # the even network never did, counts as the slowest), "--" where that median is never reached
    if ratio:
        run = r"($\times$" + fmt_num(r["end_ratio_mean"], 3) + ")" if math.isfinite(r["end_ratio_mean"]) else ""
        x = r["ttt_ratio_mean"] if k == n else r["ttt_ratio_median"]
        if k == 0 or not math.isfinite(x):
            return "-- " + run + ("" if k in (0, n) else f" ({k}/{n})")
        s = ("" if k == n else "median ") + r"$\times$" + fmt_num(x, 3) + " " + run
    else:
        x = r["ttt_mean_s"] if k == n else r["ttt_median_s"]
        if not math.isfinite(x):
            return "--" + ("" if k in (0, n) else f" ({k}/{n})")
        s = ("" if k == n else "median ") + fmt_duration(x)
    return s + ("" if k == n else f" ({k}/{n})")


def table(st: Stats) -> str:
    sd = st.tables["slowdown"].set_index(["network", "method"])
    nets, n_seeds = st.meta["networks"], st.meta["seeds"]
    goal, q = st.meta["goal"], st.meta["metric"]
    rows = []
    for meth in st.meta["methods"]:
        row = [escape(meth)]
        if (BASELINE_NETWORK, meth) in sd.index:
            b = sd.loc[(BASELINE_NETWORK, meth)]
            row.append(goal.fmt(b[f"{q}_mean"]) + r" $\pm$ " + goal.fmt(b[f"{q}_std"], 2))
        else:
            row.append("--")
        for net in nets:
            row.append(_cell(sd.loc[(net, meth)], net != BASELINE_NETWORK) if (net, meth) in sd.index else "--")
        rows.append(row)
    # below: the quality at each network's wall-clock budget, every seed counted, the leader in bold
    flat = st.tables["slowdown"]
    lead = {n: pair[0]["method"] for n in nets if (pair := _leader(flat, n, goal.higher_is_better)) is not None}
    budgets = [fmt_duration(float(flat.loc[flat["network"] == n, "budget_s"].iloc[0])) for n in nets]
    rows.append([r"\midrule \emph{at the budget}", ""] + budgets)
    for meth in st.meta["methods"]:
        row = [escape(meth), ""]
        for net in nets:
            if (net, meth) not in sd.index or not math.isfinite(sd.loc[(net, meth), "at_budget_mean"]):
                row.append("--")
                continue
            r = sd.loc[(net, meth)]
            v = goal.fmt(r["at_budget_mean"]) + r" $\pm$ " + goal.fmt(r["at_budget_std"], 2)
            row.append(rf"\textbf{{{v}}}" if lead.get(net) == meth else v)
        rows.append(row)
    header = ["Method", goal.label] + [escape(n) for n in nets]
    nets_text = "; ".join(f"{escape(n)}: {escape(st.tables['slowdown'].query('network == @n')['links'].iloc[0])}"
                          for n in nets)
    return booktabs(rows, header,
                    f"Unequal and unsteady networks ({' and '.join(map(str, st.meta['workers']))} workers, "
                    f"{goal.workload}, sim backend, {n_seeds} seeds): final {goal.label.lower()} on the even "
                    f"network (mean $\\pm$ std), virtual time to {goal.words} there, and "
                    f"on every other network that time divided by the same run's on the even one (mean over "
                    f"seeds; (k/n): only k of n seeds reached the target; in parentheses the same ratio for the "
                    f"whole run, the same samples). Below: {goal.label.lower()} at each network's wall-clock budget "
                    f"(its shortest run, so that every seed of every method counts; mean $\\pm$ std over seeds; the "
                    f"{'highest' if goal.higher_is_better else 'lowest'} in bold). Times are the runs' "
                    f"own virtual clocks on per-worker links. Networks: {nets_text}.", f"tab:{st.meta['key']}",
                    size=r"\scriptsize")


def figure(st: Stats):
    """Small multiples: one panel per network other than ``even``, each the slow-down (time to target there /
    on even) of every method, mean and standard deviation over seeds (bars), the whole run's (diamonds); a
    dashed line at 1 (no slow-down)."""
    plt, sns = plotting()
    sd = st.tables["slowdown"]
    nets = [n for n in st.meta["networks"] if n != BASELINE_NETWORK]
    methods = st.meta["methods"]
    ncols = min(4, max(1, len(nets)))  # four panels a row: the lossy and churning networks make up to seven
    nrows = math.ceil(max(1, len(nets)) / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(7.0, 2.3 * nrows), sharey=True, squeeze=False)
    for ax in list(axes.flat)[len(nets):]:
        ax.set_visible(False)
    bar = sns.color_palette("colorblind")[0]  # one colour: the y axis names the method, the legend the bar
    for ax, net in zip(axes.flat, nets):
        g = sd[sd["network"] == net].set_index("method")
        ys = list(range(len(methods)))
        vals = [float(g.loc[m, "ttt_ratio_mean"]) if m in g.index else math.nan for m in methods]
        errs = [float(g.loc[m, "ttt_ratio_std"]) if m in g.index else 0.0 for m in methods]
        runs = [float(g.loc[m, "end_ratio_mean"]) if m in g.index else math.nan for m in methods]
        ax.barh(ys, [0 if math.isnan(v) else v for v in vals], xerr=[0 if math.isnan(e) else e for e in errs],
                color=bar, height=0.7, error_kw={"lw": 0.8, "capsize": 2}, label="time to target")
        ax.scatter(runs, ys, marker="D", s=10, color="black", zorder=3, label="whole run")
        for y, v in zip(ys, vals):
            ax.annotate("--" if math.isnan(v) else f"{v:.2g}", (0 if math.isnan(v) else v, y), xytext=(5, 0),
                        textcoords="offset points", va="center", fontsize=6)
        ax.axvline(1.0, ls="--", lw=0.7, color="0.3")
        ax.set(title=TITLES.get(net, net), xlabel="time to target / even")
        ax.set_xlim(0, max([v for v in vals + runs if not math.isnan(v)] + [1.0]) * 1.3)
        ax.grid(True, axis="x", lw=0.4)
    axes.flat[0].set_yticks(range(len(methods)), methods)
    handles, labels = axes.flat[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper center", ncol=2, fontsize=7, frameon=False, bbox_to_anchor=(0.5, 1.0))
    axes.flat[0].invert_yaxis()
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.1 / nrows))
    return fig


E10 = Experiment("e10", "E10 unequal and unsteady networks", partial(stats, key="e10"), numbers, table, figure,
                 "no e10_* runs")
E10LM = Experiment("e10lm", "E10 unequal and unsteady networks, language model", partial(stats, key="e10lm"), numbers,
                   table, figure, "no e10_lm_* runs")
