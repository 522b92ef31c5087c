"""The lm_evidence profile's recorded sweep (config/lm_evidence.yaml): one row per sweep point, and each method's
picked values written into the config's tuned block.

A sweep point is a preset ``<method>`` (the method's defaults), ``<method>+lrx<m>`` (inner learning rate x m,
lr_min = lr / 10), ``<method>+olr<v>`` (outer learning rate v) or ``<method>+om<v>`` (outer Nesterov momentum v),
each varying one knob from the method's defaults, or ``<method>+joint``: each knob's best one-knob value
combined (coordinate-wise), where no point ran that combination (``joint``). Each method's pick is the values of
its point that ends with the lowest validation loss on seed 0, the joint point among them: the profile's budget
has no joint grid, and a combination of one-knob picks can end higher than each of the points it came from. A run
whose loss is not finite counts as the worst. The tuned grid's seed 0 is the picked point's own run, copied.

Where a pick sits at the edge of what its knob tried, ``widen`` adds the next point beyond it (inner lr x2 above
the largest multiple tried or x0.5 below the smallest; outer lr and momentum the next rung of ``LADDERS``) to the
config's widened block and to the sweep's grid, so that the campaign runs it before the pick; ``joint`` adds the
combined point the same way once the widening is done.

A pick on one seed favours that seed's luck (one method's seeds can end further apart than two methods), so each
inner-lr pick is then checked on the seeds the pick never saw (``e9_lmc_confirm``'s seeds): ``confirm`` adds
``<method>-alt``, the method's runner-up inner lr on seed 0 at its other picked values, and ``repick`` keeps
whichever of the two inner lrs ends lower on the mean over those held-out seeds (the pick's own held-out runs are
the tuned grid's). Where the runner-up wins, the pick's held-out runs move to ``e9_lmc_confirm`` as
``<method>-pick`` and the runner-up's are copied into the tuned grid (a run's name is a label, not a training
input: :data:`lowbw.train.checkpoint.RUN_ONLY_KEYS`), so no run is repeated and none is lost; the tuned grid's
seed 0 at the new value is a sweep point's run where one ran those values, else it runs again.

Where the inner lr kept on the held-out seeds is the smallest or the largest the method tried (its sweep's and
its held-out points), ``extend`` adds ``<method>-lrx<m>``: half or twice that lr at the other picked values, on
the held-out seeds only, and ``repick`` then keeps the lowest held-out mean among all the inner lrs that ran
every held-out seed; the campaign repeats the two until no kept lr is at the edge (or its rounds run out).

    python -m lowbw.report.lmc_sweep widen --config config/lm_evidence.yaml --runs runs
    python -m lowbw.report.lmc_sweep joint --config config/lm_evidence.yaml --runs runs
    python -m lowbw.report.lmc_sweep pick --config config/lm_evidence.yaml --runs runs
    python -m lowbw.report.lmc_sweep confirm --config config/lm_evidence.yaml --runs runs
    python -m lowbw.report.lmc_sweep repick --config config/lm_evidence.yaml --runs runs
    python -m lowbw.report.lmc_sweep extend --config config/lm_evidence.yaml --runs runs
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import re
import shutil
import sys
from pathlib import Path

import pandas as pd
import yaml

from lowbw.runs.results import load_runs
from lowbw.train.checkpoint import RUN_ONLY_KEYS
from lowbw.train.config_fields import RunConfig
from lowbw.train.schemes.registry import SCHEMES, reads
from lowbw.workflow.grid import run_config

__all__ = ["SWEEP", "CONFIRM", "TUNED", "LADDERS", "split_point", "sweep_table", "coordinate_picks", "best_points",
           "picks", "joint_points", "at_edge", "runner_up", "confirm_points", "held_out", "confirmed", "held_means",
           "kept_at_edge", "extend_points", "tuned_block", "write_tuned", "widen_points", "write_widened",
           "write_confirm", "reuse", "relocate", "main"]

SWEEP = "e9_lmc_sweep"  # the sweep's experiment
CONFIRM = "e9_lmc_confirm"  # the held-out check of each inner-lr pick (its seeds: those the sweep never ran)
TUNED = "e9_lmc"  # every method at its picked values
CONF_BEGIN, CONF_END = "  # BEGIN confirm", "  # END confirm"  # the config's block of confirmation presets
BEGIN, END = "  # BEGIN tuned", "  # END tuned"  # the config's tuned block (its first and last line)
WIDE_BEGIN, WIDE_END = "  # BEGIN widened", "  # END widened"  # the config's widened block
# the rungs an outer knob widens along (a pick at a ladder's end stays there: outer momentum below 0 is no knob)
LADDERS = {"outer_lr": (0.1, 0.15, 0.25, 0.35, 0.5, 0.7, 1.0, 1.4, 2.0, 2.8),
           "outer_momentum": (0.0, 0.5, 0.9, 0.95, 0.99)}
_TAG = {"lr": "lrx", "outer_lr": "olr", "outer_momentum": "om"}  # a knob's tag in a point's name
_POINT = re.compile(r"^(?P<method>[A-Za-z0-9_]+)(?:\+(?:(?P<knob>lrx|olr|om)(?P<value>[0-9.]+)|(?P<joint>joint)))?$")
KNOBS = ("lr", "outer_lr", "outer_momentum")  # the swept knobs, in the order the tuned block names them
_OUTER = ("outer_lr", "outer_momentum")  # the knobs only an outer step reads (NaN for the others)


def split_point(point: str) -> tuple[str, str | None, float | None]:
    """``"dense+lrx2"`` -> ``("dense", "lr", 2.0)``; ``"diloco16+olr0.5"`` -> ``("diloco16", "outer_lr", 0.5)``;
    ``"diloco16+om0.5"`` -> ``("diloco16", "outer_momentum", 0.5)``; ``"diloco16+joint"`` -> ``("diloco16",
    "joint", None)``; ``"dense"`` -> ``("dense", None, None)``."""
    m = _POINT.match(point)
    if m is None:
        raise ValueError(f"sweep point {point!r} is not <method>, <method>+lrx<m>, <method>+olr<v>, <method>+om<v> "
                         "or <method>+joint")
    if m["joint"]:
        return m["method"], "joint", None
    knob = {"lrx": "lr", "olr": "outer_lr", "om": "outer_momentum", None: None}[m["knob"]]
    return m["method"], knob, (float(m["value"]) if m["value"] else None)


def sweep_table(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per sweep run: ``method``, ``knob`` (lr | outer_lr | outer_momentum | default | joint), ``lr``,
    ``outer_lr`` and ``outer_momentum`` (NaN where the method has no outer step), ``final_val_loss``,
    ``best_val_loss``, and ``picked`` (the point :func:`picks` takes)."""
    rows = []
    for _, r in runs.iterrows():
        method, knob, _ = split_point(str(r["name"]))
        sync = str(r.get("sync"))
        row = {"method": method, "point": r["name"], "knob": knob or "default", "lr": float(r["lr"])}
        for k in _OUTER:  # only where the scheme has an outer step that reads the knob
            v = r.get(k) if sync in SCHEMES and reads(sync, k) else None
            row[k] = float(v) if v is not None and not (isinstance(v, float) and math.isnan(v)) else math.nan
        rows.append({**row, "final_val_loss": float(r["final_val_loss"]), "best_val_loss": float(r["best_val_loss"])})
    t = pd.DataFrame(rows).sort_values(["method", "knob", *KNOBS], ignore_index=True)
    best = best_points(t)
    t["picked"] = [r["point"] == best[r["method"]] for _, r in t.iterrows()]
    return t


