"""E1's packed exchange (``runs/bench/exchange.json``, :mod:`lowbw.bench.exchange`): one step's gradient exchange
on the testbed at a high-latency link, dense's flat all-reduce against PowerSGD and top-k per tensor
(``granularity: layer``, before bucketing) and per DDP bucket (``bucket``, after), each against the bound of its
calls. Used by :mod:`lowbw.report.e1`, which owns E1's files; the ``EOneExch*`` macros are catalogued in
:mod:`lowbw.report.catalog`."""

from __future__ import annotations

from typing import Any

from lowbw.report.catalog import E1_EXCHANGE_METHODS, word
from lowbw.report.latex import escape, fmt_num

__all__ = ["SOURCE", "exchange_numbers"]

SOURCE = "exchange"  # runs/bench/<SOURCE>.json


def exchange_numbers(doc: dict[str, Any]) -> dict[str, str]:
    """The ``EOneExch*`` macros of a ``bench exchange`` file: its setting, dense's time, and per method its
    time, calls and bound ratio per tensor and bucketed, with the bucket's change in bytes."""
    s, rows = doc["setting"], {(r["method"], r["granularity"]): r for r in doc["rows"]}
    cond = doc.get("conditions") or {}
    out = {"EOneExchModel": escape(s["model"]), "EOneExchWorkers": str(int(s["workers"])),
           "EOneExchRate": fmt_num(s["rate_bps"] / 1e6), "EOneExchDelay": fmt_num(1e3 * s["delay_s"]),
           "EOneExchDenseS": fmt_num(rows[("dense", "flat")]["seconds"], 3),
           "EOneExchLoadMax": fmt_num(float(cond.get("load1_max", float("nan"))), 2)}
    wire, payload = [], []
    for m, w in E1_EXCHANGE_METHODS.items():
        layer, bucket = rows.get((m, "layer")), rows.get((m, "bucket"))
        if layer is None or bucket is None:
            raise ValueError(f"{SOURCE}.json: method {m!r} lacks its layer or bucket row")
        word(E1_EXCHANGE_METHODS, m, "bench exchange method")
        out.update({f"EOneExch{w}LayerS": fmt_num(layer["seconds"], 3),
                    f"EOneExch{w}BucketS": fmt_num(bucket["seconds"], 3),
                    f"EOneExch{w}LayerCalls": str(int(layer["calls"])),
                    f"EOneExch{w}BucketCalls": str(int(bucket["calls"])),
                    f"EOneExch{w}BucketBound": fmt_num(bucket["ratio"], 3)})
        wire.append(100 * (bucket["bytes_sent"] / layer["bytes_sent"] - 1))
        payload.append(100 * abs(bucket["payload_bytes"] / layer["payload_bytes"] - 1))
    out["EOneExchWireDropMax"] = fmt_num(max(0.0, -min(wire)), 2)
    out["EOneExchPayloadChangeMax"] = fmt_num(max(payload), 2)
    return out
