"""Keep GPU runs in the repository in a small text form, and load them back like ``runs/``.

A GPU is lent now and then; its runs must outlive the machine. ``python -m lowbw store add RUN_DIR... --to
paper/measured/gpu`` copies each complete CUDA run into ``<to>/<experiment>/<key~value...>/``:

* ``config.json``   the run's own (resolved config, derived values, device, provenance);
* ``summary.json``  the run's own, its metrics seal (``metrics_lines``/``metrics_sha256``) re-sealed for the
  thinned file below and the original kept as ``source_metrics_lines``/``source_metrics_sha256``;
* ``metrics.jsonl`` thinned to at most ``max_lines`` lines: every evaluation line first (test/validation
  accuracy: what time-to-accuracy needs), then evenly spaced training lines, always the first and the last,
  in step order;
* ``provenance.json`` device name, torch and CUDA versions, commit, host, the run's date (UTC: its
  provenance's ``date`` where it has one, else when its summary.json was written, so store runs on the
  machine that ran them), when it was stored and from where.

and ``<to>/index.json`` lists every stored run. A run is refused, with a one-line error naming it and before
anything is written, when it is incomplete (no summary.json, ``complete`` false, or a metrics file that does
not match its seal) or did not run on CUDA (the device recorded in its config.json). :func:`load_store`
returns the DataFrame :func:`lowbw.runs.results.load_runs` gives for ``runs/``, plus the provenance columns
``gpu``, ``cuda_version``, ``measured_date`` and ``source_run``.
"""

from __future__ import annotations

import json
import re
import shutil
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from lowbw.runs.io import atomic_write_json, metrics_digest, read_jsonl
from lowbw.runs.metric import headline, run_metric
from lowbw.runs.results import RunError, find_runs, load_run, load_runs
from lowbw.workflow.hoststore import HOST_STORE, NAMES, HostStoreError, keep

__all__ = ["StoreError", "DEFAULT_STORE", "ANCHOR_STORE", "check_run", "thin", "add", "load_store", "list_table",
           "add_parser", "main"]

DEFAULT_STORE = Path("paper/measured/gpu")
ANCHOR_STORE = Path("paper/measured/anchor")  # CPU runs of the medium profile that the default paper quotes
MAX_LINES = 200


class StoreError(ValueError):
    """A run the store refuses (one line, naming the run)."""


