"""The lm_evidence profile's recorded sweep (config/lm_evidence.yaml): one row per sweep point, and each method's
picked values written into the config's tuned block.

A sweep point is a preset ``<method>`` (the method's defaults), ``<method>+lrx<m>`` (inner learning rate x m,
lr_min = lr / 10), ``<method>+olr<v>`` (outer learning rate v) or ``<method>+om<v>`` (outer Nesterov momentum v),
each varying one knob from the method's defaults. Each method's inner lr is the one whose seed-0 run ends with
the lowest validation loss among its ``lrx`` points and its default, its outer lr and outer momentum likewise
among their points and the default (coordinate-wise: the profile's budget has no joint grid). A run whose loss
is not finite counts as the worst.

Where a pick sits at the edge of what its knob tried, ``widen`` adds the next point beyond it (inner lr x2 above
the largest multiple tried or x0.5 below the smallest; outer lr and momentum the next rung of ``LADDERS``) to the
config's widened block and to the sweep's grid, so that the campaign runs it before the pick.

    python -m lowbw.report.lmc_sweep widen --config config/lm_evidence.yaml --runs runs
    python -m lowbw.report.lmc_sweep pick --config config/lm_evidence.yaml --runs runs
"""

from __future__ import annotations

import argparse
import math
import re
import sys
from pathlib import Path

import pandas as pd

from lowbw.runs.results import load_runs
from lowbw.train.schemes.registry import SCHEMES, reads

__all__ = ["SWEEP", "LADDERS", "split_point", "sweep_table", "picks", "at_edge", "tuned_block", "write_tuned",
           "widen_points", "write_widened", "main"]

SWEEP = "e9_lmc_sweep"  # the sweep's experiment
BEGIN, END = "  # BEGIN tuned", "  # END tuned"  # the config's tuned block (its first and last line)
WIDE_BEGIN, WIDE_END = "  # BEGIN widened", "  # END widened"  # the config's widened block
# the rungs an outer knob widens along (a pick at a ladder's end stays there: outer momentum below 0 is no knob)
LADDERS = {"outer_lr": (0.1, 0.15, 0.25, 0.35, 0.5, 0.7, 1.0, 1.4, 2.0, 2.8),
           "outer_momentum": (0.0, 0.5, 0.9, 0.95, 0.99)}
_TAG = {"lr": "lrx", "outer_lr": "olr", "outer_momentum": "om"}  # a knob's tag in a point's name
_POINT = re.compile(r"^(?P<method>[A-Za-z0-9_]+)(?:\+(?P<knob>lrx|olr|om)(?P<value>[0-9.]+))?$")
KNOBS = ("lr", "outer_lr", "outer_momentum")  # the swept knobs, in the order the tuned block names them
_OUTER = ("outer_lr", "outer_momentum")  # the knobs only an outer step reads (NaN for the others)


def split_point(point: str) -> tuple[str, str | None, float | None]:
    """``"dense+lrx2"`` -> ``("dense", "lr", 2.0)``; ``"diloco16+olr0.5"`` -> ``("diloco16", "outer_lr", 0.5)``;
    ``"diloco16+om0.5"`` -> ``("diloco16", "outer_momentum", 0.5)``; ``"dense"`` -> ``("dense", None, None)``."""
    m = _POINT.match(point)
    if m is None:
        raise ValueError(f"sweep point {point!r} is not <method>, <method>+lrx<m>, <method>+olr<v> or <method>+om<v>")
    knob = {"lrx": "lr", "olr": "outer_lr", "om": "outer_momentum", None: None}[m["knob"]]
    return m["method"], knob, (float(m["value"]) if m["value"] else None)


