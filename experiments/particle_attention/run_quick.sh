#!/usr/bin/env bash
# The CPU sweeps of docs/experiments/particle_attention.md, in the order they were run (one core: threads=1,
# one point at a time). Re-running the script resumes: finished points are skipped.
set -u
cd "$(dirname "$0")/../.."
C=experiments/particle_attention/config.toml
R=experiments/particle_attention/results
S="meanfield sweep $C --preset quick --seeds 0,1,2 --jobs 1 --set threads=1 --quiet"
# 1. M = 8 particles of width d/M (same parameters and FLOPs as 8 heads), the β grid (constant β)
$S --grid optim.beta=0,1e-5,1e-4,1e-3,1e-2 --baseline optim.beta=0 --out $R/quick_m8_beta
# 2. the multi-head baseline (8 heads), same seeds: paired with every other table by seed
$S --grid model.attention=mha --out $R/quick_mha
# 3. M = 16: width d/M (h = 4, same parameters) and width d/8 (h = 8, more parameters and FLOPs), β ∈ {0, 1e-3}
$S --grid model.n_heads=16 --grid model.d_head=4,8 --grid optim.beta=0,1e-3 --out $R/quick_m16
# 4. β annealed: cosine from 1e-3 (and 1e-2) to 0
$S --set 'optim.beta={kind="cosine", start=1e-3, end=0}' --grid model.n_heads=8 --out $R/quick_m8_anneal_1e-3
$S --set 'optim.beta={kind="cosine", start=1e-2, end=0}' --grid model.n_heads=8 --out $R/quick_m8_anneal_1e-2
