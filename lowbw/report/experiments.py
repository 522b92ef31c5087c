"""One function per experiment of the paper: ``eN(ctx) -> Section`` (table, figure, findings, numbers).

Each reads only measured data (``runs/bench/*.json`` and training run directories) and formats it; any
experiment whose inputs are absent in the current profile produces a section that says so.
"""

from __future__ import annotations

from collections.abc import Callable

from lowbw.report.build import Context, Section, missing_section
from lowbw.report.common import fmt_duration, plotting, report_links, training_runs
from lowbw.report.e3 import e3
from lowbw.report.e8 import e8
from lowbw.report.latex import booktabs, escape, fmt_num, macro_name

__all__ = ["ALL"]


# --------------------------------------------------------------------------------------------- E1
ALG_ORDER = ["ring", "tree", "ps", "butterfly", "alltoall", "roundrobin", "allgather", "native"]


def e1(ctx: Context) -> Section:
    """Collectives on rate-limited links: measured vs calibrated model vs the bandwidth-optimal bound."""
    import pandas as pd

    b = ctx.bench("collectives")
    if not b or not b.get("rows"):
        return missing_section("e1", "E1 collectives", "runs/bench/collectives.json absent")
    df = pd.DataFrame(b["rows"])
    df = df[df["ok"] & df["time_s"].notna()].copy()
    emulation = ", ".join(sorted(set(df["emulation"])))
    n_max = int(df["workers"].max())
    size = float(df["size_mb"].max())
    sub = df[(df["workers"] == n_max) & (df["size_mb"] == size)]
    rates = sorted(sub["rate_mbit"].unique())
    rows, numbers = [], {}
    for alg in [a for a in ALG_ORDER if a in set(sub["algorithm"])]:
        cells = [escape(alg)]
        for r in rates:
            x = sub[(sub["algorithm"] == alg) & (sub["rate_mbit"] == r)]
            if x.empty:
                cells += ["--", "--"]
                continue
            x = x.iloc[0]
            cells += [fmt_num(x["time_s"], 3), fmt_num(100 * x["frac_of_bound"], 3)]
        rows.append(cells)
    header = ["Algorithm"] + [h for r in rates for h in (f"{fmt_num(r)} Mbit/s: s", r"\% bound")]
    # headline numbers: ring vs bound and vs native, model error
    ring = df[df["algorithm"] == "ring"]
    native = df[df["algorithm"] == "native"]
    r100 = ring[(ring["rate_mbit"] == 100) & (ring["size_mb"] >= 10)]
    if not r100.empty:
        numbers["EOneRingBoundFracMin"] = fmt_num(100 * r100["frac_of_bound"].min(), 3)
        numbers["EOneRingBoundFracMean"] = fmt_num(100 * r100["frac_of_bound"].mean(), 3)
    merged = ring.merge(native, on=["workers", "rate_mbit", "size_mb"], suffixes=("_ring", "_native"))
    merged = merged[merged["timing_native"] == "measured"] if "timing_native" in merged else merged
    if not merged.empty:
        ratio = merged["time_s_ring"] / merged["time_s_native"]
        numbers["EOneRingOverNativeMedian"] = fmt_num(float(ratio.median()), 3)
        numbers["EOneRingOverNativeMax"] = fmt_num(float(ratio.max()), 3)
    err = df["model_rel_err"].dropna().abs()
    if not err.empty:
        numbers["EOneModelErrMedian"] = fmt_num(100 * float(err.median()), 2)
        numbers["EOneModelErrMax"] = fmt_num(100 * float(err.max()), 2)
        numbers["EOneModelWithinTen"] = fmt_num(100 * float((err <= 0.10).mean()), 3)
        by_alg = df.assign(abs_err=df["model_rel_err"].abs()).groupby("algorithm")["abs_err"].max().dropna()
        numbers["EOneModelWorstAlg"] = escape(str(by_alg.idxmax()))
        numbers["EOneModelWorstAlgErr"] = fmt_num(100 * float(by_alg.max()), 2)
        numbers["EOneModelAlgsWithinTen"] = str(int((by_alg <= 0.10).sum()))
        numbers["EOneModelAlgs"] = str(int(len(by_alg)))
    winners = (df.loc[df.groupby(["workers", "rate_mbit", "size_mb"])["time_s"].idxmin()]
               .groupby("algorithm").size().sort_values(ascending=False))
    numbers["EOneSettings"] = str(int(df.groupby(["workers", "rate_mbit", "size_mb"]).ngroups))
    numbers["EOneTopWinner"] = escape(winners.index[0])
    numbers["EOneTopWinnerCount"] = str(int(winners.iloc[0]))
    numbers["EOneEmulation"] = escape(emulation)
    plt, sns = plotting()
    fig, axes = plt.subplots(1, 2, figsize=(7.2, 2.6))
    d = df[df["workers"] == n_max]
    sns.lineplot(data=d[d["size_mb"] == size], x="rate_mbit", y="time_s", hue="algorithm", marker="o",
                 hue_order=[a for a in ALG_ORDER if a in set(d["algorithm"])], ax=axes[0])
    axes[0].set(xscale="log", yscale="log", xlabel="link rate (Mbit/s)", ylabel="all-reduce time (s)",
                title=f"N={n_max}, {fmt_num(size)} MB")
    axes[0].legend(fontsize=6, ncol=2)
    ok = df[df["model_s"].notna()]
    axes[1].scatter(ok["time_s"], ok["model_s"], s=8, alpha=0.7)
    lim = [ok[["time_s", "model_s"]].min().min() * 0.8, ok[["time_s", "model_s"]].max().max() * 1.2]
    axes[1].plot(lim, lim, "k--", lw=0.8)
    axes[1].set(xscale="log", yscale="log", xlabel="measured (s)", ylabel="calibrated model (s)",
                title="model vs measurement, all settings")
    table = booktabs(rows, header,
                     f"All-reduce of {fmt_num(size)}\\,MB among {n_max} workers on shaped links ({emulation}): "
                     r"median measured time and its share of the bandwidth-optimal bound $2\frac{N-1}{N}M\beta$.",
                     "tab:e1", size=r"\scriptsize")
    parts = []
    if "EOneRingBoundFracMean" in numbers:
        parts.append(r"At 100\,Mbit/s and messages of at least 10\,MB our ring reaches \EOneRingBoundFracMean\,\% "
                     r"of the bandwidth-optimal bound on average (minimum \EOneRingBoundFracMin\,\%).")
    if "EOneRingOverNativeMedian" in numbers:
        parts.append(r"Its time relative to gloo's own all-reduce on the same links has median "
                     r"\EOneRingOverNativeMedian{} (worst \EOneRingOverNativeMax).")
    if "EOneModelErrMedian" in numbers:
        parts.append(r"The alpha-beta model calibrated by ping-pong predicts the measured times with a median "
                     r"error of \EOneModelErrMedian\,\% (maximum \EOneModelErrMax\,\%; \EOneModelWithinTen\,\% "
                     r"of settings within 10\,\%). For \EOneModelAlgsWithinTen{} of the \EOneModelAlgs{} algorithms "
                     r"every setting is within 10\,\%; the largest error is \EOneModelWorstAlgErr\,\% "
                     r"(\EOneModelWorstAlg).")
    parts.append(r"Across the \EOneSettings{} measured settings the fastest algorithm was \EOneTopWinner{} "
                 r"in \EOneTopWinnerCount{} (links emulated with \EOneEmulation).")
    return Section("e1", table, " ".join(parts), numbers, fig)


