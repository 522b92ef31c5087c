# lowbw: two commands on a fresh machine (Debian/Ubuntu; root installs the system packages itself).
#
#   make          set up what is missing, then run every experiment and build paper/build/paper.pdf
#   make test     set up what is missing, then ruff and the test suite
#   make reference keep paper/build/paper.pdf as paper/reference/paper.pdf, with its provenance (BUILD.json)
#   make measure  like make, but every host measurement (E1, E2, E3, E8's MLP and LM cells) is made on this
#                 machine where runs/bench/ lacks it (root, ~1.5 h on 2 cores) instead of read from the
#                 repository's paper/measured/host; the paper's captions then name this machine
#
# Set-up = a virtual environment in .venv with lowbw[dev] (torch 2.13.0: the local CPU wheel on CPU-only
# machines), and LaTeX + iproute2 + poppler from apt when run as root (otherwise the missing commands are
# named, with the apt-get line to run). It is redone only when pyproject.toml changes.
# Variables: CORES (snakemake --cores, default: all), PROFILE (e.g. PROFILE=config/profiles/full),
# SMK (extra snakemake arguments), PYTEST (extra pytest arguments), PROGRESS (see below).

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := all
.PHONY: all test setup system-packages clean-venv reference measure

PYTHON ?= python3
VENV := .venv
STAMP := $(VENV)/.lowbw-installed
CORES ?= $(shell nproc)
PROFILE ?=
SMK ?=
PYTEST ?=
# one progress line (jobs done, left, estimated time left; lowbw.workflow.progress) instead of Snakemake's job log, which
# stays in .snakemake/log/; PROGRESS= shows Snakemake's own output
PROGRESS ?= --logger lowbw
APT_PACKAGES := latexmk texlive-latex-recommended texlive-science texlive-pictures texlive-fonts-recommended \
                texlive-plain-generic iproute2 poppler-utils
# command -> the Debian package that provides it
NEEDED_COMMANDS := latexmk:latexmk pdflatex:texlive-latex-recommended ip:iproute2 tc:iproute2 pdftotext:poppler-utils

all: setup
	. $(VENV)/bin/activate && PYTHONPATH=$(CURDIR)/lowbw/snakemake_logger$${PYTHONPATH:+:$$PYTHONPATH} \
	  snakemake --cores $(CORES) $(if $(PROFILE),--profile $(PROFILE)) $(PROGRESS) $(SMK)
	@echo "paper: paper/build/paper.pdf   results: runs/"

# every host measurement of lowbw.workflow.hoststore measured here (bench: measure listing all of them)
MEASURE_ALL := --config 'bench={measure: [collectives, collectives_latency, compressors, models, e2e, e2e_lm]}'
measure:
	$(MAKE) all SMK="$(MEASURE_ALL) $(SMK)"

# keep the paper just built as the repository's reference build (paper/reference/: the PDF and BUILD.json with
# the commit, date, profile, machine, load, jobs and wall time of the run); refuses an unfinished run. Commit it
# only from a complete run of the default profile (make on a clean clone).
reference: setup
	. $(VENV)/bin/activate && python -m lowbw.workflow.reference save

test: setup
	. $(VENV)/bin/activate && ruff check . && pytest -q $(PYTEST)

setup: system-packages $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	. $(VENV)/bin/activate && pip install -q --upgrade pip && pip install -q -e ".[dev]"
	@# torch must stay the pinned CPU wheel on CPU machines: no dependency may pull a CUDA build
	@if [ ! -e /dev/nvidia0 ] && . $(VENV)/bin/activate && pip list 2>/dev/null | grep -qiE '^nvidia-|^torch .*\+cu'; then \
	  echo "make setup: a CUDA torch or nvidia-* package was pulled in on a machine without a GPU" >&2; exit 1; fi
	@# fill the advisor's cache (parameter shapes, payload sizes per compressor; ~/.cache/lowbw) for the README's
	@# models, so that `lowbw advise` answers without importing torch from its first call
	. $(VENV)/bin/activate && for m in mlp resnet20 gpt-small; do \
	  python -m lowbw advise --model $$m --workers 2 --rate 1gbit >/dev/null; done
	touch $@

system-packages:
	@missing=""; for pair in $(NEEDED_COMMANDS); do \
	  command -v "$${pair%%:*}" >/dev/null || missing="$$missing $${pair#*:}"; done; \
	if [ -z "$$missing" ]; then exit 0; fi; \
	missing=$$(printf '%s\n' $$missing | sort -u | tr '\n' ' '); \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  echo "make setup: apt-get install (LaTeX, iproute2, poppler)"; \
	  export DEBIAN_FRONTEND=noninteractive; apt-get update -qq; \
	  apt-get install -y -qq --no-install-recommends $(APT_PACKAGES) >/dev/null; \
	else \
	  echo "make setup: missing $$missing; install them with: sudo apt-get install -y --no-install-recommends $(APT_PACKAGES)" >&2; \
	  echo "  (without them: no paper PDF; the testbed falls back to loopback; their tests skip, naming why)" >&2; \
	fi

clean-venv:
	rm -rf $(VENV)
