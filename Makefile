# Entry points (see README): `make figures`, `make test` and `make site`. Each creates .venv if missing.
PY      ?= python3
VENV    ?= .venv
BIN     := $(VENV)/bin
PROFILE ?= quick

$(BIN)/.installed: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# CPU build of torch (on this project's machines it lies on local disk); any torch>=2.4 works.
	$(BIN)/pip install -q "torch==2.13.0"
	# cluster (Ray) too: tests/sim/test_cluster.py checks on a local 2-CPU cluster that --executor ray writes the same CSVs
	# site: the course (make site; tests/test_notebooks.py builds it from the notebooks it executes)
	$(BIN)/pip install -q -e ".[research,trl,tensorboard,cluster,site,dev]"
	touch $@

.PHONY: install figures test lint site mutation mutation-sample
install: $(BIN)/.installed

figures: $(BIN)/.installed
	$(BIN)/python -m paper_figs all --profile $(PROFILE)

# The course: every notebook executed (a cell error fails the build), rendered with README's findings and RESULTS.md
# into site/ (static HTML; open site/index.html). `make test` executes the notebooks once and builds the site from them.
site: $(BIN)/.installed
	$(BIN)/python -m course.build --out site

lint: $(BIN)/.installed
	$(BIN)/ruff check .
	$(BIN)/lint-imports

test: $(BIN)/.installed lint
	$(BIN)/python -m pytest

# Mutation testing (mutmut, config in pyproject.toml; theory/MUTANTS.md has the measured scores). Not part of `make test`.
# Each mutant is judged by the fast tests only (`-m "not heavy"` in [tool.mutmut]), fastest first, stopping at the
# first failure. `make mutation`: every mutant of the six files (5 503), one module at a time, then the score per file
# ("complete" where every mutant was judged). On the shared 2-core machine (load 5-9) it judged 25-100 mutants a
# minute (theory/MUTANTS.md), a few hours for all six files there.
# `make mutation-sample`: a seeded sample of MUTATION_SAMPLE mutants per file, scored with a 95 % interval for each
# file's score.
MUTATE_MODULES ?= gac.control theory.stability theory.momentum theory.gac_stability theory.cosine theory.convergence
MUTATION_SAMPLE ?= 50
MUTMUT := OMP_NUM_THREADS=1 nice -n 5 $(BIN)/mutmut
mutation: $(BIN)/.installed
	for module in $(MUTATE_MODULES); do \
		start=$$(date +%s); \
		$(MUTMUT) run --max-children 2 "$$module.*" > /dev/null || exit 1; \
		echo "$$module: $$(( $$(date +%s) - start )) s"; \
	done
	$(BIN)/mutmut results --all true | $(BIN)/python -m theory.mutation_sample score

mutation-sample: $(BIN)/.installed
	# the first run generates every mutant and the test-to-function map; its one named mutant is in any sample's file
	$(MUTMUT) run --max-children 2 theory.stability.x_stability_boundary_closed_form__mutmut_1 > /dev/null
	$(BIN)/python -m theory.mutation_sample pick $(MUTATION_SAMPLE) > mutants/sample.txt
	start=$$(date +%s); $(MUTMUT) run --max-children 2 $$(cat mutants/sample.txt) > /dev/null || exit 1; \
		echo "sample of $(MUTATION_SAMPLE) per file: $$(( $$(date +%s) - start )) s"
	$(BIN)/mutmut results --all true | $(BIN)/python -m theory.mutation_sample score mutants/sample.txt
