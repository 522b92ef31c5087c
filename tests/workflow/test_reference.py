"""lowbw.workflow.reference: the reference build's provenance (make reference) and the comparison the workflow runs."""

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from lowbw.workflow.reference import compare, diff_text, main, save, sentences

ROOT = Path(__file__).resolve().parents[2]

REF = """E4 reached 90% accuracy in 12.5 s with top-k at 10 Mbit/s. The ring took 3 rounds.
An old sentence goes here.\fSection 2 says what the tree does."""
NEW = """E4 reached 90% accuracy in 13.1 s with top-k at 10 Mbit/s. The ring took 3 rounds.
A new sentence is here.\fSection 2 says what the tree does."""


def test_sentences_join_lines_pages_and_hyphenated_words():
    text = "The work-\nflow ran.\n1\n\fIt took\n 3.5 s. Done!\n2\n\f"  # two pages, numbered at their foot
    assert sentences(text) == ["The workflow ran.", "It took 3.5 s.", "Done!"]


def test_diff_text_sorts_sentences_into_numbers_added_removed():
    d = diff_text(REF, NEW)
    assert d.same == 2
    assert d.numbers == [("E4 reached # accuracy in # s with top-k at # Mbit/s.", ["12.5"], ["13.1"])]
    assert d.removed == ["An old sentence goes here."] and d.added == ["A new sentence is here."]
    assert not d.identical
    assert diff_text(REF, REF).identical


def _pdf(tmp_path, name, body):
    if not (shutil.which("pdflatex") and shutil.which("pdftotext")):
        pytest.skip("pdflatex or pdftotext missing (texlive, poppler-utils)")
    d = tmp_path / name
    d.mkdir()
    (d / "p.tex").write_text("\\documentclass{article}\\begin{document}" + body + "\\end{document}\n")
    subprocess.run(["pdflatex", "-interaction=nonstopmode", "-halt-on-error", "p.tex"], cwd=d, check=True,
                   capture_output=True, timeout=120)
    return d / "p.pdf"


def test_compare_two_pdfs_reports_pages_and_changed_numbers(tmp_path):
    ref = _pdf(tmp_path, "ref", "E4 reached 90\\% accuracy in 12.5 s. The ring took 3 rounds.")
    new = _pdf(tmp_path, "new", "E4 reached 90\\% accuracy in 13.1 s. The ring took 3 rounds.\\newpage Appendix A.")
    report = compare(ref, new)
    assert "pages: 2 (reference 1)" in report
    assert "E4 reached # accuracy in # s." in report and "12.5 -> 13.1" in report
    assert "+ Appendix A." in report
    assert "number for number" in compare(ref, ref)
    out = tmp_path / "build" / "compare.txt"
    assert main(["compare", str(ref), str(new), "--out", str(out)]) == 0  # moved numbers are reported, not failed
    assert "12.5 -> 13.1" in out.read_text()


def test_compare_without_a_reference_says_so(tmp_path):
    out = tmp_path / "compare.txt"
    assert main(["compare", str(tmp_path / "missing.pdf"), str(tmp_path / "new.pdf"), "--out", str(out)]) == 0
    assert "no reference PDF in the repository yet" in out.read_text()


def _run(tmp_path, **over):
    rec = {"command": ["snakemake", "--cores", "2", "--logger", "lowbw"], "started": "2026-01-01T00:00:00+00:00",
           "finished": "2026-01-01T00:20:00+00:00", "wall_s": 1200.0, "jobs": 212, "done": 212, "cores": 2,
           "load_1min": {"start": 0.1, "max": 2.3, "end": 1.9}, **over}
    path = tmp_path / "last_run.json"
    path.write_text(json.dumps(rec))
    return path


def test_save_keeps_the_pdf_with_its_provenance(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)  # the commit and the default config's profile are the checkout's
    pdf = tmp_path / "paper.pdf"
    pdf.write_bytes(b"%PDF-1.4 not a real one\n")
    to = tmp_path / "reference"
    info = save(pdf, to, _run(tmp_path))
    assert (to / "paper.pdf").read_bytes() == pdf.read_bytes()
    kept = json.loads((to / "BUILD.json").read_text())
    assert kept == info
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    assert kept["commit"] == head and isinstance(kept["dirty"], bool)
    assert kept["profile"] == "quick"
    assert kept["workflow"]["jobs"] == 212 and kept["workflow"]["wall_s"] == 1200.0
    assert kept["machine"]["cpus"] == os.cpu_count() and kept["pdf"]["bytes"] == pdf.stat().st_size
    assert kept["pdf"]["pages"] is None  # poppler cannot read this one


def test_save_refuses_an_unfinished_or_missing_run_and_a_stale_pdf(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    pdf = tmp_path / "paper.pdf"
    pdf.write_bytes(b"%PDF-1.4\n")
    to = tmp_path / "reference"
    with pytest.raises(ValueError, match="57 of its 212 jobs"):
        save(pdf, to, _run(tmp_path, done=57))
    with pytest.raises(ValueError, match="no workflow run on record"):
        save(pdf, to, tmp_path / "none.json")
    old = time.time() - 10 * 86400
    os.utime(pdf, (old, old))
    with pytest.raises(ValueError, match="older than the last workflow run"):
        save(pdf, to, _run(tmp_path, started=time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime())))
    assert not to.exists()
    assert main(["save", "--pdf", str(pdf), "--to", str(to), "--last-run", str(tmp_path / "none.json")]) == 2
    assert main(["save", "--pdf", str(pdf), "--to", str(to), "--last-run", str(tmp_path / "none.json"),
                 "--force"]) == 0
    assert json.loads((to / "BUILD.json").read_text())["workflow"] is None
