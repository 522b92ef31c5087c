"""lowbw.workflow: what the Snakefile and ``make`` run on, beside the experiments themselves.

* :mod:`lowbw.workflow.grid` -- the experiment grid: config blocks expanded into runs, a run's path, and
  :func:`~lowbw.workflow.grid.validate_grid`, every run's config checked before any job;
* :mod:`lowbw.workflow.gridcache` -- that check kept per (config, code);
* :mod:`lowbw.workflow.progress` -- the progress line (jobs done, left, estimated time left);
* :mod:`lowbw.workflow.reference` -- the reference build kept in the repository and the comparison against it;
* :mod:`lowbw.workflow.store` / :mod:`lowbw.workflow.hoststore` -- runs and host measurements kept in the
  repository (``python -m lowbw store``);
* :mod:`lowbw.workflow.doctor` -- ``python -m lowbw doctor``: what crashed or killed runs left behind.
"""
