#!/usr/bin/env bash
# Run benchmarks/gpu.py on a lent GPU machine (or dry, on any machine without CUDA).
#
# The GPU machine's python3 has torch with CUDA but not meanfield's other dependencies and no registry:
# benchmarks/gpu_prepare.sh (run here first) puts their wheels in .gpu/whl/ and tiny-shakespeare in
# .gpu/data/ (an ignored folder the device call carries). This script installs the wheels into a temporary
# folder, points MEANFIELD_DATA at the data, and runs gpu.py; with $OUT set (the device tool), the results
# are also packed into $OUT/gpu-results.tar.gz (unpack into benchmarks/results/).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if compgen -G ".gpu/whl/*.whl" >/dev/null; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/meanfield-site .gpu/whl/*.whl
    export PYTHONPATH="/tmp/meanfield-site${PYTHONPATH:+:$PYTHONPATH}"
fi
if [ -d .gpu/data ]; then
    export MEANFIELD_DATA="$PWD/.gpu/data"
fi
export OMP_WAIT_POLICY=PASSIVE PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm,clocks.max.mem --format=csv 2>/dev/null || true
exec "$PY" benchmarks/gpu.py ${OUT:+--bundle "$OUT"} "$@"
