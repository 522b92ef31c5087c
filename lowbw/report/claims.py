"""The result sentences of the abstract, introduction, discussion and conclusion, chosen by the numbers.

The Results quote every number by name, and :data:`lowbw.report.catalog.CLAIMS` fails the report where a number
contradicts the direction its sentence types. The paper's other sections summarise those results in words ("most
cells within the tolerance", "E6 agrees with the thesis"): such a sentence is a *claim*, written in
``paper/sections`` as ``\\claim{\\Claim<Name>}{what it says when the numbers bear it out}{what it says when
they do not}`` (``paper/paper.tex``). Each claim here names

1. its evidence: the number macros it rests on (every one it prints among them); where the build wrote any of
   them not (an experiment this profile did not run), the report writes no ``\\Claim<Name>`` and the paper
   prints neither wording;
2. its direction test on those numbers: the report writes ``\\Claim<Name>`` as 1 where it holds, 0 where it
   does not (the second wording is printed); a test that cannot decide (too few bandwidths to compare) writes
   nothing.

``tests/report/test_claims.py`` fails where such a section quotes a number outside a claim, where a claim's
wordings print a macro outside its evidence, or where a sentence outside a claim states a comparison of results.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

__all__ = ["PREFIX", "Claim", "SENTENCES", "value", "numbers"]

PREFIX = "Claim"  # the macros' prefix in paper/generated/numbers.tex


@dataclass(frozen=True)
class Claim:
    """One sentence of the abstract, introduction, discussion or conclusion that states a result."""

    says: str  # what its first wording states, in words (the catalogue's description of the macro)
    evidence: tuple[str, ...]  # the number macros it rests on; every one must be written for it to be printed
    # the direction test on the build's numbers (macro -> formatted value): True the first wording, False the
    # second, None undecided (nothing printed); it may read macros beyond its evidence that the wordings do not print
    holds: Callable[[Mapping[str, str]], bool | None]


def value(text: str) -> float | None:
    """The first number of a formatted macro value (``1{,}250``, ``2.5``, ``-0.3``), or None."""
    m = re.search(r"-?\d+(?:\.\d+)?", text.replace("{,}", ""))
    return float(m.group()) if m else None


def _most_within(n: Mapping[str, str]) -> bool | None:
    """E8: more than half of the compared cells within the step-time tolerance."""
    within, cells = value(n["EEightWithinTen"]), value(n["EEightCells"])
    return None if within is None or not cells else 2 * within > cells


def _changes_with_bandwidth(name: str) -> Callable[[Mapping[str, str]], bool | None]:
    """E4: the fastest method to the target (``name``: "1\\,Mbit/s: fp16; 10\\,Mbit/s: powersgd; ...") is not the
    same at every bandwidth; undecided with fewer than two bandwidths."""
    def test(n: Mapping[str, str]) -> bool | None:
        fastest = [part.split(":", 1)[1].strip() for part in n[name].split(";") if ":" in part]
        return None if len(fastest) < 2 else len(set(fastest)) > 1
    return test


def _adaptive_sooner(n: Mapping[str, str]) -> bool:
    """E7: the adaptive choice's median time to the target over all seeds is below the best fixed density's, by a
    significant margin (Mann-Whitney U); False where it never reached the target (no ratio was written)."""
    ratio = value(n.get("ESevenAdaptiveVsBest", ""))
    return ratio is not None and ratio > 1 and n.get("ESevenSignificance") == "significant"


def _overlap_no_difference(n: Mapping[str, str]) -> bool | None:
    """E6: overlapping and disjoint data end with no significantly different accuracy under synchronous training,
    as Haland (2020) found."""
    sig = n["ESixOverlapSyncSig"]
    if value(n["ESixOverlapSyncP"]) is None or sig not in ("significant", "not significant"):
        return None  # no test was possible (a single seed a side): neither agreement nor disagreement
    return sig == "not significant"


_E8 = ("EEightWithinTen", "EEightCells", "EEightTolerance", "EEightHost", "EEightDate")
SENTENCES: dict[str, Claim] = {
    "ClaimEEightMostWithin": Claim(
        "the simulator's step time is within the tolerance of the testbed's in most of E8's cells",
        (*_E8, "EEightWorstPerMethod"), _most_within),
    "ClaimEFourBandwidthRanking": Claim(
        "on the MLP the fastest method to the target changes with the bandwidth (E4)",
        ("EFourBestPerMbit",), _changes_with_bandwidth("EFourBestPerMbit")),
    "ClaimEFourLmBandwidthRanking": Claim(
        "on the language model the fastest method to the target changes with the bandwidth (E4)",
        ("EFourLmBestPerMbit",), _changes_with_bandwidth("EFourLmBestPerMbit")),
    "ClaimESevenAdaptiveSooner": Claim(
        "E7's adaptive choice reaches the target significantly sooner than the best fixed density",
        ("ESevenAdaptiveSeeds", "ESevenTttAdaptive"), _adaptive_sooner),
    "ClaimESixOverlapAgrees": Claim(
        "E6 finds no significant accuracy difference between overlapping and disjoint data under synchronous "
        "training, as the thesis did",
        ("ESixOverlapSync", "ESixOverlapSyncDir", "ESixOverlapSyncP", "ESixOverlapSyncSig"), _overlap_no_difference),
}


def numbers(written: Mapping[str, str]) -> dict[str, str]:
    """``\\Claim<Name>`` -> "1" (the first wording) or "0" (the second) for every claim whose evidence the build
    wrote (``written``: every number macro of numbers.tex) and whose test decides; the others are absent."""
    out = {}
    for name, claim in SENTENCES.items():
        if all(m in written for m in claim.evidence):
            verdict = claim.holds(written)
            if verdict is not None:
                out[name] = "1" if verdict else "0"
    return out
