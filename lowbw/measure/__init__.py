"""lowbw.measure: what both the benchmarks (:mod:`lowbw.bench`) and the advisor (:mod:`lowbw.advise`) use.

* :mod:`lowbw.measure.conditions` -- the machine's conditions while something was timed (load, steal, other
  processes' CPU), recorded by every benchmark and shown beside every measured number;
* :mod:`lowbw.measure.presets` -- the workflow config's method presets, as benchmarks and the advisor name them;
* :mod:`lowbw.measure.compress_time` -- a compressor's time per call on one device, fitted as a fixed plus a
  per-byte cost (the benchmark :mod:`lowbw.bench.compress_time` stores it; the advisor charges it).
"""
