# Backprop for Kernel Writers — every target documented in README.md.
# Commands run with .venv/bin first on PATH: nbgrader calls `alembic` by name when it
# creates a gradebook, and fails without it.

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
BIN    := $(CURDIR)/$(VENV)/bin
STAMP  := $(VENV)/.installed
export PATH := $(BIN):$(PATH)

ASSIGNMENTS := $(patsubst source/%/,%,$(sort $(wildcard source/[0-9][0-9]_*/)))
LAB_PORT ?= 8888
# Test processes: the slow parts (nbgrader round trips, notebooks) are independent.
JOBS ?= 2

.PHONY: help install lab test notebooks release grade bundle clean

help:
	@echo "make lab        start JupyterLab on the course (installs first if needed)"
	@echo "make test       run the whole test suite (installs first if needed)"
	@echo "make install    create .venv/ with everything (quick when nothing changed)"
	@echo "make notebooks  rebuild source/ notebooks from their text twins in notebooks/"
	@echo "make release    regenerate release/ from source/ with nbgrader"
	@echo "make grade      autograde the sample submissions in tests/submissions/ and print scores"
	@echo "make bundle     write dist/student-bundle.zip (release notebooks + course, no solutions)"

install: $(STAMP)

# Re-run pip only when the dependency list changed. torch is pinned in pyproject.toml
# to the CPU build, so nothing here pulls a CUDA wheel.
$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e ".[dev]"
	@touch $(STAMP)

lab: install
	@echo "Open the URL printed below (with its token) in your browser; start with release/00_vjp_contract."
	$(BIN)/jupyter lab --ServerApp.ip=127.0.0.1 --ServerApp.port=$(LAB_PORT) --no-browser --ServerApp.root_dir=$(CURDIR)

test: install
	$(BIN)/python -m pytest -n $(JOBS)

notebooks: install
	$(BIN)/python tools/build_notebooks.py

release: install
	$(BIN)/python tools/release.py $(ASSIGNMENTS)

grade: install
	$(BIN)/python -m autograder.samples

bundle: install
	$(BIN)/python tools/bundle.py

clean:
	rm -rf $(VENV) .pytest_cache gradebook.db
