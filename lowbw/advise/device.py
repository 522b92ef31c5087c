"""The user's device (``--device``) and what compression costs on it.

Compression time of one exchange = the sum over the model's tensors of one compress + decompress each,
``t(n)`` for a tensor of n fp32 entries, from the first of:

1. ``measured``: a stored measurement of that compressor setting on that device
   (:mod:`lowbw.bench.compress_time`'s files under ``paper/measured/compress_time/``: several tensor sizes,
   provenance and the machine's load), a fixed per-call cost plus a per-byte cost between each two measured
   sizes (:func:`per_call_s`), or, with ``--measure``, the tensors of the user's model timed on the device
   at hand;
2. ``modelled``: a roofline of a GPU the stored files do not cover: the compressor's own memory traffic
   (``Compressor.passes``: passes over the fp32 gradient per compress + decompress) at the device's memory
   bandwidth (:data:`DEVICES`, from the vendors' datasheets), plus one kernel launch
   (:data:`LAUNCH_S`) per pass and tensor: ``t(n) = ceil(passes) LAUNCH_S + passes 4 n / bandwidth``;
3. on ``cpu`` without a stored file: the advisor's own timing of the model's shapes on this machine
   (:func:`lowbw.advise.candidates.exchange`), ``measured here``.

A roofline is a lower bound for a bandwidth-bound kernel (eager torch adds temporaries the pass counts
include only where the compressor's code makes them): it says the order of magnitude, not the millisecond.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from lowbw.advise.candidates import Candidate, compressor_of

__all__ = ["Device", "DEVICES", "LAUNCH_S", "STORE", "CompressTime", "device", "stored", "per_call_s", "compress_time",
           "measure_compress", "device_at_hand"]

STORE = Path(__file__).resolve().parents[2] / "paper" / "measured" / "compress_time"
# one CUDA kernel launch, as the roofline's per-pass fixed cost: a few microseconds on current GPUs
# (NVIDIA's CUDA C++ Best Practices Guide, "kernel launch overhead"); an assumption of the model, not measured
LAUNCH_S = 5e-6


@dataclass(frozen=True)
class Device:
    """A device the advisor knows."""

    name: str  # what --device takes
    kind: str  # "cpu" | "cuda"
    bandwidth_Bps: float | None  # memory bandwidth (bytes/s) for the roofline; None: measured only (cpu)
    source: str  # where the bandwidth comes from


DEVICES: dict[str, Device] = {
    "cpu": Device("cpu", "cpu", None, "this machine's CPU, measured (python -m lowbw.bench.compress_time)"),
    "v100": Device("v100", "cuda", 900e9, "NVIDIA V100 Tensor Core GPU datasheet: SXM2, HBM2 900 GB/s"),
    "a100": Device("a100", "cuda", 2.039e12, "NVIDIA A100 Tensor Core GPU datasheet: 80GB SXM, HBM2e 2,039 GB/s"),
    "h100": Device("h100", "cuda", 3.35e12, "NVIDIA H100 Tensor Core GPU datasheet: SXM, HBM3 3.35 TB/s"),
    "h200": Device("h200", "cuda", 4.8e12, "NVIDIA H200 Tensor Core GPU datasheet: SXM, HBM3e 4.8 TB/s"),
}


def device(name: str) -> Device:
    """The device ``name`` names (one-line error naming an unknown one and listing the known)."""
    d = DEVICES.get(name.lower())
    if d is None:
        raise ValueError(f"--device {name!r}: unknown device; known: {', '.join(DEVICES)}")
    return d


def device_at_hand() -> str:
    """``cuda`` where torch sees a GPU, else ``cpu``: the device ``--measure`` times."""
    import torch  # lazy: --measure only

    return "cuda" if torch.cuda.is_available() else "cpu"


@dataclass(frozen=True)
class CompressTime:
    """One candidate's compression time per exchange, and what it rests on."""

    seconds: float  # compress + decompress of every tensor of the model once (s)
    basis: str  # "measured" | "modelled" | "measured here"
    detail: str  # the measurement's device and date, or the roofline's constants, in words


def _key(compressor: str, args: dict[str, Any] | tuple, ef: bool | None) -> str:
    return json.dumps([compressor, dict(args), ef], sort_keys=True, default=str)


