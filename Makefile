# Developer entry points. README gives two: `make demo` and `make test`; `make test-fast` is the quick loop.
PYTHON ?= python3
VENV ?= .venv
PIP := $(VENV)/bin/pip
# vdk-core's sdist needs setuptools<81 to build and to run; torch 2.13.0 is the CPU wheel on disk.
export PIP_CONSTRAINT := $(CURDIR)/constraints.txt
export PIP_BUILD_CONSTRAINT := $(CURDIR)/constraints.txt
export PIP_DISABLE_PIP_VERSION_CHECK := 1
# The environments are installed by uv (seconds, where pip takes minutes; the same versions, measured). uv reads
# neither pip's constraints nor its configuration: the constraints and pip's directories of wheels (torch's CPU
# build lies there) are handed over. uv compiles bytecode only when asked: with PYTHONDONTWRITEBYTECODE set (as on
# CI), every process would compile torch from source.
export UV_CONSTRAINT := $(CURDIR)/constraints.txt
export UV_BUILD_CONSTRAINT := $(CURDIR)/constraints.txt
PIP_FIND_LINKS = $(shell $(PYTHON) -m pip config get global.find-links 2>/dev/null)
uv_install = $(1)/bin/pip install -q uv && $(1)/bin/uv pip install -q --compile-bytecode --python $(1)/bin/python \
	$(foreach links,$(PIP_FIND_LINKS),--find-links $(links))

DEMO_JOB ?= examples/ddp-nccl

# A second environment with the Control Service CLI (vdk-plugin-control-cli), which needs pydantic<2
# and so cannot live next to transformers 5: the wrapped verbs are tested there.
CS_VENV ?= .venv-cs

# What ruff checks and formats (config in pyproject.toml); `make test` stops on any finding.
LINTED := src tests benchmarks functional_tests

.PHONY: install install-cs demo lint format docs crds test test-fast gpu-check-prepare clean

install: $(VENV)/.installed

$(VENV)/.installed: setup.cfg pyproject.toml constraints.txt Makefile
	$(PYTHON) -m venv $(VENV)
	$(call uv_install,$(VENV)) 'setuptools<80.9' wheel -e '.[dev]' torch==2.13.0 'transformers>=5,<6' accelerate \
		'lightning>=2.5,<3'
	$(PIP) check
	touch $@

install-cs: $(CS_VENV)/.installed

$(CS_VENV)/.installed: setup.cfg pyproject.toml constraints.txt
	$(PYTHON) -m venv $(CS_VENV)
	$(call uv_install,$(CS_VENV)) 'setuptools<80.9' wheel -e '.[dev,control-service]' torch==2.13.0
	$(CS_VENV)/bin/pip check
	touch $@

demo: install
	$(VENV)/bin/vdk run $(DEMO_JOB)

# mypy checks src/ (pyproject.toml [tool.mypy]); its cache (.mypy_cache/) makes a rerun take seconds, a first run
# about half a minute of CPU.
lint: install
	$(VENV)/bin/ruff check $(LINTED)
	$(VENV)/bin/ruff format --check $(LINTED)
	$(VENV)/bin/lint-imports
	$(VENV)/bin/mypy

# Fixes what ruff can fix and formats the tree.
format: install
	$(VENV)/bin/ruff check --fix $(LINTED)
	$(VENV)/bin/ruff format $(LINTED)

# The documentation site (docs/, mkdocs.yml) into site/. --strict: a broken link or anchor, or a page
# missing from nav, fails. Offline: no plugin of the build reaches the network. The variable quiets
# mkdocs-material's notice about MkDocs 2.0.
docs: install
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

# The upstream CRDs the schema tests validate against (pinned in tests/support/upstream_crds.py): taken
# from VDK_ML_TRAINING_CRD_DIR or ../shared/crds/, else downloaded once into .cache/upstream-crds/.
# Offline it says so and those tests skip; a file that differs from its pin fails the run.
crds: install
	$(VENV)/bin/python -m tests.support.upstream_crds

# Lint first: a lint or format error fails the run before any test; then the documentation site (a broken
# link fails it). pytest exits 5 when it collected nothing: that is not a failure of the code under test.
# Each environment runs what it can: tests that need the Control Service CLI only in .venv-cs, those
# that need transformers only in .venv (deselected, not skipped: the only skips are real-cluster tests).
# Two workers (pytest-xdist), each test file on one: most tests wait on processes, servers and containers. The
# files are handed out in the order given: the longest (functional, then integration) first, the many short unit
# files last, where they fill the gaps (the other way round, one worker ran the longest file alone at the end).
# The slowest tests are listed at the end: the whole run must stay under 30 minutes on an idle machine.
# The project's own modules are compiled first: uv compiles what it installs, not an editable project, and with
# PYTHONDONTWRITEBYTECODE set (as on CI) every `vdk` the tests start would compile them again (half its start).
test: install lint docs install-cs crds
	$(VENV)/bin/python -m compileall -q src tests functional_tests
	$(VENV)/bin/python -m pytest functional_tests tests/integration tests/unit -m "not needs_control_cli" -n 2 \
	  --dist loadfile --durations=25; rc=$$?; \
	if [ $$rc -eq 5 ]; then rc=0; fi; \
	$(CS_VENV)/bin/python -m pytest tests -m "(control_cli or needs_control_cli) and not needs_transformers"; \
	cs=$$?; if [ $$cs -eq 5 ]; then cs=0; fi; \
	if [ $$rc -ne 0 ]; then exit $$rc; fi; exit $$cs

# The quick loop while changing code: the unit tests (tests/unit/: no process, server or connection), in
# well under a minute; `make test` runs everything CI runs.
test-fast: install
	$(VENV)/bin/python -m pytest tests/unit -q -m "not needs_control_cli"

# The real-GPU check (docs/gpu-verification.md): the files it carries to a machine with a GPU (the project's wheel
# and the wheels that machine lacks, for its Python 3.12) into .gpu-carry/, their size against the 64 MiB a call
# takes, and the exact device call that runs functional_tests/gpu/run-on-gpu.sh there.
gpu-check-prepare: install
	$(VENV)/bin/python -m functional_tests.gpu.prepare

clean:
	rm -rf $(VENV) $(CS_VENV) build *.egg-info src/*.egg-info .pytest_cache .hypothesis .cache site .gpu-carry gpu-check-out .mypy_cache
