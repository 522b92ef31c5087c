"""E12 -- Charles et al. 2025's DiLoCo scaling experiment at micro scale (issue 44; "Communication-Efficient
Language Model Training Scales Reliably and Robustly: Scaling Laws for DiLoCo", arXiv 2503.09799).

The runs are the scaling profile's (``config/scaling.yaml``: dense data-parallel training (DP) and DiLoCo at
M = 1, 2, 4, 8 with H = 30 on three GPT sizes, 3 seeds; top-k, PowerSGD, SparseLoCo and MuLoCo at M = 4; the
inner- and outer-lr sweeps), kept in the repository in ``paper/measured/scaling`` (``python -m lowbw store add
--cpu``) so that every profile's PDF quotes them; runs of the same path under ``runs/`` (a rerun of the
profile) take their place. Whatever subset is stored is reported, with its counts.

Analysis, as theirs on their runs:

1. their Table 4's layout: the final evaluation loss (nats/character on the validation windows) per size and
   column (DP, M = 1, 2, 4, 8), mean over seeds, beside theirs;
2. per column, L(N) = A N^alpha fitted over every run (each seed a point; :func:`lowbw.advise.size_trend.fit_power`,
   95% intervals), beside their fits;
3. the joint fit over DiLoCo's runs, L = A N^alpha M^beta, beside theirs (19.226 N^-0.0985 M^0.0116);
4. whether the gap to dense shrinks with size: per M, the per-seed ratio L_M / L_DP fitted as a N^b; the gap
   shrinks where b's interval lies below 0, grows where above, and no trend is resolved where it spans 0 (theirs:
   b = alpha_M - alpha_DP of their fits, negative at every M);
5. the outer lr: the best at each M at the smallest size (their best rises with M), and at M = 4 whether the best
   of {pick - 0.2, pick, pick + 0.2} stays at the pick at the larger sizes (theirs does not depend on size);
6. the other families at M = 4: loss ratio and step multiplier to DP per size and their power laws in N
   (:mod:`lowbw.advise.size_trend`, whose points this experiment's ``trends`` table is: the advisor reads it).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import yaml

from lowbw.advise.size_trend import CHARLES_FITS, CHARLES_JOINT, CHARLES_TABLE4, POINT_COLUMNS, fit_power, points, trend
from lowbw.report.common import plotting
from lowbw.report.conditions import runs_provenance
from lowbw.report.experiment import Context, Experiment, Stats
from lowbw.report.latex import booktabs, escape, fmt_num, fmt_pm
from lowbw.report.stats import mean_std
from lowbw.runs.results import load_metrics, load_runs
from lowbw.workflow.grid import expand

__all__ = ["E12", "STORE", "COLUMNS", "gap_word"]

STORE = Path("paper/measured/scaling")  # the campaign's runs kept in the repository
CONFIG = Path(__file__).resolve().parents[2] / "config" / "scaling.yaml"  # the profile that made them
COLUMNS = ("DP", "M=1", "M=2", "M=4", "M=8")  # their Table 4's columns
H = 30  # inner steps per outer step (theirs, config/scaling.yaml's world_period)
MAIN = {"dense": "DP", "dl30m1": "M=1", "dl30m2": "M=2", "dl30m4": "M=4", "dl30m8": "M=8"}  # preset -> column
FAMILY = {"dense": "dense", "dl30m1": "diloco", "dl30m2": "diloco", "dl30m4": "diloco", "dl30m8": "diloco",
          "topk1": "sparsify", "powersgd": "lowrank", "sparseloco30": "sparseloco", "muloco30": "muloco"}
FAMILY_WORDS = {"diloco": "DiLoCo", "sparsify": "top-k 1\\% (EF)", "lowrank": "PowerSGD rank 2",
                "sparseloco": "SparseLoCo", "muloco": "MuLoCo"}
MISSING = f"no scaling runs stored in {STORE} or run under runs/e12_* (config/scaling.yaml)"


def _expected() -> dict[str, int]:
    """Runs per experiment of the scaling profile (what a complete campaign stores)."""
    if not CONFIG.is_file():
        return {}
    cfg = yaml.safe_load(CONFIG.read_text(encoding="utf-8"))
    return {name: len(expand(exp, cfg["seeds"])) for name, exp in cfg["experiments"].items()}


def _load(ctx: Context):
    """(runs, metrics) of every complete E12 run: the store's, replaced by ``runs/``'s of the same path."""
    runs, mets = [], []
    for src, root in (("store", STORE), ("runs", ctx.runs_dir)):
        if not root.is_dir():
            continue
        for d in sorted(p for p in root.glob("e12_*") if p.is_dir()):
            r = load_runs(d, incomplete="skip")
            if r.empty:
                continue
            r = r[r["complete"].astype(bool)]
            runs.append(r.assign(experiment=d.name, source=src))
            m = load_metrics(d, incomplete="skip")
            mets.append(m[m["val_loss"].notna()].assign(experiment=d.name, source=src) if "val_loss" in m else m)
    if not runs:
        return None, None
    runs = pd.concat(runs, ignore_index=True).drop_duplicates(["experiment", "run"], keep="last")
    mets = pd.concat(mets, ignore_index=True)
    keep = set(zip(runs["experiment"], runs["run"], runs["source"]))
    mets = mets[[k in keep for k in zip(mets["experiment"], mets["run"], mets["source"])]]
    return runs.reset_index(drop=True), mets


def _curve(mets, experiment: str, run: str) -> list[tuple[float, float]]:
    m = mets[(mets["experiment"] == experiment) & (mets["run"] == run)].sort_values("step")
    return [(float(s), float(v)) for s, v in zip(m["step"], m["val_loss"])]


def gap_word(lo: float, hi: float, b: float) -> str:
    """How the gap to dense moves with size, from the exponent b of L_M / L_DP = a N^b and its interval."""
    if math.isfinite(lo) and math.isfinite(hi):
        return "shrinks" if hi < 0 else "grows" if lo > 0 else "shows no resolved trend"
    return "shrinks (no interval)" if b < 0 else "grows (no interval)"


def stats(ctx: Context) -> Stats | None:
    runs, mets = _load(ctx)
    if runs is None:
        return None
    if (runs["source"] == "store").any():
        ctx.read_store("scaling")
    runs = runs.assign(size_rank=runs["params"].rank(method="dense").astype(int))
    main = runs[runs["experiment"].isin(["e12_tiny", "e12_mini", "e12_mid"]) & runs["method"].isin(list(MAIN))]
    main = main.assign(column=main["method"].map(MAIN))
    sizes = (runs[["model", "params", "steps", "batch_size", "block_size"]].drop_duplicates("model")
             .sort_values("params").reset_index(drop=True))
    sizes["tokens"] = sizes["steps"] * sizes["batch_size"] * sizes["block_size"]
    sizes["tokens_per_param"] = sizes["tokens"] / sizes["params"]
    sizes["outer_steps"] = -(-sizes["steps"] // H)  # DiLoCo's outer steps, the last after a partial period

    table4 = []
    for _, s in sizes.iterrows():
        for c in COLUMNS:
            ms = mean_std(main[(main["model"] == s["model"]) & (main["column"] == c)]["final_val_loss"])
            table4.append({"model": s["model"], "params": int(s["params"]), "column": c, "loss_mean": ms.mean,
                           "loss_std": ms.std, "seeds": ms.n})
    table4 = pd.DataFrame(table4)

    fits = []
    for c in COLUMNS:
        d = main[main["column"] == c]
        row = {"column": c, "A": math.nan, "alpha": math.nan, "alpha_lo": math.nan, "alpha_hi": math.nan,
               "points": len(d), "sizes": int(d["params"].nunique()), "charles_A": CHARLES_FITS[_ck(c)][0],
               "charles_alpha": CHARLES_FITS[_ck(c)][1]}
        if d["params"].nunique() >= 2:
            f = fit_power(list(d["params"].astype(float)), list(d["final_val_loss"].astype(float)))
            row.update(A=f.A, alpha=f.alpha, alpha_lo=f.alpha_lo, alpha_hi=f.alpha_hi)
        fits.append(row)
    fits = pd.DataFrame(fits)

    dl = main[main["column"] != "DP"]
    joint = {"A": math.nan, "alpha": math.nan, "beta": math.nan, "beta_lo": math.nan, "beta_hi": math.nan,
             "alpha_lo": math.nan, "alpha_hi": math.nan, "points": len(dl)}
    if dl["params"].nunique() >= 2 and dl["workers"].nunique() >= 2 and len(dl) >= 3:
        f = fit_power(list(dl["params"].astype(float)), list(dl["final_val_loss"].astype(float)),
                      list(dl["workers"].astype(float)))
        joint.update(A=f.A, alpha=f.alpha, alpha_lo=f.alpha_lo, alpha_hi=f.alpha_hi, beta=f.beta,
                     beta_lo=f.beta_lo, beta_hi=f.beta_hi)
    joint = pd.DataFrame([{**joint, "charles_A": CHARLES_JOINT[0], "charles_alpha": CHARLES_JOINT[1],
                           "charles_beta": CHARLES_JOINT[2]}])

    gaps = []
    dp = main[main["column"] == "DP"].set_index(["model", "seed"])["final_val_loss"]
    for c in COLUMNS[1:]:
        d = main[main["column"] == c]
        pairs = [(float(p), float(v) / float(dp[(mo, s)])) for mo, s, p, v in
                 zip(d["model"], d["seed"], d["params"], d["final_val_loss"]) if (mo, s) in dp.index]
        row = {"column": c, "b": math.nan, "b_lo": math.nan, "b_hi": math.nan, "pairs": len(pairs),
               "charles_b": CHARLES_FITS[_ck(c)][1] - CHARLES_FITS["DP"][1], "word": "not measured"}
        if len({p for p, _ in pairs}) >= 2:
            f = fit_power([p for p, _ in pairs], [r for _, r in pairs])
            row.update(b=f.alpha, b_lo=f.alpha_lo, b_hi=f.alpha_hi, word=gap_word(f.alpha_lo, f.alpha_hi, f.alpha))
        for _, s in sizes.iterrows():
            r = [v for p, v in pairs if p == s["params"]]
            row[f"gap_pct.{s['model']}"] = 100 * (sum(r) / len(r) - 1) if r else math.nan
        gaps.append(row)
    gaps = pd.DataFrame(gaps)

    tables = {"sizes": sizes, "table4": table4, "fits": fits, "joint": joint, "gaps": gaps,
              "outer": _outer(runs), "inner": _inner(runs), "counts": _counts(runs)}
    records = [{"family": FAMILY[m], "workers": int(w), "params": int(p), "curve": _curve(mets, e, r)}
               for e, r, m, w, p in zip(runs["experiment"], runs["run"], runs["method"], runs["workers"],
                                        runs["params"])
               if e in ("e12_tiny", "e12_mini", "e12_mid", "e12_comp_tiny", "e12_comp_mini", "e12_comp_mid")
               and m in FAMILY]
    tables["trends"] = pd.DataFrame(points([r for r in records if r["curve"]]), columns=POINT_COLUMNS)
    return Stats(tables, {"source": f"{STORE} (runs/e12_* where rerun)", "config": "config/scaling.yaml",
                          "stored": int((runs["source"] == "store").sum()), "runs": len(runs),
                          "expected": sum(_expected().values()),
                          "measured_dates": _dates(runs),
                          "provenance": runs_provenance(STORE / e / r for e, r, src in
                                                        zip(runs["experiment"], runs["run"], runs["source"])
                                                        if src == "store")})


def _dates(runs) -> list[str]:
    """The days the stored runs ran (their provenance.json's ``measured_date``)."""
    days = set()
    for exp, run, src in zip(runs["experiment"], runs["run"], runs["source"]):
        p = STORE / exp / run / "provenance.json"
        if src == "store" and p.is_file():
            days.add(str(json.loads(p.read_text(encoding="utf-8")).get("measured_date")))
    return sorted(days)


def _ck(column: str) -> str:
    return "DP" if column == "DP" else column.split("=")[1]


def _outer(runs) -> pd.DataFrame:
    """Final loss per (size, M, outer lr): the gpt-tiny sweep, the M = 4 checks and the main runs' seed 0."""
    rows = []
    for _, r in runs.iterrows():
        exp = r["experiment"]
        if exp.startswith("e12_outer_") or (exp in ("e12_tiny", "e12_mini", "e12_mid") and r["method"] in MAIN
                                            and r["method"] != "dense" and int(r["seed"]) == 0):
            rows.append({"model": r["model"], "params": int(r["params"]), "workers": int(r["workers"]),
                         "outer_lr": float(r["outer_lr"]), "loss": float(r["final_val_loss"]), "experiment": exp})
    df = pd.DataFrame(rows, columns=["model", "params", "workers", "outer_lr", "loss", "experiment"])
    return df.sort_values(["params", "workers", "outer_lr"]).drop_duplicates(["model", "workers", "outer_lr"])


def _inner(runs) -> pd.DataFrame:
    d = runs[runs["experiment"].str.startswith("e12_lr_")]
    return (d[["model", "params", "lr", "final_val_loss"]].rename(columns={"final_val_loss": "loss"})
            .sort_values(["params", "lr"]).reset_index(drop=True))


def _counts(runs) -> pd.DataFrame:
    exp = _expected()
    have = runs.groupby("experiment").size()
    names = sorted(set(exp) | set(have.index))
    return pd.DataFrame([{"experiment": n, "runs": int(have.get(n, 0)), "expected": exp.get(n)} for n in names])


# ------------------------------------------------------------------------------------------------ numbers
def _pct(x: float) -> str:
    return f"{fmt_num(x, 2)}\\,\\%" if math.isfinite(x) else "--"


def _charles_gap(size: float, col: int) -> float:
    row = CHARLES_TABLE4[size]
    return 100 * (row[col] / row[0] - 1)


def _join(words: list[str]) -> str:
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


def _outer_words(outer: pd.DataFrame) -> dict[str, str]:
    out = {}
    if outer.empty:
        return {"ETwelveOuterBest": "not measured", "ETwelveOuterRises": "cannot be told yet",
                "ETwelveOuterVerdict": "cannot be told yet (no outer-lr runs stored)"}
    small = outer[outer["params"] == outer["params"].min()]
    best = small.loc[small.groupby("workers")["loss"].idxmin()].sort_values("workers")
    out["ETwelveOuterBest"] = _join([f"{b:g} at $M={w}$" for w, b in zip(best["workers"], best["outer_lr"])])
    bests = list(best["outer_lr"])
    out["ETwelveOuterRises"] = ("cannot be told from one $M$ yet" if len(bests) < 2
                                else "rises with $M$" if bests == sorted(bests) and bests[-1] > bests[0]
                                else "stays the same at every $M$" if len(set(bests)) == 1
                                else "does not rise steadily with $M$")
    m4 = outer[outer["workers"] == 4]
    per = []
    for _, g in m4.groupby("params"):
        if len(g) >= 3:
            per.append((g["model"].iloc[0], float(g.loc[g["loss"].idxmin(), "outer_lr"])))
    if len(per) < 2:
        out["ETwelveOuterVerdict"] = "cannot be told yet (fewer than two sizes have three outer lrs at $M=4$)"
    elif len({b for _, b in per}) == 1:
        out["ETwelveOuterVerdict"] = (f"stays at {per[0][1]:g} at every size measured "
                                      f"({_join([escape(m) for m, _ in per])}), as in Charles et al.")
    else:
        out["ETwelveOuterVerdict"] = ("moves with size (" + _join([f"{escape(m)} {b:g}" for m, b in per])
                                      + "), unlike Charles et al.'s")
    return out


def numbers(st: Stats) -> dict[str, str]:
    t = st.tables
    sizes, t4, gaps, joint = t["sizes"], t["table4"], t["gaps"], t["joint"].iloc[0]
    out = {"ETwelveSizes": _join([f"{escape(m)} ({fmt_num(int(p))})" for m, p in zip(sizes["model"], sizes["params"])]),
           "ETwelveSpan": fmt_num(sizes["params"].max() / sizes["params"].min(), 3),
           "ETwelveBudget": _join([f"{escape(m)} {fmt_num(int(n))} tokens ({fmt_num(r, 3)}\\,$N$)" for m, n, r in
                                   zip(sizes["model"], sizes["tokens"], sizes["tokens_per_param"])]),
           "ETwelveStored": f"{st.meta['runs']} of {st.meta['expected']}",
           "ETwelveSeeds": fmt_num(int(t4.loc[t4["seeds"] > 0, "seeds"].min()) if (t4["seeds"] > 0).any() else 0),
           "ETwelveCells": f"{int((t4['seeds'] > 0).sum())} of {len(t4)}"}
    out["ETwelveJointA"] = fmt_num(joint["A"], 4)
    out["ETwelveJointAlpha"] = fmt_num(joint["alpha"], 3)
    out["ETwelveJointBeta"] = fmt_num(joint["beta"], 3)
    out["ETwelveJointBetaCI"] = (f"[{fmt_num(joint['beta_lo'], 2)}, {fmt_num(joint['beta_hi'], 2)}]"
                                 if math.isfinite(joint["beta_lo"]) else "--")
    out["ETwelveCharlesJoint"] = (f"{fmt_num(CHARLES_JOINT[0], 5)}\\,$N^{{{CHARLES_JOINT[1]}}}"
                                  f"M^{{{CHARLES_JOINT[2]}}}$")
    measured = gaps[gaps["word"] != "not measured"]
    words = {}
    for c, w in zip(measured["column"], measured["word"]):
        words.setdefault(w, []).append(c.replace("M=", ""))
    out["ETwelveGapVerdict"] = ("cannot be told yet (fewer than two sizes with DP and DiLoCo)" if not words else
                                "; ".join(f"{w} with size at $M = {', '.join(ms)}$" for w, ms in words.items()))
    shrink = [w.startswith("shrinks") for w in measured["word"]]
    out["ETwelveAgreement"] = ("cannot yet be compared with" if not shrink else "agrees with" if all(shrink)
                               else "disagrees with" if not any(shrink) else "partly agrees with")
    small, large = sizes["model"].iloc[0], sizes["model"].iloc[-1]
    g4 = gaps.set_index("column").loc["M=4"] if "M=4" in set(gaps["column"]) else None
    out["ETwelveGapMFourSmall"] = _pct(g4[f"gap_pct.{small}"] if g4 is not None else math.nan)
    out["ETwelveGapMFourLarge"] = _pct(g4[f"gap_pct.{large}"] if g4 is not None else math.nan)
    out["ETwelveCharlesGapMFourSmall"] = _pct(_charles_gap(35e6, 3))
    out["ETwelveCharlesGapMFourLarge"] = _pct(_charles_gap(2.4e9, 3))
    m1 = t4[(t4["column"] == "M=1") & (t4["seeds"] > 0)].set_index("model")["loss_mean"]
    dpm = t4[(t4["column"] == "DP") & (t4["seeds"] > 0)].set_index("model")["loss_mean"]
    both = [m for m in m1.index if m in dpm.index]
    below = sum(m1[m] < dpm[m] for m in both)
    out["ETwelveMOne"] = (f"below DP's at {below} of {len(both)} sizes" if both else "not measured yet")
    out.update(_outer_words(t["outer"]))
    inner = t["inner"]
    picks, edge = [], []
    for _, g in inner.groupby("params", sort=True):
        b = g.loc[g["loss"].idxmin()]
        picks.append(f"{escape(b['model'])} {float(b['lr']):g}")
        if len(g) >= 3 and float(b["lr"]) in (g["lr"].min(), g["lr"].max()):
            edge.append(escape(b["model"]))
    out["ETwelveInnerLr"] = _join(picks) if picks else "not measured"
    out["ETwelveInnerEdge"] = (f"at the edge of the grid for {_join(edge)}" if edge
                               else "inside the grid at every size" if picks else "not measured")
    out["ETwelveFamilyTrends"] = _family_words(t["trends"])
    out["ETwelveReason"] = _reason(sizes, out["ETwelveAgreement"])
    return out


def _family_words(trends: pd.DataFrame) -> str:
    rows = trends.to_dict("records")
    words = []
    for fam in ("diloco", "sparsify", "lowrank", "sparseloco", "muloco"):
        f = trend(rows, fam, 4, "loss_ratio")
        s = trend(rows, fam, 4, "step_multiplier")
        if f is None:
            continue
        w = f"{FAMILY_WORDS[fam]} $N^{{{f.alpha:+.3f}}}$"
        if s is not None:
            w += f" (steps $N^{{{s.alpha:+.2f}}}$)"
        words.append(w)
    return _join(words) if words else "not measured yet (fewer than two sizes)"


def _reason(sizes: pd.DataFrame, agreement: str) -> str:
    """The likely reasons for a disagreement, from the setting's own numbers (empty where they agree)."""
    if agreement == "agrees with":
        return "The trend is theirs despite the differences of setting"
    if agreement.startswith("cannot"):
        return "Too few sizes are stored yet for a verdict"
    short = [escape(m) for m, r in zip(sizes["model"], sizes["tokens_per_param"]) if r < 19.5]
    lo, hi = fmt_num(int(sizes["params"].min())), fmt_num(int(sizes["params"].max()))
    parts = [f"scale (our models have {lo} to {hi} parameters, theirs 35M to 2.4B)",
             "data (Tiny Shakespeare's 1\\,MB, seen more than once at the largest budgets, against C4)",
             "tokenizer (65 characters against a subword vocabulary)"]
    if short:
        parts.append(f"token budget ({_join(short)} below their 20\\,$N$)")
    parts.append(f"few outer steps ({_join([str(int(k)) for k in sizes['outer_steps']])} at $H = {H}$, for the "
                 "outer momentum to build up in)")
    return "Its likely reasons: " + _join(parts)


# ------------------------------------------------------------------------------------------------ table
def table(st: Stats) -> str:
    t4 = st.tables["table4"]
    rows = []
    for model, g in t4.groupby("params", sort=True):
        g = g.set_index("column")
        rows.append([f"{escape(g['model'].iloc[0])} ({fmt_num(int(model))})"]
                    + [fmt_pm(g.loc[c, "loss_mean"], g.loc[c, "loss_std"], 4) if g.loc[c, "seeds"] else "--"
                       for c in COLUMNS])
    rows.append(["\\emph{Charles et al. (C4)}"] + [""] * len(COLUMNS))
    for n, vals in CHARLES_TABLE4.items():
        rows.append([f"{n / 1e6:g}M" if n < 1e9 else f"{n / 1e9:g}B"] + [f"{v:.3f}" for v in vals])
    fits = st.tables["fits"].set_index("column")
    rows.append(["\\emph{fit $A N^\\alpha$: ours}"] + [_fit_cell(fits.loc[c]) for c in COLUMNS])
    rows.append(["\\emph{theirs}"] + [f"{CHARLES_FITS[_ck(c)][0]:.3f}\\,$N^{{{CHARLES_FITS[_ck(c)][1]}}}$"
                                      for c in COLUMNS])
    j = st.tables["joint"].iloc[0]
    counts = st.tables["counts"]
    note = (f"Ours: final evaluation loss (nats/character, mean $\\pm$ std over seeds) on Tiny Shakespeare, "
            f"{st.meta['runs']} of {st.meta['expected']} runs of config/scaling.yaml stored ("
            + ", ".join(f"{escape(e)} {r}/{x if x is not None else '?'}" for e, r, x in
                        zip(counts["experiment"], counts["runs"], counts["expected"]))
            + "). Joint fit over DiLoCo's runs: ours "
            + (f"{fmt_num(j['A'], 4)}\\,$N^{{{fmt_num(j['alpha'], 3)}}}M^{{{fmt_num(j['beta'], 3)}}}$"
               if math.isfinite(j["A"]) else "not yet (fewer than two sizes)")
            + f", theirs {CHARLES_JOINT[0]}\\,$N^{{{CHARLES_JOINT[1]}}}M^{{{CHARLES_JOINT[2]}}}$. "
            "Fits: 95\\% interval of $\\alpha$ in brackets.")
    return booktabs(rows, ["Size", *[c.replace("M=", "$M=") + ("$" if c != "DP" else "") for c in COLUMNS]],
                    "Charles et al.'s Table~4 at micro scale: evaluation loss of data-parallel training (DP) and "
                    "DiLoCo at $M$ replicas ($H=30$, the global batch fixed), ours beside theirs"
                    + (f" (stored runs in {escape(str(STORE))}: {st.meta['provenance']})"
                       if st.meta.get("provenance") else "") + ".",
                    "tab:e12", note=note, size="\\scriptsize")


def _fit_cell(r) -> str:
    if not math.isfinite(r["A"]):
        return "--"
    ci = (f" [{fmt_num(r['alpha_lo'], 2)}, {fmt_num(r['alpha_hi'], 2)}]" if math.isfinite(r["alpha_lo"]) else "")
    return f"{fmt_num(r['A'], 3)}\\,$N^{{{fmt_num(r['alpha'], 3)}}}${ci}"


# ------------------------------------------------------------------------------------------------ figure
def figure(st: Stats):
    plt, sns = plotting()
    fig, (a, b) = plt.subplots(1, 2, figsize=(7.4, 2.6))
    t4, fits, gaps, sizes = st.tables["table4"], st.tables["fits"], st.tables["gaps"], st.tables["sizes"]
    pal = dict(zip(COLUMNS, sns.color_palette("viridis", len(COLUMNS))))
    for c in COLUMNS:
        d = t4[(t4["column"] == c) & (t4["seeds"] > 0)]
        a.plot(d["params"], d["loss_mean"], "o", color=pal[c], label=c, ms=3.5)
        f = fits.set_index("column").loc[c]
        if math.isfinite(f["A"]):
            x = sizes["params"].astype(float)
            a.plot(x, f["A"] * x ** f["alpha"], "-", color=pal[c], lw=0.8)
    a.set(xscale="log", xlabel="parameters $N$", ylabel="final evaluation loss (nats/char)",
          title="ours: loss and $A N^\\alpha$ per column")
    a.legend(fontsize=6, frameon=False)
    for i, c in enumerate(COLUMNS[1:], start=1):
        g = gaps.set_index("column").loc[c] if c in set(gaps["column"]) else None
        if g is not None:
            y = [g.get(f"gap_pct.{m}", math.nan) for m in sizes["model"]]
            b.plot(sizes["params"], y, "o-", color=pal[c], ms=3.5, label=f"{c} ours")
        ns = sorted(CHARLES_TABLE4)
        b.plot(ns, [_charles_gap(n, i) for n in ns], "s--", color=pal[c], ms=3, lw=0.8, label=f"{c} Charles et al.")
    b.axhline(0, color="0.5", lw=0.6)
    b.set(xscale="log", xlabel="parameters $N$", ylabel="gap to DP (%)", title="gap to DP: ours and theirs")
    b.legend(fontsize=5.5, frameon=False, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    return fig


E12 = Experiment("e12", "E12 DiLoCo's scaling at micro scale", stats, numbers, table, figure, MISSING)
