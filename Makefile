# make run / make test bootstrap .venv idempotently (re-installed only when
# pyproject.toml or constraints.txt change) and do all set-up.
PYTHON ?= python3.11
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
export GNNTRAIN_CACHE_DIR ?= $(CURDIR)/.cache/gnntrain
export PIP_DISABLE_PIP_VERSION_CHECK := 1
export OUTDATED_IGNORE := 1

.PHONY: run test test-all lint bench bench-all clean venv check-newest-torch

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

# A fresh venv with the newest torch PyPI serves for NEWEST_PYTHON, gnntrain without DGL (no
# constraints), and the suite's no-DGL subset. Heavy (a ~3 GB download): run it by hand, not in CI.
NEWEST_PYTHON ?= $(PYTHON)
NEWEST_VENV   ?= .venv-newest
NO_DGL_TESTS  := tests/test_no_dgl.py tests/test_cuda_hygiene.py tests/test_loaders.py::test_pyg_reader_takes_pygs_own_layout_too
check-newest-torch:
	rm -rf $(NEWEST_VENV) && $(NEWEST_PYTHON) -m venv $(NEWEST_VENV)
	@if ! $(NEWEST_VENV)/bin/pip install --quiet --upgrade pip torch; then \
	  echo "check-newest-torch: SKIPPED - PyPI is unreachable from here (pip install torch failed)"; exit 0; fi; \
	$(NEWEST_VENV)/bin/pip install --quiet -e '.[test]' && \
	$(NEWEST_VENV)/bin/python -c "import torch, importlib.util as u; print('torch', torch.__version__, '| dgl importable:', u.find_spec('dgl') is not None)" && \
	GNNTRAIN_OFFLINE=1 $(NEWEST_VENV)/bin/python -m pytest -q -p no:cacheprovider $(NO_DGL_TESTS)

clean:
	rm -rf $(VENV) $(NEWEST_VENV) .cache outputs multirun .pytest_cache