def _score(v: float) -> float:
    return v if math.isfinite(v) else math.inf


def coordinate_picks(table: pd.DataFrame) -> dict[str, dict[str, float]]:
    """method -> ``{"lr": ..., "outer_lr": ..., "outer_momentum": ...}`` (the outer knobs only for outer-step
    methods): the value of each knob whose one-knob point ends lowest (ties: the default's). Their combination
    is the ``<method>+joint`` point where no point ran it (:func:`joint_points`)."""
    out: dict[str, dict[str, float]] = {}
    for method, g in table.groupby("method", sort=False):
        if not (g["knob"] == "default").any():
            raise ValueError(f"sweep of {method}: its default point has no complete run")
        d = g[g["knob"] == "default"].iloc[0]
        best = {}
        for knob in KNOBS:
            if knob in _OUTER and math.isnan(d[knob]):
                continue
            cand = pd.concat([g[g["knob"] == "default"], g[g["knob"] == knob]])
            scores = [_score(v) for v in cand["final_val_loss"]]
            best[knob] = float(cand.iloc[scores.index(min(scores))][knob])
        out[str(method)] = best
    return out


def best_points(table: pd.DataFrame) -> dict[str, str]:
    """method -> the sweep point that ends lowest on seed 0 (ties: the default, then the order of the table)."""
    out = {}
    for method, g in table.groupby("method", sort=False):
        g = g.assign(score=g["final_val_loss"].map(_score), first=g["knob"] != "default")
        out[str(method)] = str(g.sort_values(["score", "first"], kind="stable")["point"].iloc[0])
    return out