def _read(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8"))


def check_run(run: str | Path, cuda: bool = True) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(config.json, summary.json)`` of a complete run (measured on CUDA unless ``cuda`` is False), else
    :class:`StoreError` saying why."""
    run = Path(run)
    if not (run / "config.json").is_file():
        raise StoreError(f"{run}: not a run directory (no config.json)")
    if not (run / "summary.json").is_file():
        raise StoreError(f"{run}: incomplete (no summary.json): only finished runs are stored")
    try:
        load_run(run)  # the metrics seal and step order (a truncated or edited metrics.jsonl)
        cfg, summ = _read(run / "config.json"), _read(run / "summary.json")
    except (RunError, json.JSONDecodeError) as e:
        raise StoreError(f"{run}: corrupt ({' '.join(str(e).split())[:200]})") from e
    if not summ.get("complete", False):
        raise StoreError(f"{run}: incomplete (complete=false, stopped={summ.get('stopped')!r}): only finished "
                         "runs are stored")
    device = str(cfg.get("device") or (cfg.get("config") or {}).get("device") or "unknown")
    gpu = (cfg.get("provenance") or {}).get("cuda")
    if cuda and (not device.startswith("cuda") or not gpu):
        raise StoreError(f"{run}: ran on device={device!r} (GPU {gpu!r}), not CUDA: the GPU store keeps only "
                         "runs measured on a GPU")
    return cfg, summ


def thin(lines: list[dict[str, Any]], max_lines: int = MAX_LINES) -> list[dict[str, Any]]:
    """At most ``max_lines`` of ``lines`` in their order: the first and last, evaluation lines, then evenly
    spaced others (evaluation lines evenly spaced too where they alone are more)."""
    if max_lines < 2:
        raise ValueError(f"max_lines={max_lines}: need at least 2 (the first and the last line)")
    n = len(lines)
    if n <= max_lines:
        return list(lines)

    def spread(idx: list[int], k: int) -> list[int]:
        if k <= 0 or not idx:
            return []
        if len(idx) <= k:
            return idx
        return [idx[round(i * (len(idx) - 1) / (k - 1))] for i in range(k)] if k > 1 else [idx[0]]

    keep = {0, n - 1}
    evals = [i for i, ln in enumerate(lines) if ln.get("test_acc") is not None or ln.get("val_acc") is not None]
    keep.update(spread([i for i in evals if i not in keep], max_lines - len(keep)))
    keep.update(spread([i for i in range(n) if i not in keep], max_lines - len(keep)))
    return [lines[i] for i in sorted(keep)]


def _relpath(run: Path) -> Path:
    """``<experiment>/<key~value>/...`` of a run directory (its last parts from the experiment on)."""
    parts = run.resolve().parts
    first = next((i for i, p in enumerate(parts) if "~" in p), None)
    if first is None or first == 0:
        return Path(*parts[-2:])
    return Path(*parts[first - 1:])


def _cuda_version(prov: dict[str, Any]) -> tuple[str | None, str]:
    if prov.get("cuda_version"):
        return str(prov["cuda_version"]), "provenance"
    m = re.search(r"\+cu(\d+)(\d)$", str(prov.get("torch_version", "")))
    if m:
        return f"{m.group(1)}.{m.group(2)}", "torch build tag"
    return None, "unknown"


def _provenance(run: Path, cfg: dict[str, Any], max_lines: int, n_lines: int, kept: int) -> dict[str, Any]:
    prov = cfg.get("provenance") or {}
    cuda, cuda_src = _cuda_version(prov)
    if prov.get("date"):  # the run's own record of when it ran, where its provenance has one
        when, when_src = datetime.fromisoformat(str(prov["date"]).replace("Z", "+00:00")), "provenance"
    else:  # else when its summary.json was written (run the store on the machine that ran it: copies move it)
        when, when_src = datetime.fromtimestamp((run / "summary.json").stat().st_mtime, UTC), "summary.json mtime"
    return {
        "gpu": prov.get("cuda"), "device": cfg.get("device"), "torch_version": prov.get("torch_version"),
        "cuda_version": cuda, "cuda_version_from": cuda_src, "git_commit": prov.get("git_commit"),
        "host": prov.get("host"), "measured_date": when.date().isoformat(), "measured_at": when.isoformat(),
        "measured_date_from": when_src,
        "stored_at": datetime.now(UTC).isoformat(timespec="seconds"), "source_run": str(run),
        "metrics_thinning": {"max_lines": max_lines, "source_lines": n_lines, "kept_lines": kept},
    }


def add(runs: list[str | Path], to: str | Path = DEFAULT_STORE, max_lines: int = MAX_LINES,
        cuda: bool = True) -> list[Path]:
    """Store ``runs`` under ``to`` (see the module docstring); every run is checked before any is written.
    A run stored before under the same path is replaced. Returns the stored directories. ``cuda=False`` (the
    CLI's ``--cpu``) also keeps runs measured on a CPU: the runs of a long profile that the default paper quotes,
    such as the gpt-small anchor (:data:`ANCHOR_STORE`)."""
    if not runs:
        raise StoreError("no run directories given")
    checked = [(Path(r), *check_run(r, cuda)) for r in runs]
    to = Path(to)
    dests = [to / _relpath(r) for r, _, _ in checked]
    dup = {str(d) for d in dests if dests.count(d) > 1}
    if dup:
        raise StoreError(f"two runs would be stored at the same place: {sorted(dup)}")
    out = []
    for (run, cfg, summ), dest in zip(checked, dests, strict=True):
        lines = read_jsonl(run / "metrics.jsonl")
        kept = thin(lines, max_lines)
        tmp = dest.parent / f".{dest.name}.tmp"
        if tmp.exists():
            shutil.rmtree(tmp)
        tmp.mkdir(parents=True)
        (tmp / "metrics.jsonl").write_text("".join(json.dumps(ln, sort_keys=True) + "\n" for ln in kept),
                                           encoding="utf-8")
        summ = dict(summ)
        if "metrics_lines" in summ:
            summ["source_metrics_lines"] = summ["metrics_lines"]
            summ["source_metrics_sha256"] = summ.get("metrics_sha256")
        summ.update(metrics_digest(tmp / "metrics.jsonl"))
        atomic_write_json(tmp / "config.json", cfg)
        atomic_write_json(tmp / "provenance.json", _provenance(run, cfg, max_lines, len(lines), len(kept)))
        atomic_write_json(tmp / "summary.json", summ)  # last, as in a run directory
        if dest.exists():
            shutil.rmtree(dest)
        tmp.rename(dest)
        out.append(dest)
    write_index(to)
    return out


def write_index(to: str | Path) -> Path:
    """``<to>/index.json``: every stored run with its GPU, date, final test accuracy and source."""
    to = Path(to)
    rows = []
    for d in find_runs(to):
        p = _read(d / "provenance.json") if (d / "provenance.json").is_file() else {}
        s = _read(d / "summary.json") if (d / "summary.json").is_file() else {}
        rows.append({"run": str(d.relative_to(to)), "gpu": p.get("gpu"), "measured_date": p.get("measured_date"),
                     "git_commit": p.get("git_commit"), "final_test_acc": s.get("final_test_acc"),
                     "source_run": p.get("source_run")})
    return atomic_write_json(to / "index.json", {"runs": rows})


def load_store(root: str | Path = DEFAULT_STORE):
    """The stored runs as :func:`lowbw.runs.results.load_runs` loads ``runs/`` (one row per run), plus ``gpu``,
    ``cuda_version``, ``measured_date`` and ``source_run`` from each run's provenance.json. An absent or empty
    store gives an empty DataFrame."""
    import pandas as pd  # lazy: keeps `lowbw --help` free of pandas

    root = Path(root)
    if not root.is_dir() or not find_runs(root):
        return pd.DataFrame()
    df = load_runs(root)
    extra = {k: [] for k in ("gpu", "cuda_version", "measured_date", "source_run")}
    for run in df["run"]:
        p = root / run / "provenance.json"
        prov = _read(p) if p.is_file() else {}
        for k in extra:
            extra[k].append(prov.get(k))
    for k, v in extra.items():
        df[k] = v
    return df


# ------------------------------------------------------------------------------------------------ CLI
def add_parser(sub) -> None:
    p = sub.add_parser("store", help="keep GPU runs in the repository (paper/measured/gpu) and list them")
    ss = p.add_subparsers(dest="store_command", required=True)
    a = ss.add_parser("add", help="store complete CUDA runs (summary, thinned metrics, provenance)")
    a.add_argument("runs", nargs="+", help="run directories (runs/<experiment>/<key~value>/...)")
    a.add_argument("--to", default=str(DEFAULT_STORE), help=f"store directory (default {DEFAULT_STORE})")
    a.add_argument("--max-lines", type=int, default=MAX_LINES, help="metrics lines kept per run")
    a.add_argument("--cpu", action="store_true",
                   help=f"also keep runs measured on a CPU (e.g. the gpt-small anchor into {ANCHOR_STORE})")
    ls = ss.add_parser("list", help="the stored runs, each with its workload's own metric (test accuracy for a "
                                    "classifier, validation loss and perplexity for a language model)")
    ls.add_argument("--root", action="append", default=None,
                    help=f"store directory (repeatable; default: {DEFAULT_STORE} and {ANCHOR_STORE})")
    h = ss.add_parser("host", help=f"keep this machine's benchmark files (runs/bench/<name>.json) in {HOST_STORE}, "
                      "where every profile's paper reads them when it has not measured them itself")
    h.add_argument("names", nargs="*", default=None,
                   help=f"which ({', '.join(NAMES)}; default: every one present in --from)")
    h.add_argument("--from", dest="src", default="runs/bench", help="where they were measured (default runs/bench)")
    h.add_argument("--to", default=str(HOST_STORE), help=f"store directory (default {HOST_STORE})")
    h.add_argument("--note", default="", help="a note kept in the index beside each file (how it was measured)")


def main(args) -> int:
    import sys

    if args.store_command == "host":
        names = args.names or [n for n in NAMES if (Path(args.src) / f"{n}.json").is_file()]
        try:
            for p in keep(names, args.src, args.to, args.note):
                print(f"stored {p}")
        except HostStoreError as e:
            print(f"lowbw store host: {e}", file=sys.stderr)
            return 2
        return 0
    if args.store_command == "add":
        try:
            for d in add(args.runs, args.to, args.max_lines, cuda=not args.cpu):
                print(f"stored {d}")
        except (StoreError, ValueError) as e:
            print(f"lowbw store: {e}", file=sys.stderr)
            return 2
        return 0
    roots = args.root or [str(DEFAULT_STORE), str(ANCHOR_STORE)]
    for i, root in enumerate(roots):
        print(("\n" if i else "") + list_table(root))
    return 0


def list_table(root: str | Path) -> str:
    """The stored runs under ``root`` as text: run, GPU, date, the workload's metric (:mod:`lowbw.runs.metric`),
    its final and best value (and perplexity for a loss), epochs."""
    df = load_store(root)
    if df.empty:
        return f"{root}: no stored runs"
    rows = []
    for run, epoch, gpu, date in zip(df["run"], df.get("epoch"), df["gpu"], df["measured_date"]):
        d = Path(root) / run
        summ = _read(d / "summary.json") if (d / "summary.json").is_file() else {}
        metric, _ = run_metric(_read(d / "config.json") if (d / "config.json").is_file() else {})
        h = headline(summ, metric)
        row = {"run": run, "gpu": gpu or "CPU", "measured_date": date, "metric": metric,
               "final": h[f"final_{metric}"], "best": h[f"best_{metric}"]}
        if metric.endswith("_loss"):
            split = metric[: -len("_loss")]
            row["final_ppl"] = h[f"final_{split}_ppl"]
        row["epoch"] = epoch
        rows.append(row)
    import pandas as pd  # lazy: keeps `lowbw --help` free of pandas

    return f"{root}:\n" + pd.DataFrame(rows).to_string(index=False, float_format=lambda v: f"{v:.4g}")