def sweep_table(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per sweep run: ``method``, ``knob`` (lr | outer_lr | outer_momentum | default), ``lr``,
    ``outer_lr`` and ``outer_momentum`` (NaN where the method has no outer step), ``final_val_loss``,
    ``best_val_loss``, and ``picked`` (the point supplies a picked value: a knob's point its knob's, the default
    point any)."""
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
    p = picks(t)
    t["picked"] = [_supplies(r, p[r["method"]]) for _, r in t.iterrows()]
    return t


def _supplies(r: pd.Series, pick: dict[str, float]) -> bool:
    """Does sweep row ``r`` supply one of its method's picked values (the default point: either knob's)?"""
    ok = {k: k in pick and r[k] == pick[k] for k in KNOBS}
    return any(ok.values()) if r["knob"] == "default" else ok[r["knob"]]


def _score(v: float) -> float:
    return v if math.isfinite(v) else math.inf


def picks(table: pd.DataFrame) -> dict[str, dict[str, float]]:
    """method -> ``{"lr": ..., "outer_lr": ..., "outer_momentum": ...}`` (the outer knobs only for outer-step
    methods): the value of each knob whose point ends lowest (ties: the default's)."""
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


def at_edge(table: pd.DataFrame) -> dict[str, list[str]]:
    """method -> the knobs (``lr``, ``outer_lr``, ``outer_momentum``) whose picked value is the largest or the
    smallest of the values tried (at least two): the optimum may lie beyond the grid, so the grid should
    widen on that side."""
    out: dict[str, list[str]] = {}
    for method, pick in picks(table).items():
        g = table[table["method"] == method]
        for knob, v in pick.items():
            rows = g[g["knob"].isin(["default", knob])]
            tried = sorted(set(float(x) for x in rows[knob] if not math.isnan(x)))
            if len(tried) >= 2 and v in (tried[0], tried[-1]):
                out.setdefault(str(method), []).append(knob)
    return out


def tuned_block(table: pd.DataFrame) -> list[str]:
    """The config's tuned block: one ``<method>-tuned`` preset per method, its values and where they came from."""
    lines = [BEGIN + ": written by `python -m lowbw.report.lmc_sweep pick` from e9_lmc_sweep (do not edit by hand)"]
    edge = at_edge(table)
    for method, p in picks(table).items():
        g = table[table["method"] == method]
        d = g[g["knob"] == "default"].iloc[0]
        keys = {"lr": p["lr"], "lr_min": p["lr"] / 10}
        why = [f"lr x{p['lr'] / d['lr']:g} of {len(g[g['knob'].isin(['default', 'lr'])])}"]
        for knob, label in (("outer_lr", "outer lr"), ("outer_momentum", "outer momentum")):
            if knob in p:
                keys[knob] = p[knob]
                why.append(f"{label} {p[knob]:g} of {len(g[g['knob'].isin(['default', knob])])}")
        body = ", ".join(f"{k}: {v:g}" for k, v in keys.items())
        flag = f"; at the grid's edge: {', '.join(edge[method])}" if method in edge else ""
        lines.append(f"  {method}-tuned: {{<<: *{method}, {body}}}  # sweep (seed 0, final val loss): "
                     + "; ".join(why) + flag)
    lines.append(END)
    return lines


def widen_points(table: pd.DataFrame) -> list[tuple[str, str]]:
    """(point, preset) for each knob whose pick sits at the edge of what it tried: one point beyond that edge,
    e.g. ``("dense+lrx4", "{<<: *dense, lr: 0.064, lr_min: 0.0064}")`` when x2 of the centre's 0.016 was the
    largest tried and the best. Points already in ``table`` and ladder ends are skipped."""
    out = []
    have = set(table["point"])
    chosen = picks(table)
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


def write_widened(config: Path, points: list[tuple[str, str]]) -> None:
    """Append ``points`` to ``config``'s widened block (one preset line each) and to the sweep's grid (its
    ``method: [...]`` line under ``e9_lmc_sweep:``)."""
    text = config.read_text(encoding="utf-8").splitlines()
    ends = [i for i, s in enumerate(text) if s.startswith(WIDE_END)]
    starts = [i for i, s in enumerate(text) if s.startswith(WIDE_BEGIN)]
    exp = [i for i, s in enumerate(text) if s.strip() == f"{SWEEP}:"]
    if len(starts) != 1 or len(ends) != 1 or ends[0] < starts[0] or len(exp) != 1:
        raise ValueError(f"{config}: needs one '{WIDE_BEGIN.strip()}' line before one '{WIDE_END.strip()}' line "
                         f"and one '{SWEEP}:' experiment")
    grid = next((i for i in range(exp[0] + 1, len(text)) if text[i].lstrip().startswith("method: [")), None)
    if grid is None or not text[grid].rstrip().endswith("]"):
        raise ValueError(f"{config}: {SWEEP}'s grid needs its points on one 'method: [...]' line")
    text[grid] = text[grid].rstrip()[:-1] + "".join(f", {p}" for p, _ in points) + "]"
    text[ends[0]:ends[0]] = [f"  {p}: {body}" for p, body in points]
    tmp = config.with_suffix(config.suffix + ".tmp")
    tmp.write_text("\n".join(text) + "\n", encoding="utf-8")
    tmp.replace(config)


def write_tuned(config: Path, table: pd.DataFrame) -> None:
    """Replace ``config``'s tuned block (from its BEGIN line to its END line) by :func:`tuned_block`."""
    text = config.read_text(encoding="utf-8").splitlines()
    starts = [i for i, s in enumerate(text) if s.startswith(BEGIN)]
    ends = [i for i, s in enumerate(text) if s.startswith(END)]
    if len(starts) != 1 or len(ends) != 1 or ends[0] < starts[0]:
        raise ValueError(f"{config}: needs exactly one '{BEGIN.strip()}' line before one '{END.strip()}' line")
    text[starts[0]:ends[0] + 1] = tuned_block(table)
    tmp = config.with_suffix(config.suffix + ".tmp")
    tmp.write_text("\n".join(text) + "\n", encoding="utf-8")
    tmp.replace(config)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m lowbw.report.lmc_sweep", description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    for cmd, what in (("pick", "write each method's picked values into the config's tuned block"),
                      ("widen", "add a point beyond each pick at the edge of its grid (prints how many)")):
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
        write_tuned(a.config, table)
    except (ValueError, OSError) as e:
        print(f"lowbw.report.lmc_sweep: {e}", file=sys.stderr)
        return 2
    print(table.to_string(index=False))
    print(f"wrote {a.config}'s tuned block")
    return 0


if __name__ == "__main__":
    sys.exit(main())
