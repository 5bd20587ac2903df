#!/usr/bin/env bash
# nanoGPT's CPU recipe with M = 8 Langevin particles at β = 1e-3 and 3e-2 (after run_after.sh).
set -u
cd "$(dirname "$0")/../.."
meanfield sweep experiments/particle_attention/config.toml --preset nanogpt --jobs 1 --quiet --set threads=1 \
    --grid optim.beta=0.001,0.03 --seeds 0,1,2 --out experiments/particle_attention/results/nanogpt_m8_beta