# --------------------------------------------------------------------------------------------- E2
def e2(ctx: Context) -> Section:
    """Compressors: ratio, error, bias, throughput, with bitsandbytes and torch's hooks side by side."""
    import pandas as pd

    b = ctx.bench("compressors")
    if not b or not b.get("rows"):
        return missing_section("e2", "E2 compressors", "runs/bench/compressors.json absent")
    df = pd.DataFrame(b["rows"])
    if "error" in df:
        df = df[df["error"].isna()]
    kinds = list(dict.fromkeys(df["input"]))
    kind = "gradient" if "gradient" in kinds else kinds[-1]
    d = df[df["input"] == kind]
    rows = []
    for _, r in d.iterrows():
        name = escape(r["method"]) + (f" ({escape(r['params'])})" if r.get("params") else "")
        if r.get("baseline"):
            name = r"\textit{" + name + "}"
        rows.append([name, fmt_num(r["ratio"], 3), fmt_num(100 * r["rel_l2_error"], 3),
                     fmt_num(100 * r["bias"], 2), fmt_num(r["throughput_gbps"], 3)])
    numbers: dict[str, str] = {}
    numel = b.get("config", {}).get("numel") or int(d["numel"].iloc[0]) if "numel" in d else None
    if numel:
        numbers["ETwoNumel"] = fmt_num(numel / 1e6, 3)
    for k2 in kinds:
        x = df[df["input"] == k2]
        ours = x[(x["method"] == "blockwise") & (x["params"].str.contains("bits=8")) &
                 (x["params"].str.contains("nonlinear"))]
        bnb = x[x["method"].str.startswith("bnb")]
        if not ours.empty and not bnb.empty:
            tag = macro_name(k2)
            numbers[f"ETwoOursErr{tag}"] = fmt_num(100 * ours["rel_l2_error"].iloc[0], 3)
            numbers[f"ETwoBnbErr{tag}"] = fmt_num(100 * bnb["rel_l2_error"].iloc[0], 3)
            speed = ours["throughput_gbps"].iloc[0] / bnb["throughput_gbps"].iloc[0]
            numbers[f"ETwoSpeedRatio{tag}"] = fmt_num(speed, 3)
    mine = df[~df["baseline"].astype(bool)] if "baseline" in df else df
    slowest = mine.loc[mine["throughput_gbps"].idxmin()]
    numbers["ETwoMinThroughput"] = fmt_num(float(slowest["throughput_gbps"]), 3)
    numbers["ETwoSlowest"] = escape(slowest["method"])
    numbers["ETwoBelowTarget"] = str(int((mine["throughput_gbps"] < 0.3).sum()))
    numbers["ETwoMethods"] = str(int(mine["method"].nunique()))
    plt, sns = plotting()
    fig, ax = plt.subplots(figsize=(4.6, 3.0))
    sns.scatterplot(data=d, x="ratio", y="rel_l2_error", hue="baseline" if "baseline" in d else None,
                    style="baseline" if "baseline" in d else None, ax=ax)
    for _, r in d.iterrows():
        ax.annotate(str(r["method"]), (r["ratio"], r["rel_l2_error"]), fontsize=5, alpha=0.8)
    ax.set(xscale="log", yscale="log", xlabel="compression ratio", ylabel="relative L2 error")
    table = booktabs(rows, ["Method", "Ratio", r"Rel.\ err.\ (\%)", r"Bias (\%)", "GB/s"],
                     f"Compressors on a {escape(kind)} tensor of {numbers.get('ETwoNumel', '?')}M fp32 elements "
                     f"({escape(b['provenance']['cpu'])}, {b['provenance']['torch_threads']} threads). Italic: "
                     "bitsandbytes and torch's DDP hooks, measured in the same run.", "tab:e2", size=r"\scriptsize")
    parts = []
    for k2 in kinds:
        tag = macro_name(k2)
        if f"ETwoOursErr{tag}" in numbers:
            parts.append(rf"On {escape(k2)} input our 8-bit non-linear block-wise quantizer has a relative error of "
                         rf"\ETwoOursErr{tag}\,\% against \ETwoBnbErr{tag}\,\% for bitsandbytes, at "
                         rf"\ETwoSpeedRatio{tag}$\times$ its throughput.")
    parts.append(r"The slowest of our \ETwoMethods{} methods (\ETwoSlowest) encodes and decodes at "
                 r"\ETwoMinThroughput\,GB/s; \ETwoBelowTarget{} configurations fall below 0.3\,GB/s.")
    return Section("e2", table, " ".join(parts), numbers, fig)


