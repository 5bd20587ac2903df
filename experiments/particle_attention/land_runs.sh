#!/usr/bin/env bash
# Land the finished runs of a background study (issue 47's plan): copy each finished run's small files and the
# drop-half records from another checkout's results/scale into this one's, never checkpoints. Prints the runs
# it copied that were not here yet; copying again is harmless (a run's files do not change once finished).
#
#   bash experiments/particle_attention/land_runs.sh /work/runs [STAGE…]   # default stages: secondary p6 lr_tune lr_fair
set -eu
cd "$(dirname "$0")/../.."
SRC=${1:?"usage: $0 OTHER_CHECKOUT [STAGE…]"}/experiments/particle_attention/results/scale
shift
DST=experiments/particle_attention/results/scale
STAGES=("$@")
[ ${#STAGES[@]} -gt 0 ] || STAGES=(secondary p6 lr_tune lr_fair)
FILES=(config.toml point.json run.json environment.json metrics.jsonl summary.json)
for stage in "${STAGES[@]}"; do
    for summary in "$SRC/$stage"/*/summary.json; do
        [ -f "$summary" ] && grep -q '"status": "finished"' "$summary" || continue
        run=$(dirname "$summary"); rel=${run#"$SRC"/}
        [ -f "$DST/$rel/summary.json" ] && cmp -s "$summary" "$DST/$rel/summary.json" || echo "landed $rel"
        mkdir -p "$DST/$rel"
        for f in "${FILES[@]}"; do cp "$run/$f" "$DST/$rel/$f"; done
    done
    for record in "$SRC/drop_half/$stage"/*.json; do
        [ -f "$record" ] || continue
        mkdir -p "$DST/drop_half/$stage"
        cmp -s "$record" "$DST/drop_half/$stage/$(basename "$record")" || echo "landed drop_half/$stage/$(basename "$record")"
        cp "$record" "$DST/drop_half/$stage/"
    done
done
