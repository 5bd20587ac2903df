#!/usr/bin/env bash
# Last CPU runs (after run_nanogpt_beta.sh): M = 32 (width d/32, same parameters), and the optimizer's own
# temperature contract (noise preconditioned by Adam: sqrt(2β·η_eff)ξ) instead of the seed's sqrt(2β·lr)ξ.
set -u
cd "$(dirname "$0")/../.."
S="meanfield sweep experiments/particle_attention/config.toml --preset quick --seeds 0,1,2 --jobs 1 --quiet --set threads=1"
$S --grid model.n_heads=32 --grid optim.beta=0,1e-3 --baseline optim.beta=0 --out experiments/particle_attention/results/quick_m32
$S --set optim.noise_preconditioned=true --grid optim.beta=1e-4,1e-3 --out experiments/particle_attention/results/quick_m8_precond
