"""E1's results: the calibration key of a testbed, recomputing every prediction from the stored
measurements (:func:`remodel`; :func:`merge_software` brings in a calibration-only run's software cost per
step), the issue's targets, and plain tables. Pure functions of a result dict of
:mod:`lowbw.bench.collectives`."""

from __future__ import annotations

from typing import Any

from lowbw.comm.registry import get as collective
from lowbw.net.calibrated import calibrate, calibrated_time, software_calibration, tree_chain

__all__ = ["ISSUE_MIN_SIZE_MB", "calibration_key", "trace_model", "remodel", "merge_software", "merge_start_lag",
           "merge_testbeds",
           "targets", "summarize", "table"]


def trace_model(cal: dict, trace: dict) -> dict:
    """A traced call's predictions on testbed ``cal``: ``model_s`` (the calibrated model) and, for the heap
    tree's one-chunk chain at N = 4, ``model_chain`` (per-hop arrivals and free bytes,
    :func:`lowbw.net.calibrated.tree_chain`; else None)."""
    n, alg, nb = trace["workers"], trace["algorithm"], trace["nbytes"]
    chain = tree_chain(cal, nb, n, algorithm=alg) if collective(alg).heap_chain and n == 4 else None
    return {"model_s": calibrated_time(cal, alg, nb, n),
            "model_chain": {"free_bytes": chain.free, "arrive_s": chain.arrive, "paced_bytes": chain.paced}
            if chain and chain.arrive else None}

def calibration_key(n: int, rate_mbit: float, delay_ms: float = 0) -> str:
    """The ``calibration`` entry of one testbed (zero delay: no suffix, as before the latency axis)."""
    return f"N{n}_{float(rate_mbit):g}mbit" + (f"_{float(delay_ms):g}ms" if delay_ms else "")



def remodel(result: dict, chunk_bytes: int | None = None) -> dict:
    """Recalibrate every testbed from its stored ping-pong (a pure function of it; the shapers' bucket from
    the testbed's record where the calibration lacks it), then recompute every row's model prediction (e.g.
    after a cost-model change) and the targets; ``chunk_bytes`` overrides the chunk size recorded in the
    rows; each testbed's software cost per step is recomputed from its stored tiny calls. Returns ``result``."""
    buckets = {(t.get("workers"), t.get("rate_bps"), t.get("delay_s") or 0.0): t["tbf"]["burst"]
               for t in result.get("testbeds", []) if t.get("tbf")}
    for key, cal in result["calibration"].items():
        if not cal.get("pingpong"):
            continue
        bucket = cal.get("shaper_burst_bytes")
        n, rest = key[1:].split("_", 1)
        if bucket is None:
            rate, _, delay = rest.partition("mbit")
            delay_s = float(delay.strip("_").removesuffix("ms") or 0) / 1e3
            bucket = buckets.get((int(n), float(rate) * 1e6, delay_s))
        cal.update(calibrate(cal["pingpong"], cal["nominal_rate_bps"], cal.get("gamma_s_per_byte"), bucket))
        if cal.get("software"):  # its tiny calls against the recalibrated model
            cal["software"] = software_calibration(cal, cal["software"], int(n))
    for r in result["rows"]:
        cal = (result["calibration"].get(calibration_key(r["workers"], r["rate_mbit"], r.get("delay_ms") or 0))
               or result["calibration"].get(f"N{r['workers']}_{r['rate_mbit']}mbit"))
        if not cal or not r.get("ok") or not r.get("time_s"):
            continue
        chunk = chunk_bytes or r.get("chunk_bytes")
        r["chunk_bytes"] = chunk
        r["model_s"] = calibrated_time(cal, r["algorithm"], r["nbytes"], r["workers"], chunk)
        r["model_rel_err"] = (r["model_s"] - r["time_s"]) / r["time_s"]
    for t in result.get("traces") or []:
        cal = result["calibration"].get(calibration_key(t["workers"], t["rate_mbit"], t.get("delay_ms") or 0))
        if cal:
            t.update(trace_model(cal, t))
    result["targets"] = targets(result["rows"])
    return result


def _loads(source: dict) -> dict[str, tuple]:
    """``source``'s 1-minute loads (before, after) per calibration key of its testbeds."""
    return {calibration_key(t["workers"], t["rate_bps"] / 1e6, 1e3 * (t.get("delay_s") or 0)):
            (t.get("loadavg_before"), t.get("loadavg_after")) for t in source.get("testbeds", [])}


def _measured_by(source: dict, source_name: str, load) -> dict:
    """Where and when a merged value was measured: ``source_name``, its commit, finish time and loads."""
    return {"source": source_name, "git_commit": (source.get("provenance") or {}).get("git_commit"),
            "finished_at": source.get("finished_at"), "loadavg": load}


def _record_run(target: dict, source: dict, source_name: str, what: str, done: list[str]) -> None:
    """List a calibration-only run merged into ``target`` under ``target["runs"]``, then :func:`remodel`."""
    target.setdefault("runs", []).append({
        "what": what, "calibration_keys": done, "source": source_name, "elapsed_s": source.get("elapsed_s"),
        "finished_at": source.get("finished_at"), "provenance": source.get("provenance")})
    remodel(target)


