"""Charles et al. (2025, arXiv 2503.09799) Table 6 reproduced by the advisor's step model.

Their Table 6 gives the bandwidth (Gbit/s) that data-parallel training (DP) and DiLoCo every H = 100 and
H = 300 steps need for 50 / 80 / 90 / 95 / 99 % compute utilisation, for a 10B-parameter model whose step
computes for 0.8 s (:data:`PUBLISHED`). We solve the advisor's model for the same utilisations
(:func:`lowbw.advise.utilisation.bandwidth_for`: bf16 parameters, as their model assumes, in TCP/IP frames;
:data:`WORKERS` replicas on equal links without latency; the fastest all-reduce the cost model knows; DP's exchange
overlapping the step's compute, DiLoCo's outer exchange blocking).

Their cells lie on a 50-point logarithmic grid from 0.1 to 1000 Gbit/s (every published value is
``10^(-1 + 4k/49)`` as printed to one decimal, within 2 %: :func:`on_grid` checks it), so each is the
smallest grid rate that reaches the utilisation; we round ours up to the same grid before comparing
(:data:`TOLERANCE`). Where a row misses, :func:`rows` names the assumption that differs, from the cells
themselves: for DP the utilisation ours reaches at their rate; for DiLoCo the ratio of their rates to ours
(their model moves fewer bytes per outer step or hides part of it; ours blocks on the whole all-reduce).
"""

from __future__ import annotations

import math
import statistics

from lowbw.advise.utilisation import bandwidth_for, utilisation
from lowbw.report.latex import booktabs

__all__ = ["TABLE6_PREFIX", "TABLE6", "PUBLISHED", "UTILISATIONS", "PARAMS", "STEP_S", "WORKERS", "BYTES_PER_PARAM",
           "TOLERANCE", "grid",
           "on_grid", "rows", "numbers", "table"]

TABLE6_PREFIX = "TableSix"  # the macros of numbers.tex this module writes, whatever the profile ran
TABLE6: dict[str, str] = {
    "TableSixCells": "cells of their Table 6 (methods x utilisations)",
    "TableSixWithin": "cells the advisor's model, on their grid, reproduces within 10%",
    "TableSixWorkers": "replicas in the advisor's model of their setting",
    "TableSixOnGrid": "published cells on the inferred 50-point log grid of 0.1-1000 Gbit/s",
    "TableSixDpWithin": "data-parallel cells within 10%",
    "TableSixDilocoRatio": "median ratio of their DiLoCo rates to the advisor's (continuous)",
}
PARAMS = 1e10  # their model's parameters
STEP_S = 0.8  # their step's compute (s)
WORKERS = 2  # replicas (datacenters) in our model
BYTES_PER_PARAM = 2  # bf16, as their model assumes
UTILISATIONS = (0.5, 0.8, 0.9, 0.95, 0.99)
TOLERANCE = 0.10  # a cell matches within 10 %
# Charles et al. 2025, Table 6 (Gbit/s): period H (1 = data-parallel) -> one rate per utilisation
PUBLISHED: dict[int, tuple[float, ...]] = {
    1: (104.8, 184.2, 222.3, 222.3, 390.7),
    100: (1.4, 6.2, 13.3, 23.3, 86.8),
    300: (0.5, 2.0, 4.3, 9.1, 41.0),
}


def grid() -> list[float]:
    """Their inferred grid of rates (Gbit/s): 50 points from 0.1 to 1000, evenly spaced in log."""
    return [10 ** (-1 + 4 * k / 49) for k in range(50)]


def on_grid(value: float) -> bool:
    """Whether a published cell is a grid point as printed (within 2 %, or one decimal's rounding)."""
    return any(abs(g - value) <= max(0.02 * value, 0.05) for g in grid())


def _up(gbit: float) -> float:
    """The smallest grid rate >= ``gbit`` (inf beyond the grid)."""
    return next((g for g in grid() if g >= gbit * (1 - 1e-9)), math.inf)


