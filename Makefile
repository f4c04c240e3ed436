# make run / make test bootstrap .venv idempotently (re-installed only when pyproject.toml or
# constraints.txt change) and do all set-up. Two stacks (README, "Stacks"):
#   default  .venv      the newest Python here, the newest torch, PyG, numba's native kernel; no DGL
#   dgl      .venv-dgl  Python 3.11, torch 2.2.1, DGL 2.1 (DGL imports only with torch 2.0-2.2)
# Installs use uv (from PyPI, into .uv/): both stacks in about a minute where pip took six.
# PYTHON: the newest CPython 3.11+ on PATH or under pyenv (here 3.13; a pyenv shim that is not selected is skipped).
find_python = $(shell for v in $(1); do for p in $$(command -v python$$v) $$HOME/.pyenv/versions/$$v*/bin/python$$v; do \
                "$$p" -c 'import sys' >/dev/null 2>&1 && { echo "$$p"; exit 0; }; done; done; echo python3)
PYTHON     ?= $(call find_python,3.14 3.13 3.12 3.11)
DGL_PYTHON ?= $(call find_python,3.11)
UV     := .uv/bin/uv
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
DGL_VENV  := .venv-dgl
DGL_STAMP := $(DGL_VENV)/.installed
export GNNTRAIN_CACHE_DIR ?= $(CURDIR)/.cache/gnntrain
export PIP_DISABLE_PIP_VERSION_CHECK := 1
export OUTDATED_IGNORE := 1

.PHONY: run test test-dgl test-all lint bench bench-all chaos clean venv venv-dgl sar-venv gpu-carry gpu-check-dry fuzz test-durations

venv: $(STAMP)
venv-dgl: $(DGL_STAMP)

$(UV):
	python3 -m venv .uv && .uv/bin/pip install --quiet uv==0.13.9

$(STAMP): pyproject.toml constraints.txt | $(UV)
	@test -x $(BIN)/python || $(UV) venv --quiet --python '$(PYTHON)' $(VENV)
	VIRTUAL_ENV=$(VENV) $(UV) pip install --quiet --compile-bytecode -c constraints.txt -e '.[test,trackers,notebook]'
	@$(BIN)/python -c "import sys, torch; print('make: .venv holds Python', sys.version.split()[0], '| torch', torch.__version__)"
	@touch $(STAMP)

$(DGL_STAMP): pyproject.toml constraints-dgl.txt | $(UV)
	@test -x $(DGL_VENV)/bin/python || $(UV) venv --quiet --python '$(DGL_PYTHON)' $(DGL_VENV)
	VIRTUAL_ENV=$(DGL_VENV) $(UV) pip install --quiet --compile-bytecode -c constraints-dgl.txt -e '.[dgl,test]'
	@touch $(DGL_STAMP)