def _values(r: pd.Series) -> dict[str, float]:
    """A sweep row's knob values (the outer ones only where the method has an outer step)."""
    return {k: float(r[k]) for k in KNOBS if not math.isnan(r[k])}


def picks(table: pd.DataFrame) -> dict[str, dict[str, float]]:
    """method -> ``{"lr": ..., "outer_lr": ..., "outer_momentum": ...}``: the values of its best point
    (:func:`best_points`), a point that ran. The one-knob-at-a-time picks combined can end higher than the
    single points they came from, so their combination is one more point (``+joint``), not the pick itself."""
    best = best_points(table)
    return {m: _values(table[table["point"] == p].iloc[0]) for m, p in best.items()}


def joint_points(table: pd.DataFrame) -> list[tuple[str, str]]:
    """(point, preset) ``<method>+joint`` for each method whose one-knob picks (:func:`coordinate_picks`)
    combine into values no point of the sweep ran."""
    out = []
    for method, c in coordinate_picks(table).items():
        g = table[table["method"] == method]
        if f"{method}+joint" in set(g["point"]) or any(_values(r) == c for _, r in g.iterrows()):
            continue
        out.append((f"{method}+joint", f"{{<<: *{method}, {_body(c)}}}"))
    return out


def at_edge(table: pd.DataFrame) -> dict[str, list[str]]:
    """method -> the knobs (``lr``, ``outer_lr``, ``outer_momentum``) whose picked value is the largest or the
    smallest of the values tried (at least two): the optimum may lie beyond the grid, so the grid should
    widen on that side."""
    out: dict[str, list[str]] = {}
    for method, pick in coordinate_picks(table).items():
        g = table[table["method"] == method]
        for knob, v in pick.items():
            rows = g[g["knob"].isin(["default", knob])]
            tried = sorted(set(float(x) for x in rows[knob] if not math.isnan(x)))
            if len(tried) >= 2 and v in (tried[0], tried[-1]):
                out.setdefault(str(method), []).append(knob)
    return out


def runner_up(table: pd.DataFrame) -> dict[str, float]:
    """method -> the inner lr, other than its pick's, whose default or ``lrx`` point ends lowest on seed 0
    (methods that tried one inner lr are absent)."""
    out = {}
    chosen = picks(table)
    for method, g in table.groupby("method", sort=False):
        cand = g[g["knob"].isin(["default", "lr"]) & (g["lr"] != chosen[str(method)]["lr"])]
        cand = cand.assign(score=cand["final_val_loss"].map(_score), first=cand["knob"] != "default")
        if not cand.empty:
            out[str(method)] = float(cand.sort_values(["score", "first"], kind="stable")["lr"].iloc[0])
    return out


def _body(pick: dict[str, float]) -> str:
    """A preset's keys for picked values: ``lr: 0.008, lr_min: 0.0008, outer_lr: 0.7``."""
    keys = {"lr": pick["lr"], "lr_min": pick["lr"] / 10, **{k: pick[k] for k in _OUTER if k in pick}}
    return ", ".join(f"{k}: {v:g}" for k, v in keys.items())


def confirm_points(table: pd.DataFrame) -> list[tuple[str, str]]:
    """(point, preset) of each method's ``<method>-alt``: its runner-up inner lr at its other picked values."""
    chosen, alt = picks(table), runner_up(table)
    return [(f"{m}-alt", f"{{<<: *{m}, {_body({**chosen[m], 'lr': lr})}}}") for m, lr in alt.items()]


def _base(name: str) -> str:
    """``"dense-tuned"``, ``"dense-alt"``, ``"dense-pick"``, ``"dense-lrx0.25"`` -> ``"dense"``."""
    return re.sub(r"-(tuned|alt|pick|lrx[0-9.]+)$", "", name)


