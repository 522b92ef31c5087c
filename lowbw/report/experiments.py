"""The paper's experiments in order: each an :class:`~lowbw.report.build.Experiment` (select and summarise
into tidy tables; render numbers, table and figure). Every one reads only measured data
(``runs/bench/*.json`` and training run directories); one whose inputs are absent in the current profile
becomes a section that says so."""

from __future__ import annotations

from lowbw.report.e1 import E1
from lowbw.report.e2 import E2
from lowbw.report.e3 import E3
from lowbw.report.e4 import E4, E4LM
from lowbw.report.e7 import E7
from lowbw.report.e8 import E8
from lowbw.report.e9 import E9, E9LM
from lowbw.report.e10 import E10, E10LM
from lowbw.report.e11 import E11
from lowbw.report.e12 import E12
from lowbw.report.experiment import Experiment
from lowbw.report.lmc import E9LMC
from lowbw.report.schemes import E5, E6

__all__ = ["ALL", "BY_KEY"]

ALL: list[Experiment] = [E1, E2, E3, E4, E4LM, E5, E6, E7, E8, E9, E9LM, E9LMC, E10, E10LM, E11, E12]
BY_KEY: dict[str, Experiment] = {e.key: e for e in ALL}
