# make run / make test bootstrap .venv idempotently (re-installed only when
# pyproject.toml or constraints.txt change) and do all set-up.
PYTHON ?= python3.11
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
export GNNTRAIN_CACHE_DIR ?= $(CURDIR)/.cache/gnntrain
export PIP_DISABLE_PIP_VERSION_CHECK := 1
export OUTDATED_IGNORE := 1

.PHONY: run test test-all lint bench bench-all clean venv check-newest-torch gpu-carry gpu-check-dry

venv: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet -c constraints.txt -e '.[dgl,test,trackers]'
	@touch $(STAMP)

run: $(STAMP)
	$(BIN)/gnntrain run

test: $(STAMP)
	GNNTRAIN_OFFLINE=1 $(BIN)/python -m pytest -q --durations=40

lint: $(STAMP)
	$(BIN)/ruff check gnntrain tests scripts benchmarks hydra_plugins

test-all: $(STAMP)
	GNNTRAIN_OFFLINE=1 $(BIN)/python -m pytest -q -m ''

bench: $(STAMP)
	GNNTRAIN_OFFLINE=1 $(BIN)/python -m benchmarks reference overhead volume

bench-all: $(STAMP)
	GNNTRAIN_OFFLINE=1 $(BIN)/python -m benchmarks

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

# What the GPU machine (Python 3.12, torch, PyG; no hydra, no network) needs carried for
# scripts/gpu-check.sh: the missing wheels at constraints.txt's versions, and Cora staged from ../shared
# into the ignored .gpu-data/ (carried for that run only). Then, with the device tool:
#   run(command="bash scripts/gpu-check.sh", carry=[".whl", ".gpu-data"])
GPU_WHEELS := hydra-core omegaconf hydra-submitit-launcher submitit pymetis pydantic pydantic_core annotated-types \
              typing-inspection
gpu-carry:
	rm -rf .whl .gpu-data && mkdir -p .whl .gpu-data
	python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
	  --platform manylinux_2_28_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 \
	  --platform manylinux2014_x86_64 -c constraints.txt -d .whl $(GPU_WHEELS)
	python3 -m pip wheel -q --no-deps -c constraints.txt -w .whl antlr4-python3-runtime  # an sdist only: pure Python
	cp -r ../shared/datasets/dgl/cora_v2_d697a464 .gpu-data/ && chmod -R u+w .gpu-data
	@du -sh .whl .gpu-data

# The GPU check's flow on this CPU at small sizes (every check but calibrate): a smoke test, ~2 min.
gpu-check-dry: $(STAMP)
	GNNTRAIN_OFFLINE=1 $(BIN)/python scripts/gpu_check.py --device cpu --quick --data-dir ../shared/datasets/dgl \
	  --out /tmp/gnntrain-gpu-check-dry.json single_exact hongtu_exact moa hyscale single_vs_pyg hongtu_budget

clean:
	rm -rf $(VENV) $(NEWEST_VENV) .cache outputs multirun .pytest_cache
