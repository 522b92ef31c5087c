"""E8's machinery (the simulator against real runs on the testbed's shaped links), shared by its commands
``lowbw bench e2e`` (:mod:`lowbw.bench.e2e`, the cells), ``lowbw bench e2e_probe`` (:mod:`lowbw.bench.e2e_probe`)
and E10's check (:mod:`lowbw.bench.e10check`):

* :mod:`lowbw.bench.e8.grid` -- the cells (method x link rate x workers) and each cell's run configs;
* :mod:`lowbw.bench.e8.calls` -- a step's recorded exchange, replayed in the probe;
* :mod:`lowbw.bench.e8.calibration` -- the clock's calibration from the pooled probes;
* :mod:`lowbw.bench.e8.rows` -- a cell's row of the sim and testbed runs, the summary and the table.
"""