# ------------------------------------------------------------------------------------- E4-E6: training
def _target(ctx: Context, runs) -> float:
    ds = runs["dataset"].iloc[0]
    return float((ctx.config.get("targets") or {}).get(ds, 0.9))


def _curves_figure(runs, mets, hue: str, focus: float, latency: float, title: str, order=None):
    from lowbw.report.training import eval_lines, retime

    plt, sns = plotting()
    frames = []
    for _, r in runs.iterrows():
        m = eval_lines(mets[mets["run"] == r["run"]])
        if m.empty:
            continue
        frames.append(m.assign(time=retime(m, focus, latency).to_numpy(), group=str(r[hue]), seed=r["seed"]))
    fig, ax = plt.subplots(figsize=(7.0, 2.8))
    if frames:
        import pandas as pd

        d = pd.concat(frames)
        sns.lineplot(data=d, x="time", y="test_acc", hue="group", units="seed", estimator=None, lw=0.8,
                     hue_order=order, ax=ax)
        ax.set(xscale="log", xlabel=f"virtual time at {fmt_num(focus)} Mbit/s (s)", ylabel="test accuracy",
               title=title)
        lo = max(0.0, float(d["test_acc"].quantile(0.05)) - 0.02)
        ax.set_ylim(lo, min(1.0, float(d["test_acc"].max()) + 0.01))
        ax.legend(fontsize=6, ncol=3)
    return fig