def held_out(runs: pd.DataFrame, seeds: list[int]) -> pd.DataFrame:
    """One row per (method, lr) over the tuned and confirmation runs ``runs`` (columns ``name``, ``seed``, ``lr``,
    ``final_val_loss``): ``mean`` final validation loss over the held-out ``seeds`` and how many of them ran
    (``n``); a copied run counts once."""
    r = runs.assign(method=runs["name"].map(_base), seed=runs["seed"].astype(int))
    r = r[r["seed"].isin(seeds)].drop_duplicates(["method", "lr", "seed"])
    return (r.groupby(["method", "lr"], sort=False)["final_val_loss"]
            .agg(mean=lambda v: float(pd.Series(v).map(_score).mean()), n="size").reset_index())


def confirmed(table: pd.DataFrame, runs: pd.DataFrame, seeds: list[int]) -> dict:
    """method -> ``{"pick_lr", "pick_mean", "alt_lr", "alt_mean", "beyond", "lr"}`` for each method whose seed-0
    pick and runner-up both ran on every held-out seed: ``beyond`` maps each other inner lr that ran them all (a
    point beyond the edge, :func:`extend_points`) to its mean, and ``lr`` is the inner lr with the lowest mean
    over them of all these (ties: the pick, then the runner-up, then the smaller)."""
    h = held_out(runs, seeds)
    chosen, alt = picks(table), runner_up(table)
    out = {}
    for m, a in alt.items():
        p = chosen[m]["lr"]
        g = h[(h["method"] == m) & (h["n"] == len(seeds))]
        full = {float(lr): float(v) for lr, v in zip(g["lr"], g["mean"], strict=True)}
        if p in full and a in full:
            beyond = {lr: v for lr, v in sorted(full.items()) if lr not in (p, a)}
            kept = min([p, a, *beyond], key=full.__getitem__)  # min keeps the first of equal means
            out[m] = {"pick_lr": p, "pick_mean": full[p], "alt_lr": a, "alt_mean": full[a], "beyond": beyond,
                      "lr": kept}
    return out


def held_means(c: dict) -> list[tuple[float, float]]:
    """(inner lr, held-out mean) of every inner lr one method's held-out check ran (a :func:`confirmed` entry):
    the pick, the runner-up, then the points beyond the edge."""
    return [(c["pick_lr"], c["pick_mean"]), (c["alt_lr"], c["alt_mean"]), *c["beyond"].items()]


def kept_at_edge(table: pd.DataFrame, conf: dict) -> dict[str, str]:
    """method -> ``"smallest"`` or ``"largest"`` where the inner lr kept on the held-out seeds (:func:`confirmed`)
    is the end of every inner lr the method tried (its sweep's default and ``lrx`` points, its held-out points):
    the optimum may lie beyond it."""
    out = {}
    for m, c in conf.items():
        g = table[(table["method"] == m) & table["knob"].isin(["default", "lr"])]
        tried = {float(x) for x in g["lr"]} | {lr for lr, _ in held_means(c)}
        if len(tried) > 1 and c["lr"] in (min(tried), max(tried)):
            out[m] = "smallest" if c["lr"] == min(tried) else "largest"
    return out


def extend_points(table: pd.DataFrame, conf: dict) -> list[tuple[str, str]]:
    """(point, preset) ``<method>-lrx<m>`` for each method whose kept inner lr is at the edge
    (:func:`kept_at_edge`): half the kept lr below the smallest, twice it above the largest, at the method's other
    picked values; ``m`` is its multiple of the method's default lr, as a sweep point's ``+lrx``."""
    chosen = picks(table)
    out = []
    for m, side in kept_at_edge(table, conf).items():
        d = table[(table["method"] == m) & (table["knob"] == "default")].iloc[0]
        lr = conf[m]["lr"] * (0.5 if side == "smallest" else 2.0)
        out.append((f"{m}-lrx{lr / d['lr']:g}", f"{{<<: *{m}, {_body({**chosen[m], 'lr': lr})}}}"))
    return out


