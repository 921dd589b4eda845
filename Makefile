# The two commands: `make demo` and `make test`. Both create .venv when it is missing.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test lint venv clean

venv: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/drive demo

# Two workers, one test file each at a time (module fixtures are built once; files share nothing);
# each worker runs torch on one thread (tests/conftest.py), so two files use the two cores.
test: lint
	$(PY) -m pytest -q -n 2 --dist loadfile

# ruff (pinned in the dev extra): the lint rules and the formatting in pyproject.toml
lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

clean:
	rm -rf runs lightning_logs .pytest_cache
