"""The paper's LaTeX sources (paper/): they compile against the generated-file contract, the build fails on
undefined references/citations, missing files and number macros the report did not write, every citation is in
refs.bib, the prose uses exactly the number macros of lowbw.report.catalog, and the Results/Discussion prose
types no measured numbers (those come from paper/generated/numbers.tex).

The build tests never write into paper/: they copy the sources into a temporary directory, write dummy
generated files there (nothing placeholder-like is ever shipped), and run latexmk with paper/latexmkrc.
They are skipped only where latexmk is not installed.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAPER = ROOT / "paper"
SECTIONS = PAPER / "sections"
EXPERIMENTS = [f"e{i}" for i in range(1, 13)]

# The contract with lowbw.report: files in paper/generated/ the sources require (paper/README.md).
LM_EXPERIMENTS = ["e4lm", "e9lm", "e10lm", "e9lmc"]  # E4, E9, E10 on the language model; E9 near convergence
CONTRACT = {"numbers.tex", "setup.tex", "tab_table6.tex"} | {
    f"{kind}_{e}.{ext}" for e in EXPERIMENTS + LM_EXPERIMENTS for kind, ext in (("tab", "tex"), ("fig", "pdf"))
}
# \input only if present (abstract and conclusion; stored GPU runs; the LM's recorded sweep, an appendix)
OPTIONAL = {"headline.tex", "gpu.tex", "appendix_e9lmc.tex"}

LATEXMK = shutil.which("latexmk")
needs_latexmk = pytest.mark.skipif(
    LATEXMK is None, reason="latexmk is not installed (apt-get install latexmk texlive-latex-recommended ...)")


def _tex_sources() -> dict[str, str]:
    files = [PAPER / "paper.tex", *sorted(SECTIONS.glob("*.tex"))]
    return {str(p.relative_to(PAPER)): p.read_text(encoding="utf-8") for p in files}


def _strip_comments(tex: str) -> str:
    return "\n".join(re.sub(r"(?<!\\)%.*", "", line) for line in tex.splitlines())


# ------------------------------------------------------------------------------------------ static checks
def test_sources_exist():
    assert (PAPER / "paper.tex").is_file()
    assert (PAPER / "refs.bib").is_file()
    assert (PAPER / "latexmkrc").is_file()
    names = {p.stem for p in SECTIONS.glob("*.tex")}
    for s in ("abstract", "introduction", "background", "methodology", "system", "experiments", "results",
              "discussion", "conclusion"):
        assert s in names, f"paper/sections/{s}.tex is missing"
        assert rf"\input{{sections/{s}}}" in (PAPER / "paper.tex").read_text(), f"paper.tex does not input {s}"


def test_generated_references_match_the_contract():
    """Every required generated file is used, nothing outside the contract is required."""
    required, optional = set(), set()
    for tex in _tex_sources().values():
        tex = _strip_comments(tex)
        for m in re.finditer(r"\\IfFileExists\{generated/([^}]+)\}", tex):
            optional.add(m.group(1))
        for m in re.finditer(r"\\(input|inputwidetable|includegraphics)(\[[^\]]*\])?\{generated/([^}]+)\}", tex):
            fname = m.group(3)
            if m.group(1) != "includegraphics" and not fname.endswith(".tex"):
                fname += ".tex"
            if m.group(1) == "includegraphics" and "." not in fname:
                fname += ".pdf"
            (optional if fname in optional else required).add(fname)
    assert required == CONTRACT, f"missing: {CONTRACT - required}, unexpected: {required - CONTRACT}"
    assert optional <= OPTIONAL
    readme = (PAPER / "README.md").read_text(encoding="utf-8")
    for f in sorted(CONTRACT | OPTIONAL):
        generic = re.sub(r"e[0-9]+(lm)?\.", lambda m: f"eN{m.group(1) or ''}.", f)
        assert f in readme or generic in readme, f"paper/README.md does not document generated/{f}"


def _results_tex() -> str:
    """results.tex with the section files it \\inputs put in their place (E10 and E1's latency axis)."""
    tex = (SECTIONS / "results.tex").read_text(encoding="utf-8")
    return re.sub(r"\\input\{sections/([a-z0-9_]+)\}",
                  lambda m: (SECTIONS / f"{m.group(1)}.tex").read_text(encoding="utf-8"), tex)


def test_results_subsections_follow_the_pattern():
    """Each subsection: framing, findings (what it says when the profile did not run it, then the prose quoting
    its own numbers), figure, table."""
    from lowbw.report.catalog import PREFIX

    tex = _strip_comments(_results_tex())
    for i, e in enumerate(EXPERIMENTS, start=1):
        sec = re.search(rf"\\subsection\{{E{i}:.*?(?=\\subsection|\Z)", tex, re.S)
        assert sec, f"no subsection for E{i}"
        body = sec.group(0).split(r"\subsubsection")[0]  # a later axis of the experiment has its own part
        assert rf"\label{{sec:{e}}}" in body
        not_run = body.index(rf"\ifmeasured{{\{PREFIX[e]}NotRun}}")
        own = [m.start() for m in re.finditer(rf"\\{PREFIX[e]}[A-Z]", body)]
        assert len(own) > 2 and not_run < min(own[1:]) and max(own) < body.index(r"\begin{figure")
        assert body.index(r"\begin{figure") < body.index(rf"\inputwidetable{{generated/tab_{e}}}")
        assert rf"\label{{fig:{e}}}" in body and rf"{{generated/fig_{e}}}" in body


def _number_macros_used() -> dict[str, set[str]]:
    """Every \\E<number>... macro the sources use (the report's number macros), per file."""
    from lowbw.report.catalog import BUILD_PREFIX, PREFIX, SYSTEM_PREFIX
    from lowbw.report.claims import PREFIX as CLAIM_PREFIX
    from lowbw.report.table6 import TABLE6_PREFIX

    pat = re.compile(r"\\((?:" + "|".join([*PREFIX.values(), SYSTEM_PREFIX, TABLE6_PREFIX, BUILD_PREFIX,
                                           CLAIM_PREFIX]) + r")[A-Za-z]*)")
    return {name: set(pat.findall(_strip_comments(tex))) for name, tex in _tex_sources().items()}


def test_prose_uses_exactly_the_catalogued_numbers():
    """Every number macro of the prose is one the report can write (lowbw.report.catalog), and every macro the
    report can write is quoted somewhere: a renamed or mistyped macro fails here, before any run."""
    from lowbw.report.catalog import MACROS as CATALOG
    from lowbw.report.table6 import TABLE6

    MACROS = {**CATALOG, **TABLE6}  # Table 6's module owns its macros (written whatever the profile ran)
    used = set().union(*_number_macros_used().values())
    assert used - set(MACROS) == set(), f"the prose uses macros the report never writes: {sorted(used - set(MACROS))}"
    assert set(MACROS) - used == set(), f"catalogued but quoted nowhere: {sorted(set(MACROS) - used)}"


def test_no_number_macro_swallows_the_space_after_it():
    """TeX drops the space after a control word: ``\\EElevenRegretWorst (`` printed "never(" and
    ``\\X and`` "neverand"; a number macro before a word or a bracket takes ``{}``."""
    from lowbw.report.catalog import MACROS

    bad = [f"{name}: \\{m[1]}{m[2]}{m[3]}" for name, tex in _tex_sources().items()
           for m in re.finditer(r"\\([A-Za-z]+)( +)([A-Za-z(\[])", _strip_comments(tex)) if m[1] in MACROS]
    assert bad == [], bad


def test_generated_dir_ships_no_files():
    """paper/generated/ is written by lowbw.report only; the repository holds nothing but .gitkeep there."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    out = subprocess.run(["git", "ls-files", "paper/generated"], cwd=ROOT, capture_output=True, text=True,
                         check=True).stdout.split()
    assert set(out) <= {"paper/generated/.gitkeep"}, f"files committed into paper/generated: {out}"


def _bib_entries() -> dict[str, str]:
    text = (PAPER / "refs.bib").read_text(encoding="utf-8")
    entries: dict[str, str] = {}
    for m in re.finditer(r"@(\w+)\s*\{\s*([^,\s]+)\s*,(.*?)\n\}", text, re.S):
        key = m.group(2)
        assert key not in entries, f"duplicate bib key {key}"
        entries[key] = m.group(1).lower() + "\n" + m.group(3)
    return entries


def test_every_citation_is_in_refs_bib():
    bib = _bib_entries()
    cited = set()
    for tex in _tex_sources().values():
        for m in re.finditer(r"\\cite[a-zA-Z]*\*?(\[[^\]]*\])*\{([^}]+)\}", _strip_comments(tex)):
            cited.update(k.strip() for k in m.group(2).split(","))
    missing = cited - set(bib)
    assert not missing, f"cited but not in refs.bib: {sorted(missing)}"


def test_bib_entries_are_complete():
    for key, body in _bib_entries().items():
        assert re.search(r"^\s*title\s*=", body, re.M), f"{key}: no title"
        assert re.search(r"^\s*year\s*=", body, re.M), f"{key}: no year"
        assert re.search(r"^\s*(author|key)\s*=", body, re.M), f"{key}: no author"
        assert not re.search(r"^\s*doi\s*=", body, re.M), f"{key}: DOIs are not given (none may be invented)"


def test_bib_covers_the_methods_and_sources():
    bib = _bib_entries()
    for key in ("he2016resnet", "simonyan2015vgg", "szegedy2017inception", "krizhevsky2009cifar",
                "lecun1998mnist", "xiao2017fashion", "dettmers2015eightbit", "dettmers2022optimizers",
                "lin2018dgc", "vogels2019powersgd", "seide2014onebit", "strom2015scalable", "wen2017terngrad",
                "alistarh2017qsgd", "bernstein2018signsgd", "karimireddy2019ef", "stich2018sparsified",
                "aji2017sparse", "goyal2017accurate", "smith2018dont", "kingma2015adam", "lin2020postlocal",
                "stich2019local", "ho2013ssp", "dean2012large", "li2014ps", "patarasuk2009bandwidth",
                "thakur2005mpich", "gibiansky2017bringing", "sergeev2018horovod", "li2020pytorch",
                "paszke2019pytorch", "tyagi2023flexible", "xu2021grace", "haland2020thesis",
                "douillard2023diloco", "hockney1994communication", "molder2021snakemake", "papermill",
                "waskom2021seaborn", "payberah2020lecture", "rae2023draft"):
        assert key in bib, f"refs.bib lacks {key}"


# Prose that may quote measurements only through generated macros/files.
NO_TYPED_NUMBERS = ("results.tex", "discussion.tex", "conclusion.tex", "abstract.tex")


def _strip_allowed(tex: str) -> str:
    tex = _strip_comments(tex)
    tex = re.sub(r"\\published\{[^{}]*(\{[^{}]*\}[^{}]*)*\}", " ", tex)  # numbers typed from a cited paper
    tex = re.sub(r"\\(cite[a-zA-Z]*|ref|eqref|label|input|inputwidetable|includegraphics|IfFileExists)"
                 r"(\[[^\]]*\])*\{[^}]*\}", " ", tex)
    return tex


def test_system_section_types_no_measurements():
    """The System section's engineering numbers (one-off checks) come from paper/measured/system.json through the
    report's Sys macros: no decimal, percentage or measured range is typed there (design constants are)."""
    tex = _strip_allowed((SECTIONS / "system.tex").read_text(encoding="utf-8"))
    tex = re.sub(r"\\begin\{tikzpicture\}.*?\\end\{tikzpicture\}", " ", tex, flags=re.S)  # drawing coordinates
    bad = [m.group(0) for pat in (r"\d+\.\d+", r"\d+\s*\\,?\\%", r"\d+--\d+", r"\bquarter\b|\btenth\b")
           for m in re.finditer(pat, tex)]
    assert not bad, f"system.tex types measured numbers outside the Sys macros: {bad}"


@pytest.mark.parametrize("name", NO_TYPED_NUMBERS)
def test_no_typed_measurements(name):
    tex = _strip_allowed((SECTIONS / name).read_text(encoding="utf-8"))
    bad = []
    for pat in (r"\d+\.\d+", r"\d+\s*\\%", r"\d+\s*\\times", r"\d+\s*\$?\\times", r"\d+\s*(Mbit|Gbit|MB|GB|ms)\b",
                r"\d+\s*(x|s)\b"):
        bad += [m.group(0) for m in re.finditer(pat, tex)]
    assert not bad, f"{name} types numbers outside \\published{{}}/generated files: {bad}"


def test_methodology_states_the_corrections():
    tex = (SECTIONS / "methodology.tex").read_text(encoding="utf-8")
    assert r"|g_i+Z_{t,i}|\ge\alpha_{\mathrm{s}}" in tex  # magnitude, not the signed value
    assert r"\lfloor\log_2(E_0/E_e)\rfloor" in tex  # the prose's doubling rule (default)
    assert r"2^{\lfloor E_0/E_e\rfloor-1}" in tex  # the draft's literal formula, stated as an option
    assert r"\frac{B_e\,L_W\,H}{N\,(H+L_W-1)}" in tex  # household effective batch (thesis App. A)
    for label in ("eq:ps", "eq:ring", "eq:tree", "eq:lb", "eq:artring", "eq:arttree", "eq:step", "eq:tta",
                  "eq:tmin", "eq:linq", "eq:nlq", "eq:ef"):
        assert rf"\label{{{label}}}" in tex, label


# ------------------------------------------------------------------------------------------ builds
def _minimal_pdf(width: int = 432, height: int = 216) -> bytes:
    """A valid one-page PDF (a grey rectangle) with a correct xref table; stands in for a figure."""
    content = f"0.6 g 18 18 {width - 36} {height - 36} re f".encode()
    objs = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 {width} {height}] /Contents 4 0 R /Resources << >> >>"
        .encode(),
        b"<< /Length " + str(len(content)).encode() + b" >>\nstream\n" + content + b"\nendstream",
    ]
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for i, body in enumerate(objs, start=1):
        offsets.append(len(out))
        out += f"{i} 0 obj\n".encode() + body + b"\nendobj\n"
    xref = len(out)
    out += f"xref\n0 {len(objs) + 1}\n0000000000 65535 f \n".encode()
    for off in offsets:
        out += f"{off:010d} 00000 n \n".encode()
    out += f"trailer\n<< /Size {len(objs) + 1} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n".encode()
    return bytes(out)


