# make run / make test bootstrap .venv idempotently (re-installed only when
# pyproject.toml or constraints.txt change) and do all set-up.
PYTHON ?= python3.11
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
export GNNTRAIN_CACHE_DIR ?= $(CURDIR)/.cache/gnntrain
export PIP_DISABLE_PIP_VERSION_CHECK := 1
export OUTDATED_IGNORE := 1

.PHONY: run test test-all lint bench bench-all clean venv

venv: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet -c constraints.txt -e '.[dgl,test]'
	@touch $(STAMP)

run: $(STAMP)
	$(BIN)/gnntrain run

test: $(STAMP)
	GNNTRAIN_OFFLINE=1 $(BIN)/python -m pytest -q

lint: $(STAMP)
	$(BIN)/ruff check gnntrain tests scripts hydra_plugins

test-all: $(STAMP)
	GNNTRAIN_OFFLINE=1 $(BIN)/python -m pytest -q -m ''

bench: $(STAMP)
	GNNTRAIN_OFFLINE=1 $(BIN)/python scripts/bench.py reference overhead volume

bench-all: $(STAMP)
	GNNTRAIN_OFFLINE=1 $(BIN)/python scripts/bench.py

clean:
	rm -rf $(VENV) .cache outputs multirun .pytest_cache
