"""E2 -- compressors in isolation (``runs/bench/compressors.json``): compression ratio, relative error,
bias and throughput of every compressor, with bitsandbytes and torch's DDP hooks measured side by side."""

from __future__ import annotations

import pandas as pd

from lowbw.report.catalog import E2_INPUTS, word
from lowbw.report.conditions import MARK, caption
from lowbw.report.experiment import Context, Experiment, Stats
from lowbw.report.figures import dot_panels
from lowbw.report.latex import booktabs, escape, fmt_num

__all__ = ["E2"]

THROUGHPUT_TARGET_GBPS = 0.3  # encode + decode, the floor for a usable compressor
TABLE_INPUT = "resnet20"  # the table and figure show real gradients where the benchmark has them
OURS, REFERENCE = "lowbw", "reference (bitsandbytes, torch hooks)"


def stats(ctx: Context) -> Stats | None:
    """Tidy ``compressors``: one row per (input, configuration): ratio, rel_l2_error and bias (fractions),
    throughput_gbps (encode + decode), ``source`` (lowbw or the reference implementation)."""
    b = ctx.bench("compressors")
    if not b or not b.get("rows"):
        return None
    df = pd.DataFrame(b["rows"])
    if "error" in df:
        df = df[df["error"].isna()]
    df = df.assign(params=df["params"].fillna(""), baseline=df["baseline"].astype(bool),
                   busy=[isinstance(c, dict) and bool(c.get("busy"))
                         for c in df.get("conditions", [None] * len(df))])
    df = df.assign(configuration=[m + (f" ({p})" if p else "") for m, p in zip(df["method"], df["params"])],
                   source=[REFERENCE if x else OURS for x in df["baseline"]])
    for kind in dict.fromkeys(df["input"]):
        word(E2_INPUTS, kind, "E2 input")
    cols = ["input", "method", "params", "configuration", "source", "numel", "ratio", "rel_l2_error", "bias",
            "throughput_gbps", "busy"]
    kinds = list(dict.fromkeys(df["input"]))
    prov = b.get("provenance", {})
    return Stats({"compressors": df[[c for c in cols if c in df]].reset_index(drop=True)},
                 {"source": "runs/bench/compressors.json", "provenance": prov, "inputs": b.get("inputs"),
                  "conditions": b.get("conditions"), "head_to_head": b.get("head_to_head") or {},
                  "numel": b.get("config", {}).get("numel"),
                  "table_input": TABLE_INPUT if TABLE_INPUT in kinds else kinds[-1]})


def numbers(st: Stats) -> dict[str, str]:
    df = st.tables["compressors"]
    out = {"ETwoThroughputTarget": fmt_num(THROUGHPUT_TARGET_GBPS, 1)}
    numel = st.meta["numel"] or (int(df["numel"].iloc[0]) if "numel" in df else None)
    if numel:
        out["ETwoNumel"] = fmt_num(numel / 1e6, 3)
    for kind, x in df.groupby("input", sort=False):
        ours = x[(x["method"] == "blockwise") & (x["params"].str.contains("bits=8"))
                 & (x["params"].str.contains("nonlinear"))]
        bnb = x[x["method"].str.startswith("bnb")]
        if not ours.empty and not bnb.empty:
            w = word(E2_INPUTS, kind, "E2 input")
            out[f"ETwoOursErr{w}"] = fmt_num(100 * ours["rel_l2_error"].iloc[0], 3)
            out[f"ETwoBnbErr{w}"] = fmt_num(100 * bnb["rel_l2_error"].iloc[0], 3)
            h = st.meta.get("head_to_head", {}).get(kind)
            if h:  # alternating calls, one load for both: the fastest calls' ratio, and the medians'
                out[f"ETwoSpeedRatio{w}"] = fmt_num(h["speed_ratio_best"], 3)
                out[f"ETwoSpeedRatioMedian{w}"] = fmt_num(h["speed_ratio_median"], 3)
                out["ETwoHeadToHeadCalls"] = str(int(h["reps"]))
            else:
                out[f"ETwoSpeedRatio{w}"] = fmt_num(ours["throughput_gbps"].iloc[0] / bnb["throughput_gbps"].iloc[0],
                                                    3)
    mine = df[df["source"] == OURS]
    slowest = mine.loc[mine["throughput_gbps"].idxmin()]
    out["ETwoMinThroughput"] = fmt_num(float(slowest["throughput_gbps"]), 3)
    out["ETwoSlowest"] = escape(slowest["method"])
    out["ETwoSlowestInput"] = escape(str(slowest["input"]))
    below = int((mine["throughput_gbps"] < THROUGHPUT_TARGET_GBPS).sum())
    out["ETwoBelowTarget"] = {0: "no configurations fall", 1: "1 configuration falls"}.get(
        below, f"{below} configurations fall")
    out["ETwoMethods"] = str(int(mine["method"].nunique()))
    return out


def _shown(st: Stats):
    df = st.tables["compressors"]
    return df[df["input"] == st.meta["table_input"]]


def table(st: Stats) -> str:
    rows, marked = [], 0
    for _, r in _shown(st).iterrows():
        name = escape(r["configuration"])
        busy = bool(r.get("busy", False))
        marked += busy
        rows.append([r"\textit{" + name + "}" if r["source"] == REFERENCE else name, fmt_num(r["ratio"], 3),
                     fmt_num(100 * r["rel_l2_error"], 3), fmt_num(100 * r["bias"], 2),
                     fmt_num(r["throughput_gbps"], 3) + (MARK if busy else "")])
    prov = st.meta["provenance"]
    numel = st.meta["numel"]
    return booktabs(rows, ["Method", "Ratio", r"Rel.\ err.\ (\%)", r"Bias (\%)", "GB/s"],
                    f"Compressors on a {escape(st.meta['table_input'])} tensor of "
                    f"{fmt_num(numel / 1e6, 3) if numel else '?'}M fp32 elements ({escape(prov.get('cpu'))}, "
                    f"{prov.get('torch_threads')} threads). Italic: bitsandbytes and torch's DDP hooks, measured "
                    "in the same run." + caption(st.meta.get("conditions"), prov, marked), "tab:e2",
                    size=r"\scriptsize")


def figure(st: Stats):
    d = _shown(st).sort_values(["ratio", "rel_l2_error"], ascending=[False, True])
    d = d.assign(rel_err_pct=100 * d["rel_l2_error"], bias_pct=100 * d["bias"].abs())
    sources = [s for s in (OURS, REFERENCE) if s in set(d["source"])]
    kind = st.meta["table_input"]
    return dot_panels(d, "configuration", [("ratio", "compression ratio", True),
                                           ("rel_err_pct", "relative L2 error (%)", True),
                                           ("throughput_gbps", "encode + decode (GB/s)", True)],
                      "source", sources, title=f"input: {(st.meta['inputs'] or {}).get(kind, kind)}")


E2 = Experiment("e2", "E2 compressors", stats, numbers, table, figure, "runs/bench/compressors.json absent")
