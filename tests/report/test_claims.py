"""A number whose direction the prose types (e.g. 'dense training is R times slower') fails the report when a
regenerated value contradicts it, instead of printing a false sentence; and the abstract's, introduction's,
discussion's and conclusion's result sentences are claims the numbers choose (lowbw.report.claims): a number or
an outcome stated outside one fails here, and flipped evidence prints the other wording, absent evidence neither."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from lowbw.report.catalog import CLAIMS, MACROS, check_numbers
from lowbw.report.claims import PREFIX, SENTENCES
from lowbw.report.claims import numbers as claim_numbers

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


# ---------------------------------------------------------------- the abstract, introduction, discussion, conclusion
FRONT = ("abstract", "introduction", "discussion", "conclusion")
# words that state an outcome of the measurements: a comparison, a verdict, a share of cells, a dependence of the
# ranking on the network; outside a claim, a sentence naming an experiment must use none of them
RESULT_WORDS = re.compile(
    r"\b(?:(?:faster|slower|sooner|later|better|worse|higher|lower|more|less|fewer) than|beats?|outperforms?|wins?"
    r"|agrees?|disagrees?|reproduces?|confirms?|within (?:the tolerance|\\?\d)|most (?:cells|settings|seeds|methods)"
    r"|significant(?:ly)?|(?:ranking|order|fastest|best)\b[^.;]{0,60}\b(?:depends? on|changes? with))\b", re.I)
NAMES_A_RESULT = re.compile(r"\bE\d{1,2}\b|\\ref\{(?:tab|fig|sec):e\d")


def _strip_comments(tex: str) -> str:
    return "\n".join(re.sub(r"(?<!\\)%.*", "", line) for line in tex.splitlines())


def _group(tex: str, i: int) -> int:
    """The index after the brace group that opens at ``tex[i]``."""
    assert tex[i] == "{", f"a \\claim needs three brace groups: {tex[i:i + 60]!r}"
    depth = 0
    for j in range(i, len(tex)):
        if tex[j] in "{}" and tex[j - 1] != "\\":
            depth += 1 if tex[j] == "{" else -1
            if depth == 0:
                return j + 1
    raise AssertionError(f"unbalanced braces after {tex[i:i + 60]!r}")


def claims_in(tex: str) -> list[tuple[int, int, str, list[str]]]:
    """Every ``\\claim{\\ClaimName}{holds}{does not}``: (start, end, name, [holds, does not])."""
    out = []
    for m in re.finditer(r"\\claim\{\\(Claim[A-Za-z]+)\}", tex):
        i, args = m.end(), []
        for _ in range(2):
            j = _group(tex, i)
            args.append(tex[i + 1: j - 1])
            i = j
        out.append((m.start(), i, m.group(1), args))
    return out


def render(tex: str, verdicts: dict[str, str]) -> str:
    """The text with each claim resolved as paper.tex's \\claim does: "1" its first wording, "0" its second,
    absent nothing."""
    for start, end, name, (holds, fails) in reversed(claims_in(tex)):
        tex = tex[:start] + {"1": holds, "0": fails}.get(verdicts.get(name), "") + tex[end:]
    return tex


def _number_macros(tex: str) -> set[str]:
    """The report's number macros ``tex`` prints: catalogued names, less the build's own (Build...: what it read)
    and the claims' verdicts."""
    return {m for m in re.findall(r"\\([A-Za-z]+)", tex) if m in MACROS and not m.startswith(("Build", PREFIX))}


def front_problems(tex: str) -> list[str]:
    """Why a front section's source states a result the numbers do not choose: a number macro printed outside a
    claim (an \\ifmeasured guard may name one, its text may not print one), a claim printing a macro outside its
    evidence or unknown to lowbw.report.claims, a sentence naming an experiment that states an outcome outside one."""
    tex = _strip_comments(tex)
    bad, rest = [], tex
    for start, end, name, args in reversed(claims_in(tex)):
        if name not in SENTENCES:
            bad.append(f"\\{name} is not a claim of lowbw.report.claims.SENTENCES")
        else:
            extra = _number_macros(" ".join(args)) - set(SENTENCES[name].evidence)
            bad += [f"\\{name} prints \\{m}, which is not among its evidence" for m in sorted(extra)]
        rest = rest[:start] + " " + rest[end:]
    rest = re.sub(r"\\ifmeasured\{\\[A-Za-z]+\}", " ", rest)  # a guard: existence only, the text is checked below
    bad += [f"\\{m} is printed outside a claim" for m in sorted(_number_macros(rest))]
    for sentence in re.split(r"(?<=[.;])\s+", re.sub(r"\s+", " ", rest)):
        if NAMES_A_RESULT.search(sentence) and (w := RESULT_WORDS.search(sentence)):
            bad.append(f"'{w.group(0)}' states a result outside a claim: {sentence[:160]}")
    return bad


