#!/usr/bin/env bash
# The WikiText-2 word-level sweeps of docs/experiments/particle_attention.md (issue 14), in the order they were
# run (one core: threads=1, one point at a time). Only WikiText-2's valid and test files exist on this machine,
# so the preset trains on valid and evaluates on test (--preset quick+wikitext2). Re-running the script
# resumes: finished points are skipped.
set -u
cd "$(dirname "$0")/../.."
C=experiments/particle_attention/config.toml
R=experiments/particle_attention/results
S="meanfield sweep $C --preset quick+wikitext2 --seeds 0,1,2 --jobs 1 --set threads=1 --quiet"
# 1. the multi-head baseline (8 heads)
$S --grid model.attention=mha --out $R/wt2_mha
# 2. M = 8 particles of width d/M (same parameters and FLOPs as 8 heads), β ∈ {0, 1e-3}, paired by seed
$S --grid optim.beta=0,1e-3 --baseline optim.beta=0 --out $R/wt2_m8
# 3. M = 16 particles of width d/M (h = 4, same parameters), β = 0
$S --grid model.n_heads=16 --grid optim.beta=0 --out $R/wt2_m16