def _ttt_cells(row, mbits, n) -> list[str]:
    out = []
    for mb in mbits:
        t, k = row[f"ttt_{mb:g}"], row[f"ttt_{mb:g}_reached"]
        out.append("--" if k == 0 else fmt_duration(t) + ("" if k == n else f" ({k}/{n})"))
    return out


def e4(ctx: Context) -> Section:
    """Compression in training: accuracy and time-to-accuracy per compressor per bandwidth."""
    from lowbw.report.training import group_stats

    runs, mets = training_runs(ctx, ["e4_compression"])
    if runs is None:
        return missing_section("e4", "E4 compression in training", "no e4_compression runs")
    mbits, lat, focus = report_links(ctx)
    target = _target(ctx, runs)
    st = group_stats(runs, mets, ["method"], target, mbits, lat, baseline={"method": "dense"})
    dense = st[st["method"] == "dense"].iloc[0]
    rows, numbers = [], {}
    nseeds = int(runs["seed"].nunique())
    for _, r in st.iterrows():
        sig = "" if r["method"] == "dense" else (r"$^{*}$" if r["significant"] else "")
        acc = fmt_num(100 * r["acc_mean"], 3) + r" $\pm$ " + fmt_num(100 * r["acc_std"], 2) + sig
        comp = fmt_num(dense["bytes_per_step"] / max(r["bytes_per_step"], 1), 3)
        rows.append([escape(r["method"]), acc, comp] + _ttt_cells(r, mbits, nseeds))
        tag = macro_name(r["method"])
        numbers[f"EFourAcc{tag}"] = fmt_num(100 * r["acc_mean"], 3)
        numbers[f"EFourTtt{tag}"] = fmt_duration(r[f"ttt_{focus:g}"])
        if r["method"] != "dense" and dense[f"ttt_{focus:g}"] == dense[f"ttt_{focus:g}"]:
            numbers[f"EFourSpeedup{tag}"] = fmt_num(dense[f"ttt_{focus:g}"] / r[f"ttt_{focus:g}"], 3)
    numbers["EFourTarget"] = fmt_num(100 * target, 3)
    numbers["EFourFocus"] = fmt_num(focus)
    numbers["EFourSeeds"] = str(nseeds)
    reached = st[st[f"ttt_{focus:g}_reached"] == nseeds]
    best = reached.loc[reached[f"ttt_{focus:g}"].idxmin()] if not reached.empty else None
    if best is not None:
        numbers["EFourBest"] = escape(best["method"])
        numbers["EFourBestTtt"] = fmt_duration(best[f"ttt_{focus:g}"])
        numbers["EFourBestSpeedup"] = fmt_num(dense[f"ttt_{focus:g}"] / best[f"ttt_{focus:g}"], 3)
    worse = st[(st["method"] != "dense") & st["significant"] & (st["acc_mean"] < dense["acc_mean"])]
    numbers["EFourSigWorse"] = str(len(worse))
    numbers["EFourSigWorseList"] = escape(", ".join(worse["method"])) or "none"
    numbers["EFourNever"] = escape(", ".join(st.loc[st[f"ttt_{focus:g}_reached"] == 0, "method"])) or "none"
    bw_best = {}
    for mb in mbits:
        ok = st[st[f"ttt_{mb:g}_reached"] == nseeds]
        if not ok.empty:
            bw_best[mb] = ok.loc[ok[f"ttt_{mb:g}"].idxmin(), "method"]
            numbers[f"EFourBestAt{macro_name(fmt_num(mb).replace('{,}', ''))}"] = escape(bw_best[mb])
    header = ["Method", r"Test acc.\ (\%)", "Comp."] + [f"{fmt_num(m)} Mbit/s" for m in mbits]
    table = booktabs(rows, header,
                     f"Compression in training (MLP on MNIST, {runs['workers'].iloc[0]} workers, sim backend, "
                     f"{nseeds} seeds): final test accuracy (mean $\\pm$ std; $^*$: differs from dense, Welch "
                     f"$p<0.05$), compression of the bytes sent per step, and virtual time to "
                     f"{fmt_num(100 * target)}\\,\\% test accuracy at each bandwidth ((k/n): only k of n seeds "
                     "reached it).", "tab:e4", size=r"\scriptsize")
    parts = [r"At \EFourFocus\,Mbit/s per worker dense training reaches \EFourTarget\,\% test accuracy after "
             r"\EFourTttDense{} of virtual time."]
    if best is not None:
        parts.append(r"The fastest method to the target is \EFourBest{} (\EFourBestTtt, "
                     r"\EFourBestSpeedup$\times$ faster than dense).")
    parts.append(r"\EFourSigWorse{} methods end with a significantly lower accuracy than dense over "
                 r"\EFourSeeds{} seeds (Welch's t-test, $p<0.05$): \EFourSigWorseList. Never reaching the target "
                 r"at this bandwidth: \EFourNever.")
    if bw_best:
        per_bw = [rf"{fmt_num(mb)}\,Mbit/s: \EFourBestAt{macro_name(fmt_num(mb).replace('{,}', ''))}" for mb in bw_best]
        parts.append("The fastest method per bandwidth: " + "; ".join(per_bw) + ".")
    order = list(st["method"])
    fig = _curves_figure(runs, mets, "method", focus, lat, "E4: test accuracy vs virtual time", order)
    return Section("e4", table, " ".join(parts), numbers, fig)


