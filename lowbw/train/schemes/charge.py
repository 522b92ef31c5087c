"""What a synchronous step charges to the run: its virtual clock, bytes, measured seconds and statistics.

The virtual clock advances by

    max over workers (compute) + max over workers ((de)compression) + cost-model time of the step's calls

where compute and (de)compression are measured (``clock=measured``) or modelled (``clock=model``:
``clock_sample_s`` per sample, ``clock_compress_mbyte_s``), and the communication time is the
:mod:`lowbw.net.costmodel` time of the exact collective calls the step made, at the configured link; an
exchange in the background (diloco with ``diloco_delay``) adds, at the step it lands, only the part of its
time the steps since its start did not hide (:mod:`lowbw.train.schemes.streaming`).
"""

from __future__ import annotations

import torch

from lowbw.train.state import RunState, WorkerStats
from lowbw.train.world import messages_of

__all__ = ["count_comm", "record_step", "compress_model_s"]


def count_comm(st: RunState, ex, weight: float = 1.0) -> None:
    """Accumulate the alpha-beta coefficients of exchange ``ex`` (lets the report re-time at any link) and its
    collective calls per worker (``messages``: one per bucket and round with ``granularity: bucket``);
    ``weight``: the exposed fraction of a background exchange (:mod:`lowbw.train.schemes.streaming`)."""
    st.clock["comm_alpha_terms"] += ex.v_alpha * weight
    st.clock["comm_beta_bytes"] += ex.v_beta_bytes * weight
    st.messages += messages_of(ex)  # sent whole, exposed or not


def compress_model_s(cfg, comp, P: int, nbytes: int | None = None) -> float:
    """clock=model: seconds to (de)compress ``nbytes`` (default: the gradient's, ``P`` fp32 values) at
    ``clock_compress_mbyte_s``; 0 without a compressor ``comp``."""
    if comp is None or cfg.clock_compress_mbyte_s <= 0:
        return 0.0
    return (P * 4 if nbytes is None else nbytes) / (cfg.clock_compress_mbyte_s * 1e6)


def record_step(st: RunState, cfg, cols: WorkerStats, v_comm: float, v_compress: float | None, wall: float) -> None:
    """Advance the clocks and records of ``st`` by one step whose every worker's statistics are ``cols``.

    1. a synchronous step waits for its slowest worker: worker i computes ``worker_speeds[i]`` x as long;
    2. compute and (de)compression are modelled (``clock=model``) or the slowest worker's measured seconds,
       scaled by ``clock_compute_scale`` / ``clock_compress_scale`` (workers sharing cores);
    3. the clock, the measured seconds, the bytes and the intervals' statistics are summed.
    """
    speeds = torch.tensor(cfg.worker_speeds or [1.0] * cfg.workers, dtype=torch.float64)
    if cfg.clock == "model":
        v_compute = cfg.clock_sample_s * (st.batch // cfg.workers) * float(speeds.max())
        v_compress = (v_compress or 0.0) * float(speeds.max())
    else:
        v_compute = float((cols.t_compute * speeds).max())
        v_compress = float((cols.t_compress * speeds).max())
    v_compute *= cfg.clock_compute_scale  # workers sharing cores (1: one machine each)
    v_compress *= cfg.clock_compress_scale or cfg.clock_compute_scale
    clock, meas = st.clock, st.meas
    clock["t_virtual_compute"] += v_compute
    clock["t_virtual_compress"] += v_compress
    clock["t_virtual_comm"] += v_comm
    clock["t_virtual"] += v_compute + v_compress + v_comm
    meas["t_compute"] += float(cols.t_compute.max())
    meas["t_compress"] += float(cols.t_compress.max())
    meas["t_comm"] += float(cols.t_comm.max())
    meas["t_step"] += wall
    st.bytes_sent += int(cols.bytes_sent.sum())
    for iv in (st.interval, st.epoch_interval):
        iv.loss += float(cols.loss.mean())
        iv.correct += float(cols.correct.sum())
        iv.count += float(cols.count.sum())
        iv.n += 1