# a generated table file that holds a second table: its label (paper/README.md)
EXTRA_TABLES = {"e11": ("tab:e11-walltime",)}


def _dummy_table(label: str, caption: str) -> str:
    return "\n".join([
        r"\begin{table}[t]", r"\centering", r"\small", rf"\caption{{{caption}}}", rf"\label{{{label}}}",
        r"\begin{tabular}{lrr}", r"\toprule", r"setting & mean & std \\", r"\midrule",
        r"dummy a & 1.00 & 0.10 \\", r"dummy b & 2.00 & 0.20 \\", r"\bottomrule", r"\end{tabular}",
        r"\end{table}", ""])


def write_dummy_generated(gen: Path, headline: bool = False, numbers: str = "all", claims: str = "1") -> None:
    """Dummy files honouring the contract of paper/README.md (test use only, in a temporary copy).
    ``numbers``: "all" defines every catalogued macro but the ``...NotRun`` ones (every experiment ran with
    every setting), "none" only the ``...NotRun`` ones (no experiment ran); any other value is the name of one
    macro to leave out of "all". ``claims``: every front claim's verdict (lowbw.report.claims), where defined."""
    from lowbw.report.catalog import MACROS, SYSTEM
    from lowbw.report.claims import SENTENCES
    from lowbw.report.table6 import TABLE6

    gen.mkdir(parents=True, exist_ok=True)
    ran = numbers != "none"
    # the System section's recorded checks and Table 6's reproduction are written whatever ran
    names = [n for n in [*MACROS, *TABLE6] if (n.endswith("NotRun") != ran or n in SYSTEM or n in TABLE6)
             and n != numbers]
    defs = "".join(f"\\newcommand{{\\{n}}}{{{claims if n in SENTENCES else '1.23'}}}\n" for n in names)
    (gen / "numbers.tex").write_text("% dummy numbers\n\\newcommand{\\DummyNumber}{42}\n" + defs)
    (gen / "setup.tex").write_text(_dummy_table("tab:setup", "Dummy machine and software."))
    (gen / "tab_table6.tex").write_text(_dummy_table("tab:table6", "Dummy Table 6."))
    pdf = _minimal_pdf()
    for e in EXPERIMENTS + LM_EXPERIMENTS:
        (gen / f"tab_{e}.tex").write_text(_dummy_table(f"tab:{e}", f"Dummy results of {e.upper()}.")
                                          + "".join(_dummy_table(x, "Dummy.") for x in EXTRA_TABLES.get(e, ())))
        (gen / f"fig_{e}.pdf").write_bytes(pdf)
    if headline:
        (gen / "headline.tex").write_text("Dummy headline with \\DummyNumber{} in it.\n")