def _scheme_section(ctx: Context, key: str, experiments: list[str], by: list[str], baseline: dict, title: str,
                    caption: str) -> Section:
    from lowbw.report.training import group_stats

    runs, mets = training_runs(ctx, experiments)
    if runs is None:
        return missing_section(key, title, f"no {', '.join(experiments)} runs")
    mbits, lat, focus = report_links(ctx)
    target = _target(ctx, runs)
    st = group_stats(runs, mets, by, target, [focus], lat, baseline=baseline)
    nseeds = int(runs["seed"].nunique())
    prefix = macro_name("E", {"e5": "five", "e6": "six", "e7": "seven"}[key])
    base_sel = st[[all(st.loc[i, k] == v for k, v in baseline.items()) for i in st.index]]
    base = base_sel.iloc[0] if not base_sel.empty else None
    rows, numbers = [], {}
    for _, r in st.iterrows():
        sig = r"$^{*}$" if r.get("significant") and base is not None and not r.equals(base) else ""
        label = ", ".join(escape(r[k]) for k in by)
        ttt = _ttt_cells(r, [focus], nseeds)[0]
        speed = (fmt_num(base[f"ttt_{focus:g}"] / r[f"ttt_{focus:g}"], 3)
                 if base is not None and r[f"ttt_{focus:g}_reached"] and base[f"ttt_{focus:g}_reached"] else "--")
        rows.append([label, fmt_num(100 * r["acc_mean"], 3) + r" $\pm$ " + fmt_num(100 * r["acc_std"], 2) + sig,
                     fmt_num(r["bytes_per_step"] / 1e3, 3), ttt, speed])
        tag = macro_name(*[str(r[k]) for k in by])
        numbers[f"{prefix}Acc{tag}"] = fmt_num(100 * r["acc_mean"], 3)
        numbers[f"{prefix}Std{tag}"] = fmt_num(100 * r["acc_std"], 2)
        numbers[f"{prefix}Ttt{tag}"] = fmt_duration(r[f"ttt_{focus:g}"])
    numbers[f"{prefix}Target"] = fmt_num(100 * target, 3)
    best = st.loc[st["acc_mean"].idxmax()]
    numbers[f"{prefix}BestAcc"] = fmt_num(100 * best["acc_mean"], 3)
    numbers[f"{prefix}Best"] = ", ".join(escape(best[k]) for k in by)
    sig = st[st.get("significant", False) == True]  # noqa: E712  (pandas boolean column)
    numbers[f"{prefix}SigCount"] = str(len(sig))
    numbers[f"{prefix}Groups"] = str(len(st))
    reached = st[st[f"ttt_{focus:g}_reached"] == nseeds]
    if not reached.empty:
        fastest = reached.loc[reached[f"ttt_{focus:g}"].idxmin()]
        numbers[f"{prefix}Fastest"] = ", ".join(escape(fastest[k]) for k in by)
        numbers[f"{prefix}FastestTtt"] = fmt_duration(fastest[f"ttt_{focus:g}"])
    header = [escape(" / ".join(by)), r"Test acc.\ (\%)", "kB/step", "Time to target", "Speed-up"]
    table = booktabs(rows, header, caption.format(n=nseeds, target=fmt_num(100 * target), focus=fmt_num(focus)),
                     f"tab:{key}", size=r"\scriptsize")
    parts = [rf"The highest mean test accuracy is \{prefix}BestAcc\,\% (\{prefix}Best). "
             rf"\{prefix}SigCount{{}} of the \{prefix}Groups{{}} configurations differ significantly from the "
             rf"baseline in final accuracy (Welch's t-test, $p<0.05$, {nseeds} seeds)."]
    if reached is not None and not reached.empty:
        parts.append(rf"The first to reach \{prefix}Target\,\% test accuracy at {fmt_num(focus)}\,Mbit/s is "
                     rf"\{prefix}Fastest{{}} after \{prefix}FastestTtt{{}} of virtual time.")
    runs = runs.assign(group=runs[by].astype(str).agg(", ".join, axis=1))
    fig = _curves_figure(runs, mets, "group", focus, lat, title)
    return Section(key, table, " ".join(parts), numbers, fig)


