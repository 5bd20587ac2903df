#!/usr/bin/env bash
# Regenerates every run folder quoted in docs/experiments/feature_particles.md (resumable: rerunning skips
# finished points). One core: threads = 1 in the configs, --jobs 1. Usage:
#   bash experiments/feature_particles/run_all.sh [table|single|steps|small|noisy|multi|lambda|lambda_long|lambda_q|lambda_q_long|lambda_M|lambda_k1|lambda_k1_long|mean_field_k2|anneal|lambda_arms|images|images_lr|cifar50|convergence|convergence_wide|convergence_scan]...
set -euo pipefail
cd "$(dirname "$0")/../.."
export OMP_WAIT_POLICY=PASSIVE
CFG=experiments/feature_particles/teacher_student.toml
IMG=experiments/feature_particles/images.toml
R=experiments/feature_particles/results
SEEDS=${SEEDS:-0,1,2,3,4,5,6,7,8,9}
sweep() { meanfield sweep "$@" --preset quick --jobs 1; }

# One arm = one sweep folder (same seeds ⇒ same data, initialisation and batch order: paired across arms).
# The seed's tuning runs (lr choices) used seed 100, which is in no table.
arm() {  # arm NAME TASKDIR OVERRIDES...
  local name=$1 dir=$2; shift 2
  # a diverged run is a result (its summary.json says so): go on with the next arm
  sweep "$CFG" "$@" --grid "train.steps=${STEPS:-4000}" --seeds "$SEEDS" --out "$R/$dir/$name" \
    || echo "arm $dir/$name: some runs did not finish (see its runs.csv)" >&2
}
ladder() {  # the arms of the teacher–student table, on the task given by $@ (extra overrides)
  local dir=$1; shift
  # the seed, literally: θ ← Π(θ − η∇L + sqrt(2ηλ_t)ξ), no ×M, λ in the loss convention, cosine 1 → 1e-3
  arm seed_literal "$dir" "$@" --set optim.mean_field_scaling=false --set optim.temperature_convention=loss
  # one factor: the ×M drift (= the literal update with its step η_s = M·lr); λ still in loss units (×M noise)
  arm times_M_loss_units "$dir" "$@" --set optim.temperature_convention=loss
  # one more factor: λ in mean-field units (the base configuration)
  arm mean_field "$dir" "$@"
  # variations of the mean-field arm, one factor each
  arm mf_lambda_min_1e-5 "$dir" "$@" --set 'optim.beta={kind="cosine",start=1.0,end=1e-5}'
  arm mf_constant_1e-3 "$dir" "$@" --set optim.beta=1e-3
  arm mf_beta0 "$dir" "$@" --set optim.beta=0
  arm mf_no_sphere "$dir" "$@" --set model.sphere=false
  arm mf_no_sphere_lr0.05 "$dir" "$@" --set model.sphere=false --set optim.lr=0.05
  arm mf_adam_drift "$dir" "$@" --set optim.drift=adam
  # the seed's "noise on an Adam step": torch Adam (0.9, 0.999, 1e-8) + sqrt(2·lr·λ)ξ, no ×M, loss units
  arm seed_adam "$dir" "$@" --set optim.drift=adam --set optim.lr=1e-2 --set 'optim.betas=[0.9,0.999]' \
      --set optim.eps=1e-8 --set optim.noise_preconditioned=false --set optim.mean_field_scaling=false \
      --set optim.temperature_convention=loss
  arm seed_adam_lr1e-3 "$dir" "$@" --set optim.drift=adam --set optim.lr=1e-3 --set 'optim.betas=[0.9,0.999]' \
      --set optim.eps=1e-8 --set optim.noise_preconditioned=false --set optim.mean_field_scaling=false \
      --set optim.temperature_convention=loss
  # deterministic baselines of the same width
  arm adam_particles "$dir" "$@" --set optim.drift=adam --set optim.lr=1e-2 --set 'optim.betas=[0.9,0.999]' \
      --set optim.eps=1e-8 --set optim.beta=0 --set optim.mean_field_scaling=false
  arm adam_mlp "$dir" "$@" --set model.kind=mlp --set optim.others.drift=adam --set optim.others.lr=1e-2
  arm sgd_mlp "$dir" "$@" --set model.kind=mlp --set optim.others.drift=sgd --set optim.others.lr=0.2
}

