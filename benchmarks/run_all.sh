#!/usr/bin/env bash
# Every CPU benchmark, one at a time (each rewrites its results file with its provenance), then the docs page.
# Run it on a quiet machine (nothing else running: the load at start and end is recorded in each file), from a
# clean checkout (a dirty tree is recorded as such). About 20 minutes on the 2-core machines; lm_step (another
# 15 minutes) only with --lm. KeOps and GeomLoss rows need `pip install -e ".[keops]"`.
#
#   bash benchmarks/run_all.sh [--lm]
set -euo pipefail
cd "$(dirname "$0")/.."
export OMP_WAIT_POLICY=PASSIVE
run() {
    echo "=== $(date -u +%H:%M:%S) load $(cut -d' ' -f1 /proc/loadavg 2>/dev/null || echo ?): python $*"
    python "$@" > /dev/null
}
run benchmarks/kernels.py --cap 90
run benchmarks/sinkhorn.py
run benchmarks/optim.py
run benchmarks/runs.py --config char_lm --steps 200 --rounds 7
run benchmarks/distributed.py --steps 10
run benchmarks/parallel_lm.py
run benchmarks/kinetic.py
run benchmarks/wasserstein.py
run benchmarks/entropy.py
run benchmarks/sde.py --repeats 7
run benchmarks/sde.py --device cpu --sizes 1e5 1e6 1e7 --repeats 7
run benchmarks/attention.py --M 8 32 --repeats 15
run benchmarks/batched_params.py
# peers.py: the peers' engines from /work/venv-peers or $MEANFIELD_PEERS_PYTHON (skipped with a note otherwise)
run benchmarks/peers.py --rounds 25
if [ "${1:-}" = "--lm" ]; then
    run benchmarks/lm_step.py --threads 1 2 --bf16 --compile --side-by-side --repeats 10
fi
python benchmarks/report.py
echo "=== done $(date -u +%H:%M:%S): docs/benchmarks.md regenerated"