def _latexmk(cwd: Path, main: str) -> subprocess.CompletedProcess:
    return subprocess.run([LATEXMK, "-pdf", "-interaction=nonstopmode", "-halt-on-error", main], cwd=cwd,
                          capture_output=True, text=True, errors="replace", timeout=600)


def _tiny_project(tmp_path: Path, body: str, bib: str | None = None) -> Path:
    d = tmp_path / "tiny"
    d.mkdir()
    shutil.copy(PAPER / "latexmkrc", d / "latexmkrc")
    pre = [r"\documentclass{article}", r"\usepackage{graphicx}", r"\usepackage[round]{natbib}",
           r"\bibliographystyle{plainnat}", r"\begin{document}", body]
    if bib is not None:
        (d / "refs.bib").write_text(bib)
        pre.append(r"\bibliography{refs}")
    (d / "tiny.tex").write_text("\n".join([*pre, r"\end{document}", ""]))
    return d


BIB = "@misc{known, author = {A. Author}, title = {Known}, year = {2020}}\n"


@needs_latexmk
def test_latexmkrc_passes_a_clean_document(tmp_path):
    d = _tiny_project(tmp_path, "\\section{A}\\label{sec:a} See Section~\\ref{sec:a} and \\citet{known}.", BIB)
    r = _latexmk(d, "tiny.tex")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert (d / "build" / "tiny.pdf").is_file()


