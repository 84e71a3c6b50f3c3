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

.PHONY: install figures test lint mutation
install: $(BIN)/.installed

figures: $(BIN)/.installed
	$(BIN)/python -m paper_figs all --profile $(PROFILE)

lint: $(BIN)/.installed
	$(BIN)/ruff check .
	$(BIN)/lint-imports

test: $(BIN)/.installed lint
	$(BIN)/python -m pytest

# Mutation testing (mutmut, config in pyproject.toml): one module at a time, one worker at nice 19 (every mutant
# re-runs the tests that cover it; hours on 2 shared cores), then the score per file. Not part of `make test`.
MUTATE_MODULES ?= gac.control theory.stability theory.momentum theory.gac_stability theory.cosine theory.convergence
mutation: $(BIN)/.installed
	for module in $(MUTATE_MODULES); do \
		start=$$(date +%s); \
		OMP_NUM_THREADS=1 nice -n 19 $(BIN)/mutmut run --max-children 1 "$$module.*" > /dev/null || exit 1; \
		echo "$$module: $$(( $$(date +%s) - start )) s"; \
	done
	$(BIN)/mutmut results --all true | awk -F': ' '{ name = $$1; sub(/^ +/, "", name); sub(/\.x[^.]*$$/, "", name); \
		total[name]++; if ($$2 == "killed" || $$2 == "timeout") killed[name]++ } \
		END { for (m in total) printf "%-22s %4d / %4d killed  %5.1f %%\n", m, killed[m], total[m], \
		100 * killed[m] / total[m] }'
