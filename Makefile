# Two entry points (see README): `make figures` and `make test`. Each creates .venv if missing.
PY      ?= python3
VENV    ?= .venv
BIN     := $(VENV)/bin
PROFILE ?= quick

$(BIN)/.installed: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# CPU build of torch (on this project's machines it lies on local disk); any torch>=2.4 works.
	$(BIN)/pip install -q "torch==2.13.0"
	$(BIN)/pip install -q -e ".[research,trl,tensorboard,dev]"
	touch $@

.PHONY: install figures test lint
install: $(BIN)/.installed

figures: $(BIN)/.installed
	$(BIN)/python -m paper_figs all --profile $(PROFILE)

lint: $(BIN)/.installed
	$(BIN)/ruff check .
	$(BIN)/lint-imports

test: $(BIN)/.installed lint
	$(BIN)/python -m pytest