ladder_multi() {  # the main arms at k = 4 (d = 16, M = 128)
  local k4=(--set data.k=4)
  arm seed_literal ts_k4 "${k4[@]}" --set optim.mean_field_scaling=false --set optim.temperature_convention=loss
  arm mean_field ts_k4 "${k4[@]}"
  arm mf_lambda_min_1e-5 ts_k4 "${k4[@]}" --set 'optim.beta={kind="cosine",start=1.0,end=1e-5}'
  arm mf_constant_1e-3 ts_k4 "${k4[@]}" --set optim.beta=1e-3
  arm mf_beta0 ts_k4 "${k4[@]}" --set optim.beta=0
  arm adam_mlp ts_k4 "${k4[@]}" --set model.kind=mlp --set optim.others.drift=adam --set optim.others.lr=1e-2
}

ladder_short() {  # the main arms of the two-index table with the step budget $STEPS
  local dir=ts_k2_steps$STEPS
  arm seed_literal "$dir" --set optim.mean_field_scaling=false --set optim.temperature_convention=loss
  arm mean_field "$dir"
  arm mf_beta0 "$dir" --set optim.beta=0
  arm seed_adam "$dir" --set optim.drift=adam --set optim.lr=1e-2 --set 'optim.betas=[0.9,0.999]' \
      --set optim.eps=1e-8 --set optim.noise_preconditioned=false --set optim.mean_field_scaling=false \
      --set optim.temperature_convention=loss
  arm seed_adam_lr1e-3 "$dir" --set optim.drift=adam --set optim.lr=1e-3 --set 'optim.betas=[0.9,0.999]' \
      --set optim.eps=1e-8 --set optim.noise_preconditioned=false --set optim.mean_field_scaling=false \
      --set optim.temperature_convention=loss
  arm adam_mlp "$dir" --set model.kind=mlp --set optim.others.drift=adam --set optim.others.lr=1e-2
}

ladder_small() {  # M = $SMALL_M (default 8) particles for two directions: anything for the hot phase to explore?
  local M=${SMALL_M:-8}
  local m=(--set model.n_particles=$M) dir=ts_k2_M$M
  arm seed_literal $dir "${m[@]}" --set optim.mean_field_scaling=false --set optim.temperature_convention=loss
  arm mean_field $dir "${m[@]}"
  arm mf_lambda_min_1e-5 $dir "${m[@]}" --set 'optim.beta={kind="cosine",start=1.0,end=1e-5}'
  arm mf_constant_1e-3 $dir "${m[@]}" --set optim.beta=1e-3
  arm mf_beta0 $dir "${m[@]}" --set optim.beta=0
  arm adam_particles $dir "${m[@]}" --set optim.drift=adam --set optim.lr=1e-2 --set 'optim.betas=[0.9,0.999]' \
      --set optim.eps=1e-8 --set optim.beta=0 --set optim.mean_field_scaling=false
  arm adam_mlp $dir "${m[@]}" --set model.kind=mlp --set optim.others.drift=adam --set optim.others.lr=1e-2
}

ladder_noisy() {  # 256 noisy samples (label noise σ = 0.5): can the entropy term regularise?
  local n=(--set data.n_train=256 --set data.label_noise=0.5) dir=ts_k2_n256_noise05
  arm mean_field $dir "${n[@]}"
  arm mf_constant_1e-3 $dir "${n[@]}" --set optim.beta=1e-3
  arm mf_constant_1e-2 $dir "${n[@]}" --set optim.beta=1e-2
  arm mf_beta0 $dir "${n[@]}" --set optim.beta=0
  arm adam_mlp $dir "${n[@]}" --set model.kind=mlp --set optim.others.drift=adam --set optim.others.lr=1e-2
  # the deterministic regulariser to compare with: weight decay λ_wd/2·‖θ‖² (acts on a_i; w_i is on the sphere)
  for wd in 1e-3 1e-2 1e-1; do
    arm mf_beta0_wd$wd $dir "${n[@]}" --set optim.beta=0 --set optim.weight_decay=$wd
  done
}

