"""The advisor's step is the sum of its named terms, and each term is the one the step model defines: compute
as given, the candidate's own inner optimiser's update every step, compression and communication of its
exchange once per period, DiLoCo's outer step once per exchange (nothing else charged one)."""

from __future__ import annotations

import math

import pytest

from lowbw.advise.candidates import candidates, exchange
from lowbw.advise.rank import rank
from lowbw.advise.steptime import comm_time
from lowbw.advise.workload import Workload, from_model
from lowbw.net.costlinks import WorkerLink

UPDATES = {"sgd": 1.0e-3, "adamw": 3.0e-3, "adam": 2.5e-3}  # distinct, so that a swapped optimiser shows
OUTER = 0.032  # one outer step (s)


def _workload() -> Workload:
    w = from_model("gpt-mini", 32, step_ms=20)
    return Workload(w.model, w.kind, w.shapes, w.compute_s, w.compute_basis, UPDATES, OUTER)


@pytest.mark.parametrize("rate", [10e6, 1e9])
def test_every_candidate_step_is_the_sum_of_its_terms(rate):
    w = _workload()
    links = tuple(WorkerLink(rate, rate, 0.02, 0.0) for _ in range(4))
    ranking = rank(w, links, [], "val_loss", 2.2)
    assert {a.candidate.name for a in ranking} == {c.name for c in candidates()}
    for a in ranking:
        c, s = a.candidate, a.step
        terms = s.terms()
        assert set(terms) == {"compute", "optimizer", "compress", "comm", "outer"}
        assert math.isclose(sum(terms.values()), s.step_s, rel_tol=1e-12), c.name
        assert min(terms.values()) >= 0, c.name
        assert terms["compute"] == w.compute_s
        assert terms["optimizer"] == UPDATES[c.optimizer], c.name
        assert terms["outer"] == pytest.approx(OUTER / c.period if c.outer_step else 0.0), c.name
        d = a.as_dict()
        assert d["optimizer_s"] == terms["optimizer"] and d["outer_s"] == terms["outer"]


def test_a_period_charges_its_exchange_once():
    """Local SGD and plain DiLoCo: compression and communication of one exchange per H steps (the exchange's
    calls at the cost model's times), the outer step only where DiLoCo has one."""
    w = _workload()
    links = tuple(WorkerLink(10e6, 10e6, 0.02, 0.0) for _ in range(2))
    by = {a.candidate.name: a for a in rank(w, links, [], "val_loss", 2.2,
                                            only=("local16", "diloco16", "diloco16q4", "dense"))}
    for name in ("local16", "diloco16", "diloco16q4"):
        a = by[name]
        ex = exchange(a.candidate, w.shapes)
        assert a.step.comm_s == pytest.approx(comm_time(ex, links)[0] / a.candidate.period)
        assert a.step.compress_s == pytest.approx(a.compression.seconds / a.candidate.period)
    assert by["local16"].step.outer_s == 0 and by["diloco16"].step.outer_s == pytest.approx(OUTER / 16)
    assert by["dense"].candidate.optimizer == "sgd" and by["diloco16"].candidate.optimizer == "adamw"


def test_without_known_updates_nothing_is_charged_for_them():
    """The user's --step-ms: the optimiser's update is taken to be inside it; no outer step is invented."""
    w = from_model("gpt-mini", 32, step_ms=20)
    links = tuple(WorkerLink(10e6, 10e6, 0.02, 0.0) for _ in range(2))
    for a in rank(w, links, [], "val_loss", 2.2, only=("dense", "diloco16")):
        assert a.step.optimizer_s == 0 and a.step.outer_s == 0
        assert a.step.step_s == pytest.approx(sum(a.step.terms().values()))
