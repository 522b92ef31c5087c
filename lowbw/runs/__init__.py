"""lowbw.runs: run directories, the contract between layers (``config.json``, ``metrics.jsonl``, ``summary.json``).

* :mod:`lowbw.runs.io` -- atomic JSON writes, JSONL metrics, provenance, run-directory locks;
* :mod:`lowbw.runs.results` -- run directories loaded into tidy pandas DataFrames (``load_runs``,
  ``load_metrics``, ``find_runs``);
* :mod:`lowbw.runs.metric` -- the metric that judges a run, as its workload defines it;
* :mod:`lowbw.runs.compare` -- ``python -m lowbw compare RUN_DIR...``: runs side by side.
"""