@pytest.mark.parametrize("name", FRONT)
def test_front_sections_state_results_only_in_claims(name):
    assert front_problems((SECTIONS / f"{name}.tex").read_text(encoding="utf-8")) == []


def test_the_scan_fails_on_unchosen_results():
    """The rule can fail: the draft's unguarded E8 sentence (numbers behind \\ifmeasured only), a verdict typed
    beside an experiment, a claim printing a number it does not rest on, an unknown claim."""
    assert front_problems(r"\ifmeasured{\EEightCells}{(E8: \EEightWithinTen{} of \EEightCells{} cells)}") == [
        "\\EEightCells is printed outside a claim", "\\EEightWithinTen is printed outside a claim"]
    assert front_problems(r"\ifmeasured{\EEightCells}{ the simulator's clock against real runs,}") == []
    assert front_problems("E4 shows that top-k is faster than dense training.")
    assert front_problems("Reading Table~\\ref{tab:e4} explains why the ranking of methods depends on bandwidth.")
    assert front_problems(r"\claim{\ClaimEFourBandwidthRanking}{It changes (\EFourLmBestPerMbit).}{}") == [
        "\\ClaimEFourBandwidthRanking prints \\EFourLmBestPerMbit, which is not among its evidence"]
    assert front_problems(r"\claim{\ClaimNowhere}{E4 wins.}{}") == [
        "\\ClaimNowhere is not a claim of lowbw.report.claims.SENTENCES"]
    assert front_problems("E4 tests it on slower links, with fewer seeds.") == []  # a setting, not an outcome


def test_every_claim_is_used_by_a_front_section():
    used = {name for f in FRONT for _, _, name, _ in
            claims_in(_strip_comments((SECTIONS / f"{f}.tex").read_text(encoding="utf-8")))}
    assert used == set(SENTENCES)
    assert all(m in MACROS for c in SENTENCES.values() for m in c.evidence)


E8 = {"EEightWithinTen": "16", "EEightCells": "20", "EEightTolerance": "10", "EEightHost": "vm,",
      "EEightDate": "2026-11-27", "EEightWorstPerMethod": "dense 4.5\\,\\%, powersgd 22\\,\\%"}


def test_flipped_evidence_flips_the_sentence_and_absent_evidence_drops_it():
    """E8 with 16 of 20 cells within the tolerance prints 'most of its cells'; 5 of 20 the other wording ('only');
    without E8 neither. The discussion's rendered text follows."""
    tex = _strip_comments((SECTIONS / "discussion.tex").read_text(encoding="utf-8"))
    held = claim_numbers(E8)
    assert held["ClaimEEightMostWithin"] == "1"
    flipped = claim_numbers({**E8, "EEightWithinTen": "5"})
    assert flipped["ClaimEEightMostWithin"] == "0"
    assert "ClaimEEightMostWithin" not in claim_numbers({k: v for k, v in E8.items() if k != "EEightCells"})
    assert "in most of its cells" in render(tex, held) and "only \\EEightWithinTen" not in render(tex, held)
    assert "only \\EEightWithinTen" in render(tex, flipped) and "in most of its cells" not in render(tex, flipped)
    assert "\\EEightWithinTen" not in render(tex, {})
    # the abstract's and the introduction's sentences follow the same claim
    for f in ("abstract", "introduction"):
        src = _strip_comments((SECTIONS / f"{f}.tex").read_text(encoding="utf-8"))
        assert "most cells" in render(src, held) and "most cells" not in render(src, {})


