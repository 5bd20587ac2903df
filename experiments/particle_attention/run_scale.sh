#!/usr/bin/env bash
# The 6 × 256 study of issue 27 (docs/experiments/particle_attention.md, "The 6 × 256 study: pre-registration").
# Every stage is a series of resumable `meanfield sweep` commands: run the same command again after an
# interruption (Ctrl-C, SIGTERM, a lost session) and finished runs are skipped, the others resume from their
# last checkpoint (every 250 steps). Each finished run's small files land under
# experiments/particle_attention/results/scale/<stage>/<point>/ (config.toml, point.json, run.json,
# environment.json, metrics.jsonl, summary.json); checkpoints/ stays out of git (.gitignore).
#
#   bash experiments/particle_attention/run_scale.sh pilot          # seeds 0-2 of the primary arms (~12 CPU-h)
#   bash experiments/particle_attention/run_scale.sh main N         # seeds 3..N-1 of the primary arms
#   bash experiments/particle_attention/run_scale.sh secondary      # seeds 0-2 of the exploratory arms
#   bash experiments/particle_attention/run_scale.sh wikitext2      # seeds 0-2 of the primary arms on words, then
#                                                                   # scale_report.py --stage wikitext2 (P1-P6 on words)
#   bash experiments/particle_attention/run_scale.sh table STAGE    # secondary|wikitext2: its whole table so far
# Issue 47 (the page's "Issue 47: pre-registration"; results/scale/issue47_plan.md: the order and the commands):
#   bash experiments/particle_attention/run_scale.sh hot            # β = 3e-3 seeds 0-7, β = 1e-2 and 3e-2 seeds
#                                                                   # 3-7, into secondary/ (seeds 0-2 are there)
#   bash experiments/particle_attention/run_scale.sh p6             # p8 and p8-b1e-3 seeds 0-1 again, their
#                                                                   # checkpoints kept for the 32-draw drop-half
#   bash experiments/particle_attention/run_scale.sh lr-tune ARMS   # ARMS (mha8,p8 | p16,p32) at lr 3e-4, 1e-3,
#                                                                   # 3e-3 on the carved validation split, seeds 0-2
#   bash experiments/particle_attention/run_scale.sh lr-fair        # each tuned arm at its chosen lr, seeds 0-7
#   bash experiments/particle_attention/run_scale.sh issue47        # hot, p6, lr-tune mha8,p8, then lr-fair
#   bash experiments/particle_attention/run_scale.sh smoke [OUT]    # the whole pipeline at the smoke size (CI)
#
# Seeds run seed-major (every primary arm of seed s before seed s + 1), so that an interrupted stage leaves
# complete pairs. The table of each stage (summary.md, with --detect 0.01) is rewritten at its end; the pilot
# writes none (blind: no comparison before seed 7 of the primary arms), `main 8` the first.
# Beside each sweep, drop_half_draws.py --every 120 measures the drop-half gap over 32 random draws of every run
# finished here, a few minutes after it finishes, and once more after the sweep (exploratory;
# results/scale/drop_half/<stage>/): checkpoints are not committed, so a run's draws must be measured on the
# machine that trained it, before the session (and the machine) ends. The follower writes atomically; killing
# it mid-measurement loses nothing but that measurement, which the final pass repeats.
# JOBS (default 2): runs side by side, one torch thread each on a 2-core machine (`--jobs 2`).
# PRECISION (default fp32): bf16 runs the training step under bf16 autocast (fast_lm.py); choose it before the
# pilot and keep it for every stage (a changed configuration is refused by a resume), and only once
# precision_check.py --size study has shown it leaves the science unchanged.
set -u
cd "$(dirname "$0")/../.."

JOBS=${JOBS:-2}
DRAWS=1   # drop_half_draws.py after each seed (tiny-shakespeare stages only)
PRECISION=${PRECISION:-fp32}
CONFIG=experiments/particle_attention/scale.toml
R=experiments/particle_attention/results/scale
PRIMARY=mha8,p8,p8-b1e-3,p8-cos1e-2,p16,p32
SECONDARY=p8-b1e-5,p8-b1e-4,p8-b1e-2,p8-b3e-2,p8-cos1e-3,p16-w32,p32-w32
HOT=p8-b3e-3,p8-b1e-2,p8-b3e-2   # issue 47's hot-end family, paired with p8 (primary/) over seeds 0-7
LRS=3e-4,1e-3,3e-3               # issue 47's learning rates per arm

EXTRA=()
case "$PRECISION" in
    fp32) ;;
    bf16)
        export PYTHONPATH="$PWD/experiments/particle_attention${PYTHONPATH:+:$PYTHONPATH}"
        EXTRA=(--set task=fast_lm:TASK --set model.autocast=bf16) ;;
    *) echo "PRECISION must be fp32 or bf16, got '$PRECISION'" >&2; exit 2 ;;
esac

# the sweep tables' metrics: the seed's (validation loss and perplexity, drop-half, corruption, head similarity,
# smoothness, gradient variance). Their Holm columns are per metric over the table's rows, not the
# pre-registered family: scale_report.py computes that (P1-P6).
METRICS=(--metric val_loss --metric val_ppl --metric half_random_gap --metric half_importance_gap
         --metric half_farthest_gap --metric corrupt_gap --metric corrupt_loss --metric head_sim
         --metric erank_frac --metric loss_roughness --metric grad_var_attn --holm metric)

seq_csv() { seq -s, "$1" "$2"; }

# the background drop-half follower of the running sweep (below): ended with the script, however it ends (a
# background job of a script ignores Ctrl-C, so without this it would outlive an interrupted stage)
follower=
trap '[ -n "$follower" ] && kill "$follower" 2>/dev/null' EXIT