def tuned_block(table: pd.DataFrame, conf: dict[str, dict[str, float]] | None = None,
                seeds: list[int] | None = None) -> list[str]:
    """The config's tuned block: one ``<method>-tuned`` preset per method, its values and where they came from
    (with ``conf``, :func:`confirmed`'s inner lr over the held-out ``seeds``)."""
    lines = [BEGIN + ": written by `python -m lowbw.report.lmc_sweep pick` (and `repick`) from e9_lmc_sweep "
             "(and e9_lmc_confirm) (do not edit by hand)"]
    edge = at_edge(table)
    best = best_points(table)
    conf = conf or {}
    for method, p in picks(table).items():
        g = table[table["method"] == method]
        d = g[g["knob"] == "default"].iloc[0]
        loss = float(g.loc[g["point"] == best[method], "final_val_loss"].iloc[0])
        why = [f"best of {len(g)} points: {best[method]} {loss:.3f}"]
        flag = f"; at the grid's edge: {', '.join(edge[method])}" if method in edge else ""
        held = ""
        if method in conf:
            c = conf[method]
            p = {**p, "lr": c["lr"]}
            held = (f"; held out (seeds {', '.join(str(s) for s in seeds or [])}, mean final val loss): lr "
                    + ", ".join(f"x{lr / d['lr']:g} {v:.3f}" for lr, v in held_means(c))
                    + f" -> x{c['lr'] / d['lr']:g}")
        lines.append(f"  {method}-tuned: {{<<: *{method}, {_body(p)}}}  # sweep (seed 0, final val loss): "
                     + "; ".join(why) + flag + held)
    lines.append(END)
    return lines


def widen_points(table: pd.DataFrame) -> list[tuple[str, str]]:
    """(point, preset) for each knob whose pick sits at the edge of what it tried: one point beyond that edge,
    e.g. ``("dense+lrx4", "{<<: *dense, lr: 0.064, lr_min: 0.0064}")`` when x2 of the centre's 0.016 was the
    largest tried and the best. Points already in ``table`` and ladder ends are skipped."""
    out = []
    have = set(table["point"])
    chosen = coordinate_picks(table)
    for method, knobs in at_edge(table).items():
        g = table[table["method"] == method]
        d = g[g["knob"] == "default"].iloc[0]
        pick = chosen[method]
        for knob in knobs:
            tried = sorted(set(float(x) for x in g[g["knob"].isin(["default", knob])][knob]))
            up = pick[knob] == tried[-1]
            if knob == "lr":
                mult = (tried[-1] * 2 if up else tried[0] / 2) / d["lr"]
                lr = d["lr"] * mult
                point, body = f"{method}+lrx{mult:g}", f"lr: {lr:g}, lr_min: {lr / 10:g}"
            else:
                ladder = LADDERS[knob]
                beyond = [v for v in ladder if (v > tried[-1] if up else v < tried[0])]
                if not beyond:
                    continue
                v = beyond[0] if up else beyond[-1]
                point, body = f"{method}+{_TAG[knob]}{v:g}", f"{knob}: {v:g}"
            if point not in have:
                out.append((point, f"{{<<: *{method}, {body}}}"))
    return out


def _write_points(config: Path, points: list[tuple[str, str]], begin: str, end: str, exp: str) -> None:
    """Append ``points`` to ``config``'s block from the line ``begin`` to the line ``end`` (one preset line
    each) and to experiment ``exp``'s grid (its one ``method: [...]`` line), replacing a point of the same name."""
    text = config.read_text(encoding="utf-8").splitlines()
    ends = [i for i, s in enumerate(text) if s.startswith(end)]
    starts = [i for i, s in enumerate(text) if s.startswith(begin)]
    at = [i for i, s in enumerate(text) if s.strip() == f"{exp}:"]
    if len(starts) != 1 or len(ends) != 1 or ends[0] < starts[0] or len(at) != 1:
        raise ValueError(f"{config}: needs one '{begin.strip()}' line before one '{end.strip()}' line "
                         f"and one '{exp}:' experiment")
    grid = next((i for i in range(at[0] + 1, len(text)) if text[i].lstrip().startswith("method: [")), None)
    if grid is None or not text[grid].rstrip().endswith("]"):
        raise ValueError(f"{config}: {exp}'s grid needs its points on one 'method: [...]' line")
    new = {p for p, _ in points}  # a point already there is replaced (its preset and its place in the grid)
    names = [n.strip() for n in text[grid].split("[", 1)[1].rstrip()[:-1].split(",") if n.strip()]
    indent = text[grid][:len(text[grid]) - len(text[grid].lstrip())]
    text[grid] = indent + "method: [" + ", ".join([n for n in names if n not in new] + [p for p, _ in points]) + "]"
    block = [i for i in range(starts[0] + 1, ends[0]) if text[i].split(":", 1)[0].strip() in new]
    for i in reversed(block):
        del text[i]
    end_at = ends[0] - len(block)
    text[end_at:end_at] = [f"  {p}: {body}" for p, body in points]
    tmp = config.with_suffix(config.suffix + ".tmp")
    tmp.write_text("\n".join(text) + "\n", encoding="utf-8")
    tmp.replace(config)


