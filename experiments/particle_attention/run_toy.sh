#!/usr/bin/env bash
# The seed's toy at lr = 0.2 (at lr = 0.05, results/toy, two of five seeds had not learned the task at β = 0
# after 3000 steps): 8 particles, β ∈ {0, 1e-4, 1e-3, 5e-3}, 5 paired seeds.
set -u
cd "$(dirname "$0")/../.."
meanfield sweep experiments/particle_attention/toy.toml --preset quick --seeds 0,1,2,3,4 --jobs 1 --quiet \
    --set optim.lr=0.2 --set optim.others.lr=0.2 --grid optim.beta=0,1e-4,0.001,0.005 --baseline optim.beta=0 \
    --out experiments/particle_attention/results/toy_lr0.2