def merge_software(target: dict, source: dict, source_name: str) -> list[str]:
    """Give ``target``'s testbeds the software cost per step measured in ``source`` (a calibration-only run
    of the same testbeds, named ``source_name``): each calibration entry of ``target`` whose key ``source``
    has gets that run's tiny calls and ``software_measured`` (where and when: ``source_name``, its commit,
    finish time and loads), its traces join ``target["traces"]``, and ``target["runs"]`` lists the run;
    then :func:`remodel`. The ping-pong
    calibration and every grid setting stay ``target``'s own. Returns the keys given a software cost."""
    loads = _loads(source)
    done = []
    for key, cal in source.get("calibration", {}).items():
        if cal.get("software") and key in target.get("calibration", {}):
            raw = {a: {k: e[k] for k in ("nbytes", "times_s", "late_starts", "start_lags_s") if k in e}
                   for a, e in cal["software"].items()}
            own = target["calibration"][key]
            own["software"] = software_calibration(own, raw, int(key[1:].split("_", 1)[0]))
            own["software_measured"] = _measured_by(source, source_name, loads.get(key))
            done.append(key)
    # its traced calls too (a later trace of the same setting replaces an earlier one)
    key_of = ("workers", "rate_mbit", "delay_ms", "algorithm", "nbytes")
    new = [{**t, "source": source_name} for t in source.get("traces") or []]
    fresh = {tuple(t[k] for k in key_of) for t in new}
    target["traces"] = [t for t in target.get("traces") or [] if tuple(t[k] for k in key_of) not in fresh] + new
    _record_run(target, source, source_name, "software cost per step (tiny calls), calibration-only run", done)
    return done


def merge_start_lag(target: dict, source: dict, source_name: str) -> list[str]:
    """Give ``target``'s testbeds only the start lags (traced tiny calls, ``start_lags_s``) measured in
    ``source`` (a calibration-only run of the same testbeds, named ``source_name``), keeping ``target``'s own
    tiny calls' times: their total, measured in the grid's session, still sets what a tiny call costs, and the
    start lag only splits it into a cost per call and one per step (software costs measured in another
    session differ by tenths of a millisecond). Each entry so given records ``start_lag_measured`` (source,
    commit, finish time, loads); ``target["runs"]`` lists the run; then :func:`remodel`. Returns the keys."""
    loads = _loads(source)
    done = []
    for key, cal in source.get("calibration", {}).items():
        own = target.get("calibration", {}).get(key)
        if not own or not own.get("software"):
            continue
        lags = {a: e["start_lags_s"] for a, e in (cal.get("software") or {}).items()
                if e.get("start_lags_s") and a in own["software"]}
        if not lags:
            continue
        for a, lag in lags.items():
            own["software"][a]["start_lags_s"] = lag
        own["start_lag_measured"] = _measured_by(source, source_name, loads.get(key))
        own["software"] = software_calibration(own, own["software"], int(key[1:].split("_", 1)[0]))
        done.append(key)
    _record_run(target, source, source_name, "start lag per call (traced tiny calls), calibration-only run", done)
    return done


def merge_testbeds(target: dict, source: dict, source_name: str) -> list[str]:
    """Replace every testbed of ``target`` that ``source`` (a later run of the bench) measured: its
    calibration, its rows and its testbed record become ``source``'s; each of those rows carries ``run``, the
    index of ``source``'s entry in ``target["runs"]`` (where, when, which commit, the loads), so every
    setting says which run measured it. Testbeds ``source`` did not build stay as they were; then
    :func:`remodel`. Returns the replaced calibration keys."""
    def key(r: dict) -> str:
        return calibration_key(r["workers"], r["rate_mbit"], r.get("delay_ms") or 0)

    def bed_key(t: dict) -> str:
        return calibration_key(t["workers"], t["rate_bps"] / 1e6, 1e3 * (t.get("delay_s") or 0))

    keys = sorted({key(r) for r in source.get("rows", [])})
    if not keys:
        return []
    runs = target.setdefault("runs", [])
    idx = len(runs)
    runs.append({"what": "testbeds measured again, replacing earlier rows", "calibration_keys": keys,
                 "source": source_name, "elapsed_s": source.get("elapsed_s"),
                 "finished_at": source.get("finished_at"), "provenance": source.get("provenance"),
                 "loadavg": {bed_key(t): (t.get("loadavg_before"), t.get("loadavg_after"))
                             for t in source.get("testbeds", [])}})
    for k in keys:
        target["calibration"][k] = source["calibration"][k]
    target["rows"] = ([r for r in target["rows"] if key(r) not in keys]
                      + [{**r, "run": idx} for r in source["rows"] if key(r) in keys])
    target["testbeds"] = ([t for t in target.get("testbeds", []) if bed_key(t) not in keys]
                          + [t for t in source.get("testbeds", []) if bed_key(t) in keys])
    remodel(target)
    return keys


