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

# The browser test drives Debian's Chromium through Playwright; it never downloads a browser.
CHROMIUM ?= /usr/bin/chromium

.PHONY: help install browser lab test notebooks release grade bundle bench compile-check clean

help:
	@echo "make lab        start JupyterLab on the course (installs first if needed)"
	@echo "make test       run the whole test suite (installs first if needed)"
	@echo "make install    create .venv/ with everything (quick when nothing changed)"
	@echo "make notebooks  rebuild source/ notebooks from their text twins in notebooks/"
	@echo "make release    regenerate release/ from source/ with nbgrader"
	@echo "make grade      autograde the sample submissions in tests/submissions/ and print scores"
	@echo "make bundle     write dist/student-bundle.zip (release notebooks + course, no solutions)"
	@echo "make bench      kernel benchmarks (GPU), attention memory vs T and hidden-test run times (CPU) -> bench/"
	@echo "make browser    install Chromium for the browser test (apt-get, only as root and only if missing)"
	@echo "make compile-check  compile every Triton kernel for sm_75, sm_80, sm_86, sm_89, sm_90 and gfx942 without a GPU (FULL=1: the full grid)"

install: $(STAMP)

# Re-run pip only when the dependency list changed. torch is pinned in pyproject.toml
# to the CPU build, so nothing here pulls a CUDA wheel.
$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e ".[dev,cluster]"
	@touch $(STAMP)

# Chromium and its driver from Debian, for tests/browser. As root (CI, a fresh Debian
# machine) install them when missing; otherwise say how, and the browser test skips.
browser:
	@if [ -x "$(CHROMIUM)" ]; then \
		echo "browser: $(CHROMIUM) is here; tests/browser will use it"; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		echo "browser: installing Debian's chromium and chromium-driver for tests/browser"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium chromium-driver; \
	else \
		echo "browser: no $(CHROMIUM), so tests/browser will skip. To run it: sudo apt-get install chromium chromium-driver (Debian/Ubuntu), or CHROMIUM=/path/to/chromium make test"; \
	fi

# JupyterLab as a student sees it, from the committed lab-config/ (put first on JUPYTER_CONFIG_PATH;
# tests/browser uses it too): of nbgrader only the Validate button (its server extension and lab
# plugin; the assignment and course lists want an exchange this course has not), and no news
# pop-up. JupyterLab opens on the first release notebook; the root stays the course directory,
# where nbgrader_config.py lives.
LAB_CONFIG     := $(CURDIR)/lab-config
LAB_FIRST      := release/$(firstword $(ASSIGNMENTS))/$(firstword $(ASSIGNMENTS)).ipynb
# Jupyter refuses root unless told; a container's only user often is root.
LAB_AS_ROOT    := $(if $(filter 0,$(shell id -u)),--allow-root)

lab: install
	@echo "Open the URL printed below (with its token) in your browser; it opens on $(LAB_FIRST)."
	JUPYTER_CONFIG_PATH="$(LAB_CONFIG)$${JUPYTER_CONFIG_PATH:+:$$JUPYTER_CONFIG_PATH}" \
		$(BIN)/jupyter lab --no-browser $(LAB_AS_ROOT) --ServerApp.ip=127.0.0.1 --ServerApp.port=$(LAB_PORT) \
		--ServerApp.root_dir=$(CURDIR) --LabApp.default_url=/lab/tree/$(LAB_FIRST)

# Lint, then two runs: the tests spread over $(JOBS) processes; then nbval, whose cells share one
# kernel per notebook and so must run in order in one process.
test: install browser
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -n $(JOBS) tests
	$(BIN)/python -m pytest source

notebooks: install
	$(BIN)/python tools/build_notebooks.py

release: install
	$(BIN)/python -m tools.release $(ASSIGNMENTS)

# make grade                                       the sample submissions, as before
# make grade ASSIGNMENT=01_matmul_from_shapes SUBMISSIONS=DIR [WORKERS=N] [OUT=DIR] [SCHEDULER=tcp://host:8786]
#                                                  a class, through `python -m autograder grade`
grade: install
	@if [ -z "$(ASSIGNMENT)" ]; then \
		$(BIN)/python -m tools.samples; \
	elif [ -z "$(SUBMISSIONS)" ]; then \
		echo "make grade ASSIGNMENT=$(ASSIGNMENT) needs SUBMISSIONS=DIR (one folder per student, nbgrader's submitted/, or LMS zips)" >&2; exit 2; \
	else \
		$(BIN)/python -m autograder grade "$(ASSIGNMENT)" --submissions "$(SUBMISSIONS)" \
			$(if $(WORKERS),--workers $(WORKERS)) $(if $(OUT),--out "$(OUT)") $(if $(SCHEDULER),--scheduler "$(SCHEDULER)"); \
	fi

# Standard library and committed files only: no install step (tools/bundle.py needs Python 3.11+ for tomllib).
bundle:
	$(PYTHON) tools/bundle.py

bench: install
	$(BIN)/python -m tools.bench

# Every kernel (kernels/ and notebooks 03-11) compiled ahead of time for sm_75, sm_80, sm_86, sm_89, sm_90 and gfx942
# at GPU-sized shapes, in $(JOBS) processes; fails on a compile error, a spill, shared memory
# over the limit or an int32 offset overflow. FULL=1 runs the full grid (about 2 min at JOBS=2).
compile-check: install
	TRITON_INTERPRET=0 $(BIN)/python -m kernels.compile_check --jobs $(JOBS) $(if $(FULL),--full)

clean:
	rm -rf $(VENV) .pytest_cache gradebook.db