def e5(ctx: Context) -> Section:
    return _scheme_section(
        ctx, "e5", ["e5_batch"], ["method"], {"method": "b128"},
        "E5: batch-size schemes",
        "Batch size schemes ({n} seeds): b128 = constant global batch 128; b1024 = batch 1024 with the linear "
        "scaling rule and warm-up; dyn = dynamic batch size (the draft's prose rule); adam* = the same schemes "
        "with Adam at learning rate $10^{{-3}}$. Bytes per worker and step, virtual time to {target}\\,\\% at "
        "{focus}\\,Mbit/s and speed-up over SGD at batch 128. $^*$: accuracy differs from SGD b128 (Welch $p<0.05$).")


def e6(ctx: Context) -> Section:
    sec = _scheme_section(
        ctx, "e6", ["e6_local", "e6_households"], ["assignment", "method"],
        {"assignment": "disjoint", "method": "sync"}, "E6: local SGD, households, data assignment",
        "Synchronisation schemes and data assignment (8 workers, {n} seeds): fully synchronous, local SGD with "
        "period $L_W$ = 4 or 16, post-local SGD, and 2 households ($L_H=1$, $L_W=16$) with disjoint or "
        "overlapping household shards; disjoint vs full data overlap. Virtual time to {target}\\,\\% at "
        "{focus}\\,Mbit/s; $^*$: accuracy differs from synchronous disjoint (Welch $p<0.05$).")
    runs, _ = training_runs(ctx, ["e6_local", "e6_households"])
    if runs is not None and "samples" in runs and "assignment" in runs:
        per = runs.groupby("assignment")["samples"].mean()
        if "disjoint" in per and len(per) > 1:
            ratio = float(per.max() / per["disjoint"])
            if ratio > 1.01:
                sec.numbers["ESixSampleRatio"] = fmt_num(ratio, 3)
                sec.findings += (r" Overlapping assignments are not like-for-like here: with fewer target epochs than "
                                 r"copies, $\lceil E/C\rceil$ overlap epochs make the most overlapping runs process "
                                 r"\ESixSampleRatio$\times$ the samples of disjoint ones (the thesis' rule, which "
                                 r"assumes $E \gg C$).")
    return sec