# ------------------------------------------------------------------------------------ summaries
ISSUE_MIN_SIZE_MB = 0.064  # the issue's message range: 64 KB .. 10 MB
def targets(rows: list[dict]) -> dict:
    """The issue's targets, evaluated on whatever was measured (None where nothing applies)."""
    ok = [r for r in rows if r.get("ok") and r.get("time_s")]
    ring_bound = [r for r in ok if r["algorithm"] == "ring" and r["rate_mbit"] == 100 and r["size_mb"] >= 10]
    by_key = {(r["workers"], r["rate_mbit"], r.get("delay_ms") or 0, r["size_mb"], r["algorithm"]): r for r in ok}
    ratios = []
    for (n, rate, delay, size, alg), r in by_key.items():
        if alg == "ring" and (n, rate, delay, size, "native") in by_key:
            ratios.append({"workers": n, "rate_mbit": rate, "delay_ms": delay, "size_mb": size,
                           "ring_over_native": r["time_s"] / by_key[(n, rate, delay, size, "native")]["time_s"]})
    errs = [r for r in ok if r.get("model_rel_err") is not None]
    return {
        "model_within_10pct_64kb_10mb": _within(
            [r for r in errs if ISSUE_MIN_SIZE_MB <= r["size_mb"] <= 10], "messages of 64 KB to 10 MB"),
        "model_within_10pct_64kb_10mb_delayed": _within(
            [r for r in errs if ISSUE_MIN_SIZE_MB <= r["size_mb"] <= 10 and (r.get("delay_ms") or 0) > 0],
            "messages of 64 KB to 10 MB, added delay > 0"),
        "ring_frac_of_bound_100mbit_ge10mb": {
            "target": ">= 0.90", "min": min((r["frac_of_bound"] for r in ring_bound), default=None),
            "met": all(r["frac_of_bound"] >= 0.9 for r in ring_bound) if ring_bound else None, "n": len(ring_bound)},
        "ring_over_native": {
            "target": "<= 1.05", "max": max((x["ring_over_native"] for x in ratios), default=None),
            "met": all(x["ring_over_native"] <= 1.05 for x in ratios) if ratios else None, "n": len(ratios),
            "cases": ratios},
        "model_within_10pct": _within(errs, "every measured size"),
    }


def _within(errs: list[dict], where: str) -> dict:
    """The model-error target over ``errs``: per algorithm the largest |error| and the share within 10%."""
    algs = sorted({r["algorithm"] for r in errs})
    return {"target": f"|model - measured| / measured <= 0.10 for every algorithm ({where})",
            "max_abs_rel_err": max((abs(r["model_rel_err"]) for r in errs), default=None),
            "met": all(abs(r["model_rel_err"]) <= 0.10 for r in errs) if errs else None, "n": len(errs),
            "by_algorithm": {a: max(abs(r["model_rel_err"]) for r in errs if r["algorithm"] == a) for a in algs},
            "within_by_algorithm": {a: sum(abs(r["model_rel_err"]) <= 0.10 for r in errs if r["algorithm"] == a)
                                    / sum(r["algorithm"] == a for r in errs) for a in algs}}


def summarize(result: dict) -> list[dict]:
    """Flat rows for a DataFrame/table."""
    out = []
    for r in result["rows"]:
        out.append({"N": r["workers"], "Mbit/s": r["rate_mbit"], "delay ms": r.get("delay_ms") or 0,
                    "MB": r["size_mb"], "algorithm": r["algorithm"],
                    "time_s": r["time_s"], "busbw_Mbit": (r.get("busbw_bps") or 0) / 1e6,
                    "frac_bound": r.get("frac_of_bound"), "bound_s": r["lower_bound_s"], "model_s": r["model_s"],
                    "model_err": r.get("model_rel_err"), "ok": r["ok"], "emulation": r["emulation"]})
    return out


def table(result: dict) -> str:
    """A plain-text (markdown) table of every row."""
    head = ("| N | Mbit/s | delay ms | MB | algorithm | time s | busbw Mbit/s | bound s | % of bound | model s "
            "| model err | ok |")
    lines = [head, "|" + "---|" * 12]

    def f(x: Any, spec: str) -> str:
        return "-" if x is None else format(x, spec)

    for r in summarize(result):
        lines.append(f"| {r['N']} | {r['Mbit/s']:g} | {r['delay ms']:g} | {r['MB']:g} | {r['algorithm']} | "
                     f"{f(r['time_s'], '.3f')} | "
                     f"{r['busbw_Mbit']:.1f} | {r['bound_s']:.3f} | "
                     f"{f(r['frac_bound'] and 100 * r['frac_bound'], '.1f')}"
                     f" | {f(r['model_s'], '.3f')} | {f(r['model_err'] and 100 * r['model_err'], '+.1f')}% | "
                     f"{'yes' if r['ok'] else 'NO'} |")
    return "\n".join(lines)