for what in "${@:-table}"; do
  case $what in
    table) ladder ts_k2 ;;
    single) ladder ts_k1 --set data.k=1 ;;
    steps)  # the step budget: the main arms at 500 steps (the cosine schedule's T = train.steps)
      STEPS=500 ladder_short ;;
    small) ladder_small ;;  # SMALL_M=2 for two particles
    noisy) ladder_noisy ;;
    multi)  # four teacher directions: do several distinct modes survive at low temperature?
      ladder_multi ;;
    lambda)  # constant λ at d = 8, 16, 32 (the transition's d-dependence)
      sweep "$CFG" --grid data.d=8,16,32 --grid optim.beta=1e-4,3e-4,1e-3,3e-3,1e-2,3e-2,1e-1,3e-1 \
        --seeds 0,1,2,3,4 --out "$R/lambda_constant" ;;
    lambda_long)  # is the crossover at d = 32 static or a finite-time effect? the same λ, 4× the steps
      sweep "$CFG" --set data.d=32 --grid train.steps=16000 --grid optim.beta=3e-4,1e-3,3e-3 \
        --seeds 0,1,2 --out "$R/lambda_long_d32" ;;
    lambda_q)  # issue 28: the constant-λ sweep again (same seeds, same configs) with the intensive order
      # parameters q and q_abs_a logged, and two colder points (1e-5, 3e-5) to read off the cold value
      sweep "$CFG" --grid data.d=8,16,32 --grid optim.beta=1e-5,3e-5,1e-4,3e-4,1e-3,3e-3,1e-2,3e-2,1e-1,3e-1 \
        --seeds 0,1,2,3,4 --out "$R/lambda_q" ;;
    lambda_M)  # issue 28: which statistic moves with M? d = 16, M = 32 and 512 (M = 128 is lambda_q)
      sweep "$CFG" --set data.d=16 --grid model.n_particles=32,512 \
        --grid optim.beta=1e-5,3e-5,1e-4,3e-4,1e-3,3e-3,1e-2,3e-2,1e-1,3e-1 --seeds 0,1,2 --out "$R/lambda_M" ;;
    lambda_k1)  # issue 28: the single-index teacher, whose mean-field law reduces to the 1-D law of t = w·w*
      # (theory/feature_transition.py predicts its q and aligned fraction)
      sweep "$CFG" --set data.k=1 --grid data.d=8,16,32 \
        --grid optim.beta=1e-5,1e-4,3e-4,1e-3,3e-3,1e-2,3e-2,1e-1 --seeds 0,1,2 --out "$R/lambda_k1" ;;
    lambda_k1_long)  # issue 28: are the coldest single-index runs stationary? β = 1e-4 at 4× the steps
      sweep "$CFG" --set data.k=1 --set optim.beta=1e-4 --grid data.d=8,16 --grid train.steps=16000 \
        --seeds 0,1,2 --out "$R/lambda_k1_long" ;;
    lambda_q_long)  # issue 47: the cold anchors of lambda_q (β ≤ 1e-4) at 4× the steps, same seeds: are they
      # stationary (anchor_sensitivity.py: the paired change from 4,000 steps), and where do the crossings go?
      sweep "$CFG" --grid data.d=8,16,32 --grid optim.beta=1e-5,3e-5,1e-4 --grid train.steps=16000 \
        --seeds 0,1,2,3,4 --out "$R/lambda_q_long" ;;
    mean_field_k2)  # issue 28: the 2-D mean-field law of the two-index teacher (minutes per d; D=… for one)
      for d in ${D:-8 16 32}; do python experiments/feature_particles/mean_field_k2.py "$d" "$R/mean_field_k2/d=$d.json"; done ;;
    anneal)  # the seed's schedule shape (cosine, λ_min = λ_max/1000) at several λ_max, d = 16
      sweep "$CFG" --grid 'optim.beta={kind="cosine",start=1e-3,end=1e-6},{kind="cosine",start=1e-2,end=1e-5},{kind="cosine",start=3e-2,end=3e-5},{kind="cosine",start=1e-1,end=1e-4},{kind="cosine",start=3e-1,end=3e-4},{kind="cosine",start=1.0,end=1e-3},{kind="cosine",start=2.0,end=2e-3}' \
        --seeds 0,1,2,3,4 --out "$R/lambda_annealed" ;;
    lambda_arms)  # issue 28: two more schedules in the two-index table (its folder, seeds and steps: paired)
      # λ_max = 0.5 with the seed's shape λ_min = λ_max/1000; λ_min = 1e-2 from the seed's λ_max = 1
      arm mf_lambda_max_0.5 ts_k2 --set 'optim.beta={kind="cosine",start=0.5,end=5e-4}'
      arm mf_lambda_min_1e-2 ts_k2 --set 'optim.beta={kind="cosine",start=1.0,end=1e-2}' ;;
    images)  # lr: best of 0.1/0.5/2 (mean-field SGD ×M) and 1e-3/3e-3 (Adam) after 1 epoch, seed 100
      isweep() { sweep "$IMG" --set "data.dataset=$1" --grid model.kind="$2" --seeds "$3" --out "$R/$4" "${@:5}" \
        || echo "images $4: some runs did not finish" >&2; }
      for ds in fashion_mnist cifar10; do
        if [ $ds = fashion_mnist ]; then out=fmnist s=0,1,2,3,4; else out=cifar10 s=0,1,2,3,4; fi
        isweep $ds particles $s $out/mean_field                      # cos 1e-3 → 1e-5
        isweep $ds particles $s $out/mf_beta0 --set optim.beta=0
        isweep $ds particles $s $out/seed_schedule --set 'optim.beta={kind="cosine",start=1.0,end=1e-3}'
        isweep $ds mlp $s $out/adam_mlp --set optim.others.lr=3e-3
        isweep $ds mlp $s $out/adam_mlp_lr1e-3 --set optim.others.lr=1e-3  # issue 28: the lr of the validation split
      done ;;
    images_lr)  # issue 28: the image lrs chosen on a validation split, never on test: data.n_val = 5000
      # training images held out (a fixed random subset, the same for every seed), one epoch of the others
      # (⌊(N − 5000)/128⌋ batches: 429 for Fashion-MNIST, 351 for CIFAR-10), seed 100 (in no table); read
      # val_error (val_loss on ties) per lr in each folder's summary.md
      for ds in fashion_mnist cifar10; do
        if [ $ds = fashion_mnist ]; then out=fmnist n=60000; else out=cifar10 n=50000; fi
        ep=$(((n - 5000) / 128))
        lsweep() { sweep "$IMG" --set "data.dataset=$ds" --set data.n_val=5000 --set train.steps=$ep \
          --set train.eval_every=$ep --seeds 100 --out "$R/images_lr/$out/$1" "${@:2}" \
          || echo "images_lr $out/$1: some runs did not finish" >&2; }
        lsweep mean_field --grid optim.lr=0.1,0.5,2                              # particles, cos 1e-3 → 1e-5
        lsweep adam_mlp --set model.kind=mlp --grid optim.others.lr=1e-3,3e-3
      done ;;
    cifar50)  # issue 28: CIFAR-10 at M = 256 for 50 epochs, seeds 0–4 paired, against Adam on the same-width MLP.
      # Trained on all 50,000 training images (n_val = 0, like the 5-epoch table): the split only chose the lr.
      # 19,500 steps = 50 × 390, the sampler's epoch (⌊50,000/128⌋ batches, the last 80 images dropped; the
      # 5-epoch table's 2340 = 5 × 468 counts the same way). lrs: PARTICLE_LR (SGD ×M, both particle arms)
      # and ADAM_LR; the defaults are the 5-epoch table's 0.1 and 3e-3: set them to images_lr's choices.
      plr=${PARTICLE_LR:-0.1} alr=${ADAM_LR:-3e-3}
      csweep() {  # csweep KIND ARM LR_OVERRIDE [OVERRIDES...]
        local dir=$R/cifar10_50ep/$2
        # a sweep skips a finished point whatever its overrides: refuse a folder begun at another lr
        # (every command recorded in sweep.json: its "commands", or the file itself before they were kept)
        if [ -f "$dir/sweep.json" ] && ! python -c 'import json, sys
s = json.load(open(sys.argv[1]))
sys.exit(not all(sys.argv[2] in c.get("overrides", []) for c in s.get("commands") or [s]))' "$dir/sweep.json" "$3"; then
          echo "cifar50 $2: $dir was begun without $3 (see its sweep.json): move it away first" >&2; return 1
        fi
        sweep "$IMG" --set data.dataset=cifar10 --set train.steps=19500 --set train.eval_every=1950 \
          --set train.log_every=390 --grid model.kind="$1" --seeds 0,1,2,3,4 --out "$dir" --set "$3" "${@:4}" \
          || echo "cifar50 $2: some runs did not finish" >&2
      }
      csweep particles mean_field optim.lr=$plr                           # cos 1e-3 → 1e-5 over the 50 epochs
      csweep particles mf_beta0 optim.lr=$plr --set optim.beta=0
      csweep mlp adam_mlp optim.others.lr=$alr ;;
    convergence)
      python experiments/feature_particles/convergence.py --out "$R/convergence" ;;
    convergence_wide)  # M up to 4096 against a 65,536-particle reference, β = 1e-3 only
      python experiments/feature_particles/convergence.py --preset wide --out "$R/convergence_wide" ;;
    convergence_scan)  # issue 28: d = 8, 16, 32; M = 16…4096 × 32 replicates; 3 references of 65,536 per d; β = 1e-3
      # (resumable: every network's record is written as it finishes; ≈ 1.4 CPU-hours from the committed timings)
      python experiments/feature_particles/convergence.py --preset scan --out "$R/convergence_scan" ;;
    *) echo "unknown part $what" >&2; exit 2 ;;
  esac
done