def write_widened(config: Path, points: list[tuple[str, str]]) -> None:
    """Append ``points`` to ``config``'s widened block and to the sweep's grid."""
    _write_points(config, points, WIDE_BEGIN, WIDE_END, SWEEP)


def write_confirm(config: Path, points: list[tuple[str, str]]) -> None:
    """Append ``points`` to ``config``'s confirm block and to the confirmation's grid."""
    _write_points(config, points, CONF_BEGIN, CONF_END, CONFIRM)


def _same_run(run: Path, want: dict) -> bool:
    """Does the run in ``run`` train what the run config ``want`` trains: every resolved key (defaults filled
    in, as its config.json records them) but the run-only ones equal?"""
    try:
        have = json.loads((run / "config.json").read_text(encoding="utf-8"))
        have = have.get("config", have)
    except (OSError, ValueError):
        return False
    drop = set(RUN_ONLY_KEYS)
    want = json.loads(json.dumps(RunConfig.from_dict(want).to_dict()))  # as a JSON file holds it (lists, not tuples)
    return {k: v for k, v in have.items() if k not in drop} == {k: v for k, v in want.items() if k not in drop}


def _relabel(run: Path, name: str, want: dict) -> None:
    """Make the run in ``run`` the run of ``want`` (which trains the same values, :func:`_same_run`): its
    run-config.json becomes ``want`` (what reruns it there) and its config.json's name ``name``."""
    (run / "run-config.json.tmp").write_text(json.dumps(want, sort_keys=True), encoding="utf-8")
    (run / "run-config.json.tmp").replace(run / "run-config.json")
    d = json.loads((run / "config.json").read_text(encoding="utf-8"))
    d.get("config", d)["name"] = name
    (run / "config.json.tmp").write_text(json.dumps(d, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    (run / "config.json.tmp").replace(run / "config.json")


def _supersede(run: Path, root: Path) -> str:
    """Move ``run`` aside to ``root/.lmc_superseded/<its path>.<time>`` (kept, not read by any report)."""
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%S")
    old = root / ".lmc_superseded" / f"{run.relative_to(root)}.{stamp}"
    old.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(run, old)
    return f"superseded {run} -> {old}"


def reuse(root: Path, config: dict, pairs: list[tuple[Path, str, str]]) -> list[str]:
    """For each (source run, experiment, point) in ``pairs``: the run of ``point`` at the source's seed in
    ``experiment`` is the source itself where both train the same values (:func:`_same_run`), so it is copied
    there and relabelled rather than run again; a complete run there that trains other values is moved aside
    (:func:`_supersede`) first. Returns what was done, one line each."""
    done = []
    for src, exp, point in pairs:
        seed = int(src.name.split("~", 1)[1])
        dst = root / exp / f"method~{point}" / src.name
        want = run_config(config, exp, {"method": point, "seed": seed})
        if dst.exists() and (dst / "summary.json").is_file() and _same_run(dst, want):
            continue
        if dst.exists():
            done.append(_supersede(dst, root))
        if (src / "summary.json").is_file() and _same_run(src, want):
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copytree(src, dst)
            _relabel(dst, point, want)
            done.append(f"copied {src} -> {dst}")
    return done


def relocate(root: Path, config: dict, changed: list[str], seeds: list[int]) -> list[str]:
    """For each method in ``changed`` (another inner lr won), on each held-out seed:

    1. the tuned grid's run (the old kept lr) moves to the confirmation point that trains its values (the
       ``-pick`` where the seed-0 pick lost); where that point already holds the run it was copied from (the
       ``-alt`` that won before), the copy is moved aside (:func:`_supersede`) instead;
    2. the run of the confirmation point that trains the new tuned values is copied into the tuned grid.

    Each only where the runs train exactly what ``config`` asks of their new place (:func:`_same_run`). Returns
    what was done, one line each; a run not moved is left for the campaign, which reruns a tuned run whose config
    changed."""
    points = list(config["experiments"][CONFIRM]["grid"]["method"])
    done = []
    for m in changed:
        mine = [p for p in points if _base(p) == m]
        for s in seeds:
            tuned = root / TUNED / f"method~{m}-tuned" / f"seed~{s}"
            want_tuned = run_config(config, TUNED, {"method": f"{m}-tuned", "seed": s})
            if (tuned / "summary.json").is_file() and not _same_run(tuned, want_tuned):
                for p in mine:
                    dst = root / CONFIRM / f"method~{p}" / f"seed~{s}"
                    want = run_config(config, CONFIRM, {"method": p, "seed": s})
                    if not _same_run(tuned, want):
                        continue
                    if (dst / "summary.json").is_file() and _same_run(dst, want):
                        done.append(_supersede(tuned, root))
                    elif not dst.exists():
                        dst.parent.mkdir(parents=True, exist_ok=True)
                        shutil.move(tuned, dst)
                        _relabel(dst, p, want)
                        done.append(f"moved {tuned} -> {dst}")
                    break
            if tuned.exists():
                continue
            for p in mine:
                src = root / CONFIRM / f"method~{p}" / f"seed~{s}"
                if (src / "summary.json").is_file() and _same_run(src, want_tuned):
                    shutil.copytree(src, tuned)
                    _relabel(tuned, f"{m}-tuned", want_tuned)
                    done.append(f"copied {src} -> {tuned}")
                    break
    return done


def write_tuned(config: Path, table: pd.DataFrame, conf: dict[str, dict[str, float]] | None = None,
                seeds: list[int] | None = None) -> None:
    """Replace ``config``'s tuned block (from its BEGIN line to its END line) by :func:`tuned_block`."""
    text = config.read_text(encoding="utf-8").splitlines()
    starts = [i for i, s in enumerate(text) if s.startswith(BEGIN)]
    ends = [i for i, s in enumerate(text) if s.startswith(END)]
    if len(starts) != 1 or len(ends) != 1 or ends[0] < starts[0]:
        raise ValueError(f"{config}: needs exactly one '{BEGIN.strip()}' line before one '{END.strip()}' line")
    text[starts[0]:ends[0] + 1] = tuned_block(table, conf, seeds)
    tmp = config.with_suffix(config.suffix + ".tmp")
    tmp.write_text("\n".join(text) + "\n", encoding="utf-8")
    tmp.replace(config)


def _held_out_check(config: Path, root: Path, table: pd.DataFrame) -> tuple[dict, dict, list[int]]:
    """(the config, :func:`confirmed` over the tuned and confirmation runs under ``root``, the held-out seeds)."""
    cfg = yaml.safe_load(config.read_text(encoding="utf-8"))
    seeds = [int(s) for s in cfg["experiments"][CONFIRM]["seeds"]]
    runs = pd.concat([load_runs(d, incomplete="skip") for d in (root / TUNED, root / CONFIRM) if d.is_dir()],
                     ignore_index=True)
    if runs.empty:
        raise ValueError(f"{root}: no {TUNED} or {CONFIRM} runs to confirm the picks with")
    return cfg, confirmed(table, runs, seeds), seeds


def _repick(config: Path, root: Path, table: pd.DataFrame) -> list[str]:
    """``repick``: keep each method's inner lr that ends lowest on the held-out seeds, record the old pick's
    runs as ``<method>-pick`` where it lost, and move runs to match (:func:`relocate`)."""
    cfg, conf, seeds = _held_out_check(config, root, table)
    chosen = picks(table)
    grid = set(cfg["experiments"][CONFIRM]["grid"]["method"])
    current = {m: float(cfg["methods"][f"{m}-tuned"]["lr"]) for m in chosen if f"{m}-tuned" in cfg["methods"]}
    changed = [m for m, c in conf.items() if c["lr"] != current.get(m)]
    new = [(f"{m}-pick", f"{{<<: *{m}, {_body(chosen[m])}}}") for m in changed if f"{m}-pick" not in grid]
    if new:
        write_confirm(config, new)
    write_tuned(config, table, conf, seeds)
    lines = [f"{m}: lr " + ", ".join(f"{lr:g} {v:.3f}" for lr, v in held_means(c)) + f" -> {c['lr']:g}"
             for m, c in conf.items()]
    lines += [f"unconfirmed (held-out runs missing): {m}" for m in runner_up(table) if m not in conf]
    cfg = yaml.safe_load(config.read_text(encoding="utf-8"))
    lines += relocate(root, cfg, changed, seeds)
    now = {m: {**chosen[m], "lr": conf[m]["lr"]} for m in changed}  # seed 0 at the new values: a sweep run?
    same = [(root / SWEEP / f"method~{r['point']}" / "seed~0", TUNED, f"{r['method']}-tuned")
            for _, r in table.iterrows() if r["method"] in now and _values(r) == now[r["method"]]]
    return lines + reuse(root, cfg, same)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m lowbw.report.lmc_sweep", description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    for cmd, what in (("pick", "write each method's picked values into the config's tuned block (seed 0's tuned "
                               "run is the picked point's, copied)"),
                      ("widen", "add a point beyond each pick at the edge of its grid (prints how many)"),
                      ("joint", "add each method's one-knob picks combined as a point where no point ran them"),
                      ("confirm", "add each method's runner-up inner lr to the confirmation grid (prints how many)"),
                      ("repick", "keep the inner lr that ends lowest on the held-out seeds, runs moved to match"),
                      ("extend", "add half or twice each kept inner lr at the edge of those tried, for the held-out "
                                 "seeds (prints how many)")):
        p = sub.add_parser(cmd, help=what)
        p.add_argument("--config", type=Path, default=Path("config/lm_evidence.yaml"))
        p.add_argument("--runs", type=Path, default=Path("runs"))
    a = ap.parse_args(argv)
    root = a.runs / SWEEP
    if not root.is_dir():
        print(f"lowbw.report.lmc_sweep: {root}: no sweep runs", file=sys.stderr)
        return 2
    try:
        table = sweep_table(load_runs(root))
        if a.cmd == "widen":
            points = widen_points(table)
            if points:
                write_widened(a.config, points)
            print(f"widened {a.config} by {len(points)} points: {' '.join(p for p, _ in points) or '-'}")
            return 0
        if a.cmd == "joint":
            points = joint_points(table)
            if points:
                write_widened(a.config, points)
            cfg = yaml.safe_load(a.config.read_text(encoding="utf-8"))
            # a tuned seed-0 run made at the combined values before this step existed is that point's run
            done = reuse(a.runs, cfg, [(a.runs / TUNED / f"method~{p.split('+')[0]}-tuned" / "seed~0", SWEEP, p)
                                       for p, _ in points])
            print("\n".join([f"joint: {a.config} gained {len(points)} points: "
                              f"{' '.join(p for p, _ in points) or '-'}", *done]))
            return 0
        if a.cmd == "confirm":
            points = confirm_points(table)
            if points:
                write_confirm(a.config, points)
            print(f"confirm: {a.config}'s confirmation grid holds {len(points)} points: "
                  f"{' '.join(p for p, _ in points) or '-'}")
            return 0
        if a.cmd == "extend":
            cfg, conf, _ = _held_out_check(a.config, a.runs, table)
            grid = set(cfg["experiments"][CONFIRM]["grid"]["method"])
            points = [(p, body) for p, body in extend_points(table, conf) if p not in grid]
            if points:
                write_confirm(a.config, points)
            print(f"extended {a.config}'s confirmation grid by {len(points)} points: "
                  f"{' '.join(p for p, _ in points) or '-'}")
            return 0
        if a.cmd == "repick":
            print("\n".join(_repick(a.config, a.runs, table)))
            print(f"wrote {a.config}'s tuned block (inner lr confirmed on the held-out seeds)")
            return 0
        write_tuned(a.config, table)
        cfg = yaml.safe_load(a.config.read_text(encoding="utf-8"))
        done = []
        if 0 in (cfg["experiments"].get(TUNED, {}).get("seeds") or cfg.get("seeds") or []):
            done = reuse(a.runs, cfg, [(root / f"method~{p}" / "seed~0", TUNED, f"{m}-tuned")
                                       for m, p in best_points(table).items()])
    except (ValueError, OSError, KeyError) as e:
        print(f"lowbw.report.lmc_sweep: {e}", file=sys.stderr)
        return 2
    print(table.to_string(index=False))
    print("\n".join([*done, f"wrote {a.config}'s tuned block"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