@needs_latexmk
@pytest.mark.parametrize("body, bib", [
    ("See Section~\\ref{sec:nowhere}.", None),                            # undefined reference
    ("As shown by \\citet{unknown}.", BIB),                               # undefined citation
    ("\\includegraphics{generated/fig_missing}", None),                   # missing figure
    ("\\input{generated/findings_missing}", None),                        # missing generated prose
    ("\\section{A}\\label{sec:a}\\section{B}\\label{sec:a}", None),       # label defined twice
], ids=["undefined-ref", "undefined-cite", "missing-figure", "missing-input", "duplicate-label"])
def test_latexmkrc_fails_the_build(tmp_path, body, bib):
    d = _tiny_project(tmp_path, body, bib)
    r = _latexmk(d, "tiny.tex")
    assert r.returncode != 0, "latexmk succeeded although the document is broken:\n" + r.stdout[-2000:]
    # A second call finds nothing to rebuild and must still fail (the check reads the final log).
    if (d / "build" / "tiny.log").is_file():
        assert _latexmk(d, "tiny.tex").returncode != 0


@needs_latexmk
def test_paper_builds_against_the_contract(tmp_path):
    """The real sources + dummy generated files -> build/paper.pdf, with a clean log."""
    work = tmp_path / "paper"
    shutil.copytree(PAPER, work, ignore=shutil.ignore_patterns("build", "generated"))
    write_dummy_generated(work / "generated")
    r = _latexmk(work, "paper.tex")
    log = (work / "build" / "paper.log").read_text(errors="replace") if (work / "build" / "paper.log").exists() \
        else ""
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    assert (work / "build" / "paper.pdf").stat().st_size > 10_000
    assert not re.search(r"undefined|multiply[- ]defined|not found", log, re.I), \
        [ln for ln in log.splitlines() if re.search(r"undefined|multiply|not found", ln, re.I)]
    overfull = [float(m.group(1)) for m in re.finditer(r"Overfull \\hbox \(([\d.]+)pt too wide\)", log)]
    assert all(x < 10 for x in overfull), f"overfull lines in the sources: {overfull}"