def e7(ctx: Context) -> Section:
    """Fluctuating bandwidth: fixed top-k densities vs the adaptive (MOO) choice, on the scheduled link."""
    import pandas as pd

    from lowbw.report.stats import mean_std, welch
    from lowbw.report.training import eval_lines, time_to_target

    runs, mets = training_runs(ctx, ["e7_fluctuating"])
    if runs is None:
        return missing_section("e7", "E7 fluctuating bandwidth", "no e7_fluctuating runs")
    target = _target(ctx, runs)
    nseeds = int(runs["seed"].nunique())
    rows, numbers, stats = [], {}, {}
    for method, g in runs.groupby("method", sort=False):
        ttt = [time_to_target(mets[mets["run"] == r], target) for r in g["run"]]  # on the scheduled link
        arr = pd.Series(ttt, dtype=float)
        acc = mean_std(g["final_test_acc"])
        stats[method] = (arr, g["final_test_acc"].to_numpy(dtype=float), acc)
        dens = mets[(mets["run"].isin(g["run"])) & mets.get("density", pd.Series(dtype=float)).notna()] \
            if "density" in mets else pd.DataFrame()
        mean_density = float(dens["density"].mean()) if not dens.empty else float(
            g["compressor_args.ratio"].iloc[0]) if "compressor_args.ratio" in g else float("nan")
        tt = mean_std(arr)
        rows.append([escape(method), fmt_num(100 * acc.mean, 3) + r" $\pm$ " + fmt_num(100 * acc.std, 2),
                     fmt_num(mean_density, 2),
                     "--" if tt.n == 0 else fmt_duration(tt.mean) + ("" if tt.n == nseeds else f" ({tt.n}/{nseeds})"),
                     fmt_num(float(g["t_virtual"].mean()), 3)])
        tag = macro_name(method)
        numbers[f"ESevenTtt{tag}"] = fmt_duration(tt.mean) if tt.n else "never"
        numbers[f"ESevenAcc{tag}"] = fmt_num(100 * acc.mean, 3)
    numbers["ESevenTarget"] = fmt_num(100 * target, 3)
    parts = []
    if "moo" in stats:
        fixed = {m: v for m, v in stats.items() if m != "moo"}
        reach = {m: v[0].mean() for m, v in fixed.items() if v[0].notna().all()}
        if reach and all(f"ESevenTtt{t}" in numbers for t in ("TopkOneZero", "TopkOne", "TopkZeroOne")):
            best_fixed = min(reach, key=reach.get)
            numbers["ESevenBestFixed"] = escape(best_fixed)
            moo_t = stats["moo"][0]
            t = welch(moo_t.dropna(), stats[best_fixed][0].dropna())
            ratio = float(reach[best_fixed] / moo_t.mean()) if moo_t.notna().any() else float("nan")
            numbers["ESevenMooVsBest"] = fmt_num(ratio, 3)
            numbers["ESevenMooP"] = fmt_num(t.p, 2)
            parts.append(r"On the fluctuating link the adaptive choice reaches \ESevenTarget\,\% test accuracy after "
                         r"\ESevenTttMoo, against \ESevenTttTopkOneZero{} (density 0.1), \ESevenTttTopkOne{} "
                         r"(0.01) and "
                         r"\ESevenTttTopkZeroOne{} (0.001) for fixed densities; the best fixed density "
                         r"(\ESevenBestFixed) is \ESevenMooVsBest$\times$ the adaptive time (Welch's t-test on time to "
                         r"target, $p=\ESevenMooP$" + (", significant)." if t.significant else ", not significant)."))
    parts.append(r"Final accuracies: adaptive \ESevenAccMoo\,\%, fixed densities \ESevenAccTopkOneZero\,\%, "
                 r"\ESevenAccTopkOne\,\% and \ESevenAccTopkZeroOne\,\%." if all(
                     f"ESevenAcc{t}" in numbers for t in ("Moo", "TopkOneZero", "TopkOne", "TopkZeroOne")) else "")
    plt, sns = plotting()
    fig, axes = plt.subplots(1, 2, figsize=(7.2, 2.6))
    frames = []
    for _, r in runs.iterrows():
        m = eval_lines(mets[mets["run"] == r["run"]])
        frames.append(m.assign(method=r["method"], seed=r["seed"]))
    d = pd.concat(frames)
    sns.lineplot(data=d, x="t_virtual", y="test_acc", hue="method", units="seed", estimator=None, lw=0.8,
                 ax=axes[0])
    axes[0].set(xlabel="virtual time on the fluctuating link (s)", ylabel="test accuracy")
    axes[0].set_ylim(max(0.0, float(d["test_acc"].quantile(0.05)) - 0.02),
                     min(1.0, float(d["test_acc"].max()) + 0.01))
    moo = mets[(mets.get("method") == "moo") & (mets["seed"] == runs["seed"].min())] if "method" in mets else None
    if moo is not None and not moo.empty and "density" in moo:
        ax2 = axes[1]
        ax2.step(moo["t_virtual"], moo["bandwidth_mbit"], where="post", color="grey", label="bandwidth (Mbit/s)")
        ax2.set(xlabel="virtual time (s)", ylabel="bandwidth (Mbit/s)", yscale="log")
        ax3 = ax2.twinx()
        ax3.step(moo["t_virtual"], moo["density"], where="post", color="C3", label="chosen density")
        ax3.set(ylabel="top-k density", yscale="log")
        ax2.set_title("adaptive choice (seed 0)")
    table = booktabs(rows, ["Method", r"Test acc.\ (\%)", "Mean density", "Time to target", "Virtual time (s)"],
                     f"Fluctuating bandwidth (100 and 2\\,Mbit/s alternating every 5\\,s of virtual time; MLP on "
                     f"MNIST, {runs['workers'].iloc[0]} workers, {nseeds} seeds): fixed top-k densities with error "
                     f"feedback vs the adaptive multi-objective choice. Time to {fmt_num(100 * target)}\\,\\% test "
                     "accuracy on the scheduled link.", "tab:e7", size=r"\scriptsize")
    return Section("e7", table, " ".join(p for p in parts if p), numbers, fig)


def _missing(key: str, title: str) -> Callable[[Context], Section]:
    return lambda ctx: missing_section(key, title, "not implemented in the report yet")


ALL: dict[str, Callable[[Context], Section]] = {
    "e1": e1,
    "e2": e2,
    "e3": e3,
    "e4": e4,
    "e5": e5,
    "e6": e6,
    "e7": e7,
    "e8": e8,
}
