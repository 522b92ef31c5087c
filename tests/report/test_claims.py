"""A number whose direction the prose types (e.g. 'dense training is R times slower') fails the report when a
regenerated value contradicts it, instead of printing a false sentence."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from lowbw.report.catalog import CLAIMS, MACROS, check_numbers

SECTIONS = Path(__file__).resolve().parents[2] / "paper" / "sections"


def test_a_flipped_finding_fails_and_names_the_sentence():
    check_numbers("e10", {"ETenOneSlowDenseRatio": "1.80"})
    check_numbers("e4", {"EFourBestSpeedup": "1{,}250"})
    with pytest.raises(ValueError, match=r"ETenOneSlowDenseRatio = 0.950, but the prose says 'dense training is"):
        check_numbers("e10", {"ETenOneSlowDenseRatio": "0.950"})
    with pytest.raises(ValueError, match="EFourBestSpeedup"):
        check_numbers("e4", {"EFourBestSpeedup": "0.8"})


def test_every_claim_is_a_catalogued_macro_whose_sentence_says_so():
    """Each claim names a macro the prose quotes next to the words it constrains (within one sentence)."""
    tex = " ".join(p.read_text(encoding="utf-8") for p in SECTIONS.glob("results*.tex"))
    tex = re.sub(r"\s+", " ", tex)
    for name, (_, words) in CLAIMS.items():
        assert name in MACROS
        key = next(w for w in ("faster", "slower", "fewer", "higher") if w in words)  # the direction the prose types
        at = [m.start() for m in re.finditer(rf"\\{name}\b", tex)]
        assert at, f"{name} is not quoted"
        assert any(key in tex[i: i + 200] for i in at), f"{name}: no '{key}' after it in the prose"