@needs_latexmk
def test_paper_builds_when_no_experiment_ran(tmp_path):
    """A profile without data: every findings paragraph says so, and the paper still builds."""
    work = tmp_path / "paper"
    shutil.copytree(PAPER, work, ignore=shutil.ignore_patterns("build", "generated"))
    write_dummy_generated(work / "generated", numbers="none")
    r = _latexmk(work, "paper.tex")
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]


@needs_latexmk
@pytest.mark.parametrize("left_out", ["EFourTttDense", "ESevenAccFixedTenth"])
def test_paper_build_fails_on_a_number_the_report_did_not_write(tmp_path, left_out):
    """A macro the prose quotes outside \\ifmeasured, absent from numbers.tex, stops the build."""
    work = tmp_path / "paper"
    shutil.copytree(PAPER, work, ignore=shutil.ignore_patterns("build", "generated"))
    write_dummy_generated(work / "generated", numbers=left_out)
    r = _latexmk(work, "paper.tex")
    log = (work / "build" / "paper.log").read_text(errors="replace")
    assert r.returncode != 0 and "Undefined control sequence" in log and left_out in log


@needs_latexmk
def test_paper_builds_with_the_optional_headline(tmp_path):
    work = tmp_path / "paper"
    shutil.copytree(PAPER, work, ignore=shutil.ignore_patterns("build", "generated"))
    write_dummy_generated(work / "generated", headline=True)
    r = _latexmk(work, "paper.tex")
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]


@pytest.mark.parametrize("ran, absent", [("EOneLatSettings", "EOneLatNotRun"), ("EEightCells", "EEightNotRun")])
def test_discussion_reads_with_and_without_e1_and_e8(ran, absent):
    """The default profile measures neither E1 nor E8 (their files exist only where kept or in the medium
    profile): the Discussion's sentences that lean on them are conditional, one for each case."""
    from lowbw.report.claims import SENTENCES

    tex = _strip_comments((SECTIONS / "discussion.tex").read_text(encoding="utf-8"))
    # where it ran, a sentence guarded by its macro or a claim resting on it (lowbw.report.claims)
    resting = [f"\\claim{{\\{c}}}" for c, claim in SENTENCES.items() if ran in claim.evidence]
    assert f"\\ifmeasured{{\\{ran}}}" in tex or any(r in tex for r in resting), f"no sentence for \\{ran}"
    assert f"\\ifmeasured{{\\{absent}}}" in tex, f"discussion.tex has no sentence for \\{absent}"
    assert "can be trusted to about the error E8 reports" not in tex
