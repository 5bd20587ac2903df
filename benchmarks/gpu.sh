#!/usr/bin/env bash
# Run benchmarks/gpu.py on a lent GPU machine (or dry, on any machine: --dry-run, or no CUDA).
#
#   bash benchmarks/gpu.sh [--dry-run] [gpu.py's options: --budget S, --skip ..., --experiments ..., --plan]
#
# The GPU machine's python3 has torch with CUDA but maybe not meanfield's other dependencies, and no registry:
# benchmarks/gpu_prepare.sh (run here first) puts their wheels in .gpu/whl/ (pure-Python ones there, POT's
# per Python in .gpu/whl/cpXY/) and tiny-shakespeare in .gpu/data/ (an ignored folder the device call carries).
# This script installs, into a temporary folder, the carried wheels of the packages its Python cannot import
# (the POT wheel of its own Python: it says so when there is none, and goes on without), points MEANFIELD_DATA
# at the data, and runs gpu.py, which prints its time plan (each stage's cap and their sum, at most --budget)
# first. With $OUT set (the device tool) the results are also packed into $OUT/gpu-results.tar.gz (unpack
# into benchmarks/results/). Run it under a 360 s limit: the default budget is 300 s.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
"$PY" -c 'import sys; print(f"python {sys.version.split()[0]} at {sys.executable}")'
tag=$("$PY" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')
site=$(mktemp -d /tmp/meanfield-site.XXXXXX)
trap 'rm -rf "$site"' EXIT

# the carried wheel of a package this Python cannot import: the pure one, else the one built for this Python
wheels=()
for pair in ot:pot torchsde:torchsde trampoline:trampoline; do
    module=${pair%%:*} dist=${pair##*:}
    if "$PY" -c "import $module" 2>/dev/null; then
        continue
    fi
    found=$(compgen -G ".gpu/whl/${dist}-*.whl" || compgen -G ".gpu/whl/$tag/${dist}-*.whl" || true)
    if [ -n "$found" ]; then
        wheels+=($found)
    else
        echo "gpu.sh: $dist is missing and no wheel of it for $tag is carried (bash benchmarks/gpu_prepare.sh" \
            "--python ${tag:2:1}.${tag:3}); going on without it: the stages that need it will fail and say so" >&2
    fi
done
if [ ${#wheels[@]} -gt 0 ]; then
    echo "installing into $site: ${wheels[*]}"
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$site" "${wheels[@]}"
    export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
fi
if [ -d .gpu/data ]; then
    export MEANFIELD_DATA="$PWD/.gpu/data"
fi
export OMP_WAIT_POLICY=PASSIVE PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm,clocks.max.mem --format=csv 2>/dev/null || true
"$PY" benchmarks/gpu.py ${OUT:+--bundle "$OUT"} "$@"