# SAR (IntelLabs/SAR: Mostafa, MLSys 2022), the scaleout suite's peer, into the DGL stack: it is not on
# PyPI, so from a checkout of its repository (git clone https://github.com/IntelLabs/SAR):
#   make sar-venv SAR_DIR=/path/to/SAR
# SAR itself without its dependencies (the DGL stack's pins hold dgl, torch, numpy, packaging), plus ifaddr
SAR_DIR ?=
ifneq ($(filter sar-venv,$(MAKECMDGOALS)),)
ifeq ($(SAR_DIR),)
$(error make sar-venv needs SAR_DIR=/path/to/a checkout of IntelLabs/SAR (git clone https://github.com/IntelLabs/SAR))
endif
ifneq ($(words $(wildcard $(SAR_DIR)/setup.py $(SAR_DIR)/sar/__init__.py)),2)
$(error make sar-venv: SAR_DIR=$(SAR_DIR) is not a checkout of IntelLabs/SAR (no setup.py or sar/__init__.py there))
endif
endif
sar-venv: $(DGL_STAMP)
	VIRTUAL_ENV=$(DGL_VENV) $(UV) pip install --quiet --no-deps '$(abspath $(SAR_DIR))'
	VIRTUAL_ENV=$(DGL_VENV) $(UV) pip install --quiet 'ifaddr>=0.1.7'
	@$(DGL_VENV)/bin/python -c "import sar, dgl; print('make: SAR in', '$(DGL_VENV)', '| dgl', dgl.__version__)"

run: $(STAMP)
	$(BIN)/gnntrain run

# bytecode for gnntrain itself too: every test's CLI or rank process would otherwise compile it again where
# PYTHONDONTWRITEBYTECODE is set (as on this machine)
# Two pytest workers (pytest-xdist): a test's rank processes leave the CPU half idle while the
# parent plans, loads and compares (about 22% of `make test` on 2 cores). --dist loadfile keeps a
# file's tests on one worker, with its shared fixtures (an emulated cluster, a SLURM cluster, fixed
# ports). TEST_WORKERS=0 runs them in this process, one after another.
# OMP_WAIT_POLICY=PASSIVE: an idle OpenMP thread sleeps instead of spinning. Each worker's runs size
# their threads to the whole machine, so two workers' spinning threads took each other's cores:
# HyScale's Cora accuracy test 58 s beside one busy core against 24 s alone, calibrate --quick 55
# against 22 s; passive, 24 and 25 s beside it, and no slower alone (22.6 s against 23.8 s).
# --no-loadscope-reorder: the files go out in collection order, which tests/conftest.py makes heaviest
# first from tests/file_seconds.json (`make test-durations` measures it again).
TEST_WORKERS ?= 2
PYTEST_PARALLEL = -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder
test: $(STAMP)
	@$(BIN)/python -m compileall -q gnntrain hydra_plugins >/dev/null
	GNNTRAIN_OFFLINE=1 OMP_WAIT_POLICY=$${OMP_WAIT_POLICY:-PASSIVE} $(BIN)/python -m pytest -q --durations=40 $(PYTEST_PARALLEL)

# each test file's seconds in a full `make test`, for the order above (commit tests/file_seconds.json)
test-durations: $(STAMP)
	GNNTRAIN_OFFLINE=1 OMP_WAIT_POLICY=$${OMP_WAIT_POLICY:-PASSIVE} $(BIN)/python -m pytest -q $(PYTEST_PARALLEL) \
	  --junitxml=.pytest-durations.xml -o junit_family=xunit1
	$(BIN)/python scripts/test_durations.py .pytest-durations.xml > tests/file_seconds.json
	rm -f .pytest-durations.xml

# Every test that involves DGL (marked `dgl`; they skip on the default stack), on the DGL stack
test-dgl: $(DGL_STAMP)
	@$(DGL_VENV)/bin/python -m compileall -q gnntrain hydra_plugins >/dev/null
	GNNTRAIN_OFFLINE=1 $(DGL_VENV)/bin/python -m pytest -q -p no:cacheprovider -m 'dgl and not slow' --durations=10

# ruff format at line length 100 (pyproject.toml) and the lint rules, function budgets included
lint: $(STAMP)
	$(BIN)/ruff format --check gnntrain tests scripts benchmarks hydra_plugins
	$(BIN)/ruff check gnntrain tests scripts benchmarks hydra_plugins

# every fuzzer (tests/test_fuzz_*.py: the CSV, Parquet and NumPy readers of ingest, config overrides)
# at volume: 2000 generated inputs per property (the default suite runs 200); no per-test timeout,
# and hypothesis's statistics say how many examples each property ran
fuzz: $(STAMP)
	GNNTRAIN_OFFLINE=1 GNNTRAIN_FUZZ_EXAMPLES=2000 $(BIN)/python -m pytest -q -o timeout=0 \
	  --hypothesis-show-statistics tests/test_fuzz_*.py

test-all: $(STAMP) $(DGL_STAMP)
	GNNTRAIN_OFFLINE=1 $(BIN)/python -m pytest -q -m ''
	GNNTRAIN_OFFLINE=1 $(DGL_VENV)/bin/python -m pytest -q -p no:cacheprovider -m 'dgl'

# Benchmarks run on the default stack; their DGL peers run in .venv-dgl (built here too)
bench: $(STAMP) $(DGL_STAMP)
	GNNTRAIN_OFFLINE=1 $(BIN)/python -m benchmarks reference overhead volume

bench-all: $(STAMP) $(DGL_STAMP)
	GNNTRAIN_OFFLINE=1 $(BIN)/python -m benchmarks

# The chaos suite (as root: it builds an emulated cluster): CHAOS_TRIALS seeded trials, each killing a rank
# or a host mid-training, then the end, leftovers and resume checked (docs/bench/chaos.json, docs/BENCHMARKS.md)
CHAOS_TRIALS ?= 50
CHAOS_SEED ?= 0
chaos: $(STAMP)
	GNNTRAIN_OFFLINE=1 CHAOS_TRIALS=$(CHAOS_TRIALS) CHAOS_SEED=$(CHAOS_SEED) $(BIN)/python -m benchmarks chaos

# What the GPU machine (Python 3.12, torch, PyG, numba, pyarrow; no hydra, no network) needs carried for
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
	  --out /tmp/gnntrain-gpu-check-dry.json single_exact hongtu_exact hongtu_disk predict moa single_vs_pyg \
	  hongtu_budget hyscale hongtu_disk_budget

clean:
	rm -rf $(VENV) $(DGL_VENV) .uv .cache outputs multirun .pytest_cache
