#!/usr/bin/env bash
# Second part of the CPU runs (after run_quick.sh): the seed's toy, then nanoGPT's CPU recipe (4 × 128).
set -u
cd "$(dirname "$0")/../.."
R=experiments/particle_attention/results
# hotter β for M = 8 (the hot end of the stability curve: β = 1e-2 barely moved the loss)
meanfield sweep experiments/particle_attention/config.toml --preset quick --seeds 0,1,2 --jobs 1 --quiet \
    --set threads=1 --grid optim.beta=0.03,0.1 --out $R/quick_m8_beta_hot
# the seed's toy: 8 particles, β ∈ {0, 1e-4, 1e-3, 5e-3}, 5 paired seeds
meanfield sweep experiments/particle_attention/toy.toml --preset quick --seeds 0,1,2,3,4 --jobs 1 --quiet \
    --grid optim.beta=0,1e-4,0.001,0.005 --baseline optim.beta=0 --out $R/toy
# the particle heads' own initialisation (init = "native", ~20× the baseline block's output at init), β = 0
meanfield sweep experiments/particle_attention/config.toml --preset quick --seeds 0,1,2 --jobs 1 --quiet \
    --set threads=1 --set model.init=native --grid model.n_heads=8 --out $R/quick_m8_native
# nanoGPT's shakespeare_char CPU recipe (4 × 128, ctx 64, batch 12, 2000 iters, lr 1e-3): 8-head baseline,
# then M = 8 particles at β = 0
S="meanfield sweep experiments/particle_attention/config.toml --preset nanogpt --jobs 1 --quiet --set threads=1"
$S --grid model.attention=mha --seeds 0,1,2 --out $R/nanogpt_mha
$S --grid optim.beta=0 --seeds 0,1,2 --out $R/nanogpt_m8