def rows() -> list[dict]:
    """One row per method: ours (continuous and on the grid), theirs, each cell's ratio, and the assumption
    that differs where a cell misses."""
    out = []
    for h, theirs in PUBLISHED.items():
        ours = [bandwidth_for(u, h, PARAMS, BYTES_PER_PARAM, STEP_S, WORKERS) / 1e9 for u in UTILISATIONS]
        gridded = [_up(x) for x in ours]
        ratio = [g / t for g, t in zip(gridded, theirs)]
        match = [abs(r - 1) <= TOLERANCE for r in ratio]
        if all(match):
            differs = "none"
        elif h == 1:
            miss = [i for i, m in enumerate(match) if not m]
            at = ", ".join(f"{100 * utilisation(1, PARAMS, BYTES_PER_PARAM, STEP_S, WORKERS, theirs[i] * 1e9):.1f}"
                           f"% at their {theirs[i]:g} Gbit/s for {100 * UTILISATIONS[i]:g}%" for i in miss)
            differs = (f"overlap: ours hides the all-reduce behind the whole step's compute, and only DDP's last "
                       f"25 MiB bucket shows; ours reaches {at}")
        else:
            f = statistics.median(t / o for t, o in zip(theirs, ours))
            differs = (f"outer step: ours blocks on one all-reduce of the bf16 model; their rates are a median "
                       f"{f:.2f}x ours (fewer bytes per outer step, or part of it hidden behind compute)")
        out.append({"period": h, "ours": ours, "ours_grid": gridded, "theirs": list(theirs), "ratio": ratio,
                    "match": match, "differs": differs})
    return out


def numbers() -> dict[str, str]:
    """The paper's macros of the reproduction."""
    t = rows()
    cells = [m for r in t for m in r["match"]]
    dil = [th / o for r in t if r["period"] > 1 for th, o in zip(r["theirs"], r["ours"])]
    return {"TableSixCells": str(len(cells)), "TableSixWithin": str(sum(cells)),
            "TableSixWorkers": str(WORKERS),
            "TableSixOnGrid": str(sum(on_grid(v) for vs in PUBLISHED.values() for v in vs)),
            "TableSixDpWithin": str(sum(t[0]["match"])),
            "TableSixDilocoRatio": f"{statistics.median(dil):.2f}"}


def table() -> str:
    """Their Table 6 beside the advisor's, cell by cell, and what differs per row."""
    body = []
    for r in rows():
        name = "DP" if r["period"] == 1 else f"DiLoCo $H={r['period']}$"
        for label, vals in (("theirs", r["theirs"]), ("advisor", r["ours"]), ("advisor, grid", r["ours_grid"])):
            body.append([name if label == "theirs" else "", label] + [f"{v:.1f}" if v >= 1 else f"{v:.2f}"
                                                                     for v in vals])
        body.append(["", "grid / theirs"] + [f"{x:.2f}" + ("" if m else r"$^\ast$")
                                              for x, m in zip(r["ratio"], r["match"])])
    notes = "; ".join(f"{'DP' if r['period'] == 1 else 'H=' + str(r['period'])}: {r['differs']}" for r in rows())
    return booktabs(body, ["Method", "", *(f"{100 * u:g}\\,\\%" for u in UTILISATIONS)],
                    "Bandwidth (Gbit/s) for a compute utilisation of a 10B-parameter model with 0.8\\,s of compute "
                    "per step: Charles et al.\\ (2025, Table 6) and the advisor's step model solved for the rate "
                    f"(bf16, {WORKERS} replicas, no latency), continuous and rounded up to their 50-point log grid "
                    r"of 0.1--1000\,Gbit/s; $^\ast$: more than 10\,\% apart.", "tab:table6",
                    align="llrrrrr", note="What differs: " + notes.replace("%", r"\%"), size=r"\scriptsize")