# sweep OUT ARMS FIRST LAST BASELINE [meanfield sweep options…]: seeds FIRST..LAST in one pool, seed by seed
# (--order seed: every arm of a seed starts before the next seed's, so a stage cut short holds whole seeds, and
# no job idles at a seed's tail waiting for the seed's last run, as one command per seed did), then, unless
# BASELINE is "blind", the table of seeds 0..LAST against BASELINE ("" for none).
# The primary stage is blind before seed 7: the pre-registration computes no comparison before n = 8.
sweep() {
    local out=$1 arms=$2 first=$3 last=$4 baseline=$5
    shift 5
    follower=
    if [ "$DRAWS" = 1 ]; then   # measures each run minutes after it finishes, while its checkpoints are here
        python experiments/particle_attention/drop_half_draws.py --folder "$out" --every 120 &
        follower=$!
    fi
    meanfield sweep "$CONFIG" --grid preset="$arms" --seeds "$(seq_csv "$first" "$last")" --order seed \
        --jobs "$JOBS" --quiet "${EXTRA[@]}" "${METRICS[@]}" "$@" --out "$out" || true   # a failed point is in runs.csv
    if [ -n "$follower" ]; then   # exploratory: the drop-half gap over 32 draws of every run finished here
        kill "$follower" 2>/dev/null; wait "$follower" 2>/dev/null; follower=
        python experiments/particle_attention/drop_half_draws.py --folder "$out" || true
    fi
    if [ "$baseline" = blind ]; then
        echo "$out: seeds $first-$last done; no comparison table before seed 7 (the pre-registration)"
        return
    fi
    [ "$baseline" = none ] && return   # the stage's own table is written by its caller
    meanfield sweep "$CONFIG" --grid preset="$arms" --seeds "$(seq_csv 0 "$last")" --jobs "$JOBS" --quiet \
        "${EXTRA[@]}" "${METRICS[@]}" "$@" ${baseline:+--baseline "$baseline"} --out "$out" --detect 0.01
}

stage() {   # stage NAME [ARGS]: one stage (a function, so that issue47 can chain them)
case "${1:-}" in
    pilot)
        sweep "$R/primary" "$PRIMARY" 0 2 blind ;;
    main)
        N=${2:?"main N: the number of seeds from the pilot (docs: the power plan), at least 8"}
        if [ "$N" -lt 8 ]; then echo "main: at least 8 seeds (the pre-registration), got $N" >&2; exit 2; fi
        sweep "$R/primary" "$PRIMARY" 3 $((N - 1)) preset=p8 ;;
    secondary)
        sweep "$R/secondary" "$SECONDARY" 0 2 "" ;;
    wikitext2)
        DRAWS=0
        sweep "$R/wikitext2" "$PRIMARY" 0 2 preset=p8 --preset wikitext2
        python experiments/particle_attention/scale_report.py --stage wikitext2 || true ;;   # P1-P6 on words
    hot)   # into secondary/, where seeds 0-2 of 1e-2 and 3e-2 are (skipped); then the whole secondary table
        sweep "$R/secondary" "$HOT" 0 7 none
        stage table secondary ;;
    p6)   # p8 and p8-b1e-3 seeds 0-1 lack a checkpoint here: rerun them (their own folder) for the 32 draws
        sweep "$R/p6" p8,p8-b1e-3 0 1 preset=p8 ;;
    lr-tune)
        ARMS=${2:?"lr-tune ARMS: mha8,p8 first, then p16,p32 (the pre-registration's order)"}
        DRAWS=0
        points=$(for a in ${ARMS//,/ }; do for lr in ${LRS//,/ }; do printf 'tune+%s+lr%s,' "$a" "$lr"; done; done)
        sweep "$R/lr_tune" "${points%,}" 0 2 "" ;;
    lr-fair)   # every arm tuned so far at the lr scale_lr.py chose (an arm at 1e-3 is primary/'s: not rerun)
        points=$(python experiments/particle_attention/scale_lr.py --choice) || exit 2
        if [ -z "$points" ]; then echo "lr-fair: nothing to run: no arm has a chosen lr other than 1e-3 (primary/ holds those runs; scale_lr.py shows the choice)"; exit 0; fi
        sweep "$R/lr_fair" "$points" 0 7 "" ;;
    issue47)
        stage hot; stage p6; stage lr-tune mha8,p8; stage lr-fair ;;
    table)   # a stage's whole table from the runs finished so far, running nothing (meanfield sweep --table-only)
        case "${2:-}" in
            secondary) meanfield sweep "$CONFIG" --grid preset="$SECONDARY,p8-b3e-3" --seeds "$(seq_csv 0 7)" --table-only --quiet \
                           "${EXTRA[@]}" "${METRICS[@]}" --detect 0.01 --out "$R/secondary" ;;
            wikitext2) meanfield sweep "$CONFIG" --grid preset="$PRIMARY" --seeds 0,1,2 --table-only --quiet \
                           "${EXTRA[@]}" "${METRICS[@]}" --preset wikitext2 --baseline preset=p8 --detect 0.01 \
                           --out "$R/wikitext2" ;;
            *) echo "table: secondary or wikitext2 (the primary stage's table is written by 'main 8')" >&2; exit 2 ;;
        esac ;;
    smoke)
        OUT=${2:-runs/scale-smoke}
        sweep "$OUT/primary" "$PRIMARY" 0 1 preset=p8 --preset smoke ;;
    *)
        echo "usage: $0 pilot | main N | secondary | wikitext2 | hot | p6 | lr-tune ARMS | lr-fair | issue47 |" \
             "table secondary|wikitext2 | smoke [OUT]" >&2
        exit 2 ;;
esac
}

stage "$@"