@pytest.mark.parametrize("numbers, name, verdict", [
    ({"EFourLmBestPerMbit": "1\\,Mbit/s: powersgd; 100\\,Mbit/s: fp16; 10{,}000\\,Mbit/s: dense"},
     "ClaimEFourLmBandwidthRanking", "1"),
    ({"EFourLmBestPerMbit": "1\\,Mbit/s: fp16; 100\\,Mbit/s: fp16"}, "ClaimEFourLmBandwidthRanking", "0"),
    ({"EFourLmBestPerMbit": "1\\,Mbit/s: fp16"}, "ClaimEFourLmBandwidthRanking", None),  # one bandwidth: no test
    ({"EFourBestPerMbit": "1\\,Mbit/s: fp16; 10\\,Mbit/s: fp16"}, "ClaimEFourBandwidthRanking", "0"),
    ({"ESevenAdaptiveSeeds": "with all 3 seeds", "ESevenTttAdaptive": "2.0 min", "ESevenAdaptiveVsBest": "1.50",
      "ESevenSignificance": "significant"}, "ClaimESevenAdaptiveSooner", "1"),
    ({"ESevenAdaptiveSeeds": "with all 3 seeds", "ESevenTttAdaptive": "2.0 min", "ESevenAdaptiveVsBest": "1.50",
      "ESevenSignificance": "not significant"}, "ClaimESevenAdaptiveSooner", "0"),
    ({"ESevenAdaptiveSeeds": "with only 0 of its 3 seeds", "ESevenTttAdaptive": "never"},
     "ClaimESevenAdaptiveSooner", "0"),  # never at the target: no ratio, not sooner
    ({"ESixOverlapSync": "0.49", "ESixOverlapSyncDir": "lower", "ESixOverlapSyncP": "0.022",
      "ESixOverlapSyncSig": "significant"}, "ClaimESixOverlapAgrees", "0"),
    ({"ESixOverlapSync": "0.10", "ESixOverlapSyncDir": "higher", "ESixOverlapSyncP": "0.60",
      "ESixOverlapSyncSig": "not significant"}, "ClaimESixOverlapAgrees", "1"),
    ({"ESixOverlapSync": "0.10", "ESixOverlapSyncDir": "higher", "ESixOverlapSyncP": "--",
      "ESixOverlapSyncSig": "not significant"}, "ClaimESixOverlapAgrees", None),  # untested: no verdict
])
def test_each_claim_is_chosen_by_its_numbers(numbers, name, verdict):
    assert claim_numbers(numbers).get(name) == verdict


def _claim_definition() -> str:
    tex = (SECTIONS.parent / "paper.tex").read_text(encoding="utf-8")
    return next(line for line in tex.splitlines() if line.startswith(r"\newcommand{\claim}"))


@pytest.mark.skipif(shutil.which("latexmk") is None or shutil.which("pdftotext") is None,
                    reason="latexmk or pdftotext is not installed")
def test_the_latex_claim_prints_the_wording_its_verdict_chooses(tmp_path):
    """paper.tex's \\claim: verdict 1 prints the first wording, 0 the second, no verdict neither."""
    body = "\n".join([r"\documentclass{article}", _claim_definition(), r"\newcommand{\ClaimYes}{1}",
                      r"\newcommand{\ClaimNo}{0}", r"\begin{document}",
                      r"A\claim{\ClaimYes}{ HOLDSONE}{ FAILSONE}. B\claim{\ClaimNo}{ HOLDSTWO}{ FAILSTWO}."
                      r" C\claim{\ClaimAbsent}{ HOLDSTHREE}{ FAILSTHREE}.", r"\end{document}", ""])
    (tmp_path / "t.tex").write_text(body)
    subprocess.run(["latexmk", "-pdf", "-interaction=nonstopmode", "t.tex"], cwd=tmp_path, capture_output=True,
                   timeout=120, check=True)
    text = " ".join(subprocess.run(["pdftotext", "t.pdf", "-"], cwd=tmp_path, capture_output=True, text=True,
                                   check=True).stdout.split())
    assert "A HOLDSONE. B FAILSTWO. C." in text
    assert not {"FAILSONE", "HOLDSTWO", "HOLDSTHREE", "FAILSTHREE"} & set(re.findall(r"[A-Z]{5,}", text))


@pytest.mark.skipif(shutil.which("latexmk") is None, reason="latexmk is not installed")
def test_the_paper_builds_with_every_claim_flipped(tmp_path):
    """Every claim's second wording (the numbers say otherwise) compiles in the real sources, against dummy
    generated files in a temporary copy (the first wording: tests/test_paper_sources.py's contract build)."""
    from tests.test_paper_sources import PAPER, _latexmk, write_dummy_generated

    work = tmp_path / "paper"
    shutil.copytree(PAPER, work, ignore=shutil.ignore_patterns("build", "generated"))
    write_dummy_generated(work / "generated", claims="0")
    r = _latexmk(work, "paper.tex")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    text = " ".join(subprocess.run(["pdftotext", str(work / "build" / "paper.pdf"), "-"], capture_output=True,
                                   text=True, check=True).stdout.split()) if shutil.which("pdftotext") else ""
    if text:
        assert "does not reproduce the speed-up" in text and "and reproduces a speed-up" not in text
