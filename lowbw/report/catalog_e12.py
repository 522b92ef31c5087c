"""E12's number macros (Charles et al.'s DiLoCo scaling at micro scale, :mod:`lowbw.report.e12`; its runs are kept
in ``paper/measured/scaling``): name -> what it holds and in which unit. :mod:`lowbw.report.catalog` takes them
into the one catalogue; they live here so that the catalogue stays one screenful per experiment."""

from __future__ import annotations

__all__ = ["E12_MACROS"]

E12_MACROS: dict[str, str] = {
    "ETwelveSizes": "the model sizes and their parameter counts (list)",
    "ETwelveSpan": "largest / smallest parameter count",
    "ETwelveBudget": "each size's token budget and tokens per parameter (list)",
    "ETwelveStored": "stored (or rerun) runs of the scaling profile, of how many it has",
    "ETwelveSeeds": "the fewest seeds of a measured cell of the Table-4 layout",
    "ETwelveCells": "measured cells of the Table-4 layout, of how many",
    "ETwelveJointA": "our joint fit's prefactor A of L = A N^alpha M^beta",
    "ETwelveJointAlpha": "its exponent of N",
    "ETwelveJointBeta": "its exponent of M",
    "ETwelveJointBetaCI": "95% interval of that exponent",
    "ETwelveCharlesJoint": "Charles et al.'s joint fit (formula)",
    "ETwelveGapVerdict": "how the gap to DP moves with size at each M (words chosen by the exponents' intervals)",
    "ETwelveAgreement": "whether that agrees with Charles et al. (words)",
    "ETwelveGapMFourSmall": "DiLoCo M=4's gap to DP at our smallest size (%)",
    "ETwelveGapMFourLarge": "the same at our largest size (%)",
    "ETwelveCharlesGapMFourSmall": "Charles et al.'s M=4 gap to DP at 35M parameters (%)",
    "ETwelveCharlesGapMFourLarge": "theirs at 2.4B parameters (%)",
    "ETwelveMOne": "at how many sizes DiLoCo M=1 ends below DP (words)",
    "ETwelveOuterBest": "the best outer lr at each M at the smallest size (list)",
    "ETwelveOuterRises": "whether it rises with M (words)",
    "ETwelveOuterVerdict": "whether the best outer lr at M=4 stays put across sizes (words)",
    "ETwelveInnerLr": "each size's best inner lr from its sweep at M=1 (list)",
    "ETwelveInnerEdge": "whether a best inner lr lies at its grid's edge (words)",
    "ETwelveFamilyTrends": "each family's loss ratio to DP as a power of N at M=4, and its steps' (list)",
    "ETwelveReason": "the likely reasons of a disagreement with Charles et al. (sentence start)",
}
