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

STAGE=${1:-}
JOBS=${JOBS:-2}
DRAWS=1   # drop_half_draws.py after each seed (tiny-shakespeare stages only)
PRECISION=${PRECISION:-fp32}
CONFIG=experiments/particle_attention/scale.toml
R=experiments/particle_attention/results/scale
PRIMARY=mha8,p8,p8-b1e-3,p8-cos1e-2,p16,p32
SECONDARY=p8-b1e-5,p8-b1e-4,p8-b1e-2,p8-b3e-2,p8-cos1e-3,p16-w32,p32-w32

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
    meanfield sweep "$CONFIG" --grid preset="$arms" --seeds "$(seq_csv 0 "$last")" --jobs "$JOBS" --quiet \
        "${EXTRA[@]}" "${METRICS[@]}" "$@" ${baseline:+--baseline "$baseline"} --out "$out" --detect 0.01
}

case "$STAGE" in
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
    table)   # a stage's whole table from the runs finished so far, running nothing (meanfield sweep --table-only)
        case "${2:-}" in
            secondary) meanfield sweep "$CONFIG" --grid preset="$SECONDARY" --seeds 0,1,2 --table-only --quiet \
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
        echo "usage: $0 pilot | main N | secondary | wikitext2 | table secondary|wikitext2 | smoke [OUT]" >&2
        exit 2 ;;
esac
