# Developer entry points. README gives two: `make demo` and `make test`.
PYTHON ?= python3
VENV ?= .venv
PIP := $(VENV)/bin/pip
# vdk-core's sdist needs setuptools<81 to build and to run; torch 2.13.0 is the CPU wheel on disk.
export PIP_CONSTRAINT := $(CURDIR)/constraints.txt
export PIP_BUILD_CONSTRAINT := $(CURDIR)/constraints.txt
export PIP_DISABLE_PIP_VERSION_CHECK := 1

DEMO_JOB ?= examples/ddp-nccl

.PHONY: install demo test clean

install: $(VENV)/.installed

$(VENV)/.installed: setup.cfg pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q 'setuptools<80.9' wheel
	$(PIP) install -q -e '.[dev]' torch==2.13.0 'transformers>=5,<6' accelerate
	$(PIP) check
	touch $@

demo: install
	$(VENV)/bin/vdk run $(DEMO_JOB)

# pytest exits 5 when it collected nothing: that is not a failure of the code under test.
test: install
	$(VENV)/bin/python -m pytest tests; rc=$$?; if [ $$rc -eq 5 ]; then rc=0; fi; exit $$rc

clean:
	rm -rf $(VENV) build *.egg-info src/*.egg-info .pytest_cache .hypothesis