@cache
def stored(store: Path = STORE) -> dict[str, dict[str, Any]]:
    """Every stored measurement file: device name -> {"rows": {setting key: row}, "date", "device_name",
    "load"} (the newest file of a device where several name it)."""
    out: dict[str, dict[str, Any]] = {}
    if not store.is_dir():
        return out
    for f in sorted(store.glob("*.json")):
        d = json.loads(f.read_text())
        date = d.get("provenance", {}).get("date", "")
        if d["device"] in out and out[d["device"]]["date"] >= date:
            continue
        rows = {_key(r["compressor"], r["compressor_args"], r["error_feedback"]): r for r in d["rows"]}
        cond = d.get("conditions", {})
        out[d["device"]] = {"rows": rows, "date": date, "device_name": d.get("device_name", d["device"]),
                            "file": f.name, "load": cond.get("load1_mean"), "busy": cond.get("busy")}
    return out


def per_call_s(row: dict[str, Any], numel: int) -> float:
    """Seconds of one compress + decompress of ``numel`` entries from a stored row: between two measured
    sizes the straight line through them (a fixed per-call cost plus that segment's per-byte cost), below the
    smallest its time, beyond the largest the last segment's line. The row's single fit (``fixed_s`` +
    ``per_byte_s``, weighted by 1/t) misses the sizes that leave the caches by up to its
    ``fit_max_rel_residual``; the segments keep every measured size exact."""
    sizes, times = row["sizes"], row["times_s"]
    if numel <= sizes[0]:
        return float(times[0])
    i = next((j for j in range(1, len(sizes)) if numel <= sizes[j]), len(sizes) - 1)
    slope = (times[i] - times[i - 1]) / (sizes[i] - sizes[i - 1])
    return float(times[i - 1] + max(0.0, slope) * (numel - sizes[i - 1]))


def _roofline(passes: float, numel: int, bandwidth: float) -> float:
    return math.ceil(passes) * LAUNCH_S + passes * 4.0 * numel / bandwidth


def compress_time(c: Candidate, shapes: tuple[tuple[str, tuple[int, ...]], ...], dev: Device,
                  here_s: float | None = None) -> CompressTime:
    """Compression per exchange of candidate ``c`` on ``dev`` for a model of parameter ``shapes`` (module
    docstring); ``here_s``: the advisor's own timing of the shapes on this machine (cpu's last resort)."""
    if c.compressor == "none":
        return CompressTime(0.0, "measured", "no compression")
    sizes = [math.prod(s) for _, s in shapes]
    got = stored().get(dev.name)
    row = got["rows"].get(_key(c.compressor, c.compressor_args, c.error_feedback)) if got else None
    if row is not None:
        t = sum(per_call_s(row, n) for n in sizes)
        load = f", load {got['load']:.1f}" if got.get("load") is not None else ""
        return CompressTime(t, "measured", f"{got['device_name']}, {got['date'][:10]}{load} ({got['file']}: "
                            f"{len(row['sizes'])} sizes, {row['sizes'][0]:,}-{row['sizes'][-1]:,} entries)")
    if dev.bandwidth_Bps is not None:
        passes = float(compressor_of(c).passes)
        t = sum(_roofline(passes, n, dev.bandwidth_Bps) for n in sizes)
        return CompressTime(t, "modelled", f"roofline: {passes:g} passes at {dev.bandwidth_Bps / 1e12:.3g} TB/s "
                            f"+ {math.ceil(passes)} launches x {LAUNCH_S * 1e6:g} us per tensor")
    if here_s is None:
        raise ValueError(f"--device {dev.name}: no stored compression times for {c.name}; give --measure")
    return CompressTime(here_s, "measured here", "the model's shapes timed once by the advisor on this machine")


def measure_compress(c: Candidate, shapes: tuple[tuple[str, tuple[int, ...]], ...], reps: int = 3) -> CompressTime:
    """``--measure``: compress + decompress of every distinct shape of the model timed on the device at hand
    (fastest of ``reps`` after a warm-up, :func:`lowbw.measure.compress_time.time_setting`), summed per tensor."""
    if c.compressor == "none":
        return CompressTime(0.0, "measured", "no compression")
    import torch  # lazy: --measure only

    from lowbw.measure.compress_time import time_setting  # lazy: imports torch

    dev = torch.device(device_at_hand())
    comp = compressor_of(c)
    counts: dict[tuple[int, ...], int] = {}
    for _, s in shapes:
        counts[s] = counts.get(s, 0) + 1
    total = sum(k * time_setting(comp, s, dev, reps)[0] for s, k in counts.items())
    return CompressTime(total, "measured", f"--measure on {dev.type} ({torch.get_num_threads()} threads), "
                        f"{len(counts)} distinct shapes")
