#!/usr/bin/env bash
# GPU check (issue #21), one command on a CUDA machine with no network:
#   bash scripts/gpu-check.sh [CHECK ...] [--quick]
# Installs the wheels carried in .whl/ (made here by `make gpu-carry`) into a temporary folder, runs
# scripts/gpu_check.py (every check, or those named) and writes docs/bench/gpu.json after every check; with
# $OUT set (the device tool) gpu_check.py writes it there too. Back on the development machine:
#   cp <returned>/gpu.json docs/bench/ && python -m benchmarks --render   # the GPU section of BENCHMARKS.md
# Cora is read from .gpu-data/ when `make gpu-carry` staged it there (it is carried, never committed).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
SITE=$(mktemp -d /tmp/gnntrain-site.XXXXXX)
if compgen -G ".whl/*.whl" > /dev/null; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" .whl/*.whl
fi
export PYTHONPATH="$SITE:$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 GNNTRAIN_OFFLINE=1
export GNNTRAIN_CACHE_DIR=${GNNTRAIN_CACHE_DIR:-/tmp/gnntrain-cache}
"$PY" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'device',
torch.cuda.get_device_name() if torch.cuda.is_available() else 'none')"
status=0
"$PY" scripts/gpu_check.py --data-dir .gpu-data "$@" || status=$?
rm -rf "$SITE"
exit $status
