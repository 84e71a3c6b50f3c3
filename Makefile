# Entry points (see README): `make figures`, `make test` and `make site`. Each creates .venv if missing.
PY      ?= python3
VENV    ?= .venv
BIN     := $(VENV)/bin
PROFILE ?= quick

# `make install`: what the figures need. The wheel holds the library `gac` alone; the research code (theory, sim,
# runtime, experiments, paper_figs, course, benchmarks) runs from this checkout, which a .pth file puts on the venv's
# path (so it imports from any folder: notebooks, worker processes, Ray workers).
$(BIN)/.installed: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# CPU build of torch (on this project's machines it lies on local disk); any torch>=2.4 works.
	$(BIN)/pip install -q "torch==2.13.0"
	$(BIN)/pip install -q -e ".[research]"
	$(BIN)/python -c "import pathlib, sysconfig; pathlib.Path(sysconfig.get_paths()['purelib'], 'gac_lab_checkout.pth').write_text('$(CURDIR)\n')"
	touch $@

# `make site`: the course's notebooks and MkDocs.
$(BIN)/.installed-site: $(BIN)/.installed
	$(BIN)/pip install -q -e ".[site]"
	touch $@

# `make notebooks`: Jupyter, then JupyterLab on notebooks/.
$(BIN)/.installed-notebooks: $(BIN)/.installed
	$(BIN)/pip install -q -e ".[notebooks]"
	touch $@

# `make test`: every extra the tests exercise: trl (the integration), cluster (tests/runtime/test_cluster.py
# checks on a local 2-CPU Ray cluster that --executor ray writes the same CSVs), site (tests/test_notebooks.py builds
# the course), dev (pytest, ruff, import-linter, mutmut).
$(BIN)/.installed-test: $(BIN)/.installed
	$(BIN)/pip install -q -e ".[research,trl,cluster,site,dev]"
	touch $@

.PHONY: install figures test lint check-data site notebooks mutation mutation-sample
install: $(BIN)/.installed

figures: $(BIN)/.installed
	$(BIN)/python -m paper_figs all --profile $(PROFILE)

# The course: every notebook executed (a cell error fails the build), rendered with README's findings and RESULTS.md
# into site/ (static HTML; open site/index.html). `make test` executes the notebooks once and builds the site from them.
site: $(BIN)/.installed-site
	$(BIN)/python -m course.build --out site

notebooks: $(BIN)/.installed-notebooks
	$(BIN)/jupyter lab notebooks/

lint: $(BIN)/.installed-test
	$(BIN)/ruff check .
	$(BIN)/lint-imports

# The committed data (docs/data): each summary recomputed from its committed runs, each table against theory.
check-data: $(BIN)/.installed-test
	$(BIN)/python -m pytest tests/committed

# The suite on TEST_WORKERS processes (pytest-xdist; "logical": one per CPU), each test file in one worker (module
# fixtures made once), the longest files first (tests/conftest.py LONGEST_FIRST), one torch thread each: the
# parallelism is the workers'.
TEST_WORKERS ?= logical
test: $(BIN)/.installed-test lint check-data
	OMP_NUM_THREADS=1 $(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder --ignore=tests/committed

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
mutation: $(BIN)/.installed-test
	for module in $(MUTATE_MODULES); do \
		start=$$(date +%s); \
		$(MUTMUT) run --max-children 2 "$$module.*" > /dev/null || exit 1; \
		echo "$$module: $$(( $$(date +%s) - start )) s"; \
	done
	$(BIN)/mutmut results --all true | $(BIN)/python -m theory.mutation_sample score

mutation-sample: $(BIN)/.installed-test
	# the first run generates every mutant and the test-to-function map; its one named mutant is in any sample's file
	$(MUTMUT) run --max-children 2 theory.stability.x_stability_boundary_closed_form__mutmut_1 > /dev/null
	$(BIN)/python -m theory.mutation_sample pick $(MUTATION_SAMPLE) > mutants/sample.txt
	start=$$(date +%s); $(MUTMUT) run --max-children 2 $$(cat mutants/sample.txt) > /dev/null || exit 1; \
		echo "sample of $(MUTATION_SAMPLE) per file: $$(( $$(date +%s) - start )) s"
	$(BIN)/mutmut results --all true | $(BIN)/python -m theory.mutation_sample score mutants/sample.txt
