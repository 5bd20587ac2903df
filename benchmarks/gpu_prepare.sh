#!/usr/bin/env bash
# Prepare the folder .gpu/ (ignored by git) that the device call carries: wheels of meanfield's dependencies
# missing from the GPU machine's image (x86-64; no registry there) and the tiny-shakespeare data of the
# char_lm and particle_attention experiments. Run it here, once, from anywhere.
#
#   bash benchmarks/gpu_prepare.sh [--dry-run] [--python "3.12 3.13"]
#
# The wheels must not assume one Python: torchsde and trampoline are pure Python (py3-none-any, one wheel for
# every Python 3); POT has compiled parts, so its wheel is fetched for each Python named by --python (default
# 3.12, the version the device notes report for the image's python3) into .gpu/whl/cpXY/. benchmarks/gpu.sh
# installs the pure wheels and the POT wheel of the Python it runs, and says so clearly when there is none.
# One POT wheel is about 33 MB and a device call carries 64 MiB in all, the tree included: name one Python
# per call (the script warns when .gpu/ grows past 40 MiB).
#
# --dry-run: check everything and print what would be fetched and copied, and where; fetch, copy and write
# nothing (no network needed). A CPU machine runs it end to end.
set -euo pipefail
cd "$(dirname "$0")/.."

DRY=0
PYTHONS="3.12"
while [ $# -gt 0 ]; do
    case "$1" in
        --dry-run) DRY=1 ;;
        --python)
            [ $# -ge 2 ] || { echo "gpu_prepare.sh: --python needs versions, e.g. --python \"3.12 3.13\"" >&2; exit 2; }
            PYTHONS="$2"
            shift
            ;;
        -h | --help) sed -n '2,15p' "$0"; exit 0 ;;
        *) echo "gpu_prepare.sh: unknown argument '$1' (known: --dry-run, --python VERSIONS)" >&2; exit 2 ;;
    esac
    shift
done

PURE="torchsde==0.2.6 trampoline==0.1.2"
COMPILED="pot==0.9.7.post1"
PLATFORMS="--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
--platform manylinux2014_x86_64 --platform manylinux1_x86_64"
data="${MEANFIELD_DATA:-../shared/data}"
source_text="$data/tinyshakespeare/input.txt"

for v in $PYTHONS; do
    [[ "$v" =~ ^3\.[0-9]+$ ]] || { echo "gpu_prepare.sh: --python takes versions like 3.12, got '$v'" >&2; exit 2; }
done
[ -f "$source_text" ] || { echo "gpu_prepare.sh: no $source_text (set MEANFIELD_DATA to the data folder)" >&2; exit 1; }

# run (or, dry, print) one command
step() {
    if [ "$DRY" = 1 ]; then
        echo "  would run: $*"
    else
        "$@"
    fi
}

echo "gpu_prepare.sh$([ "$DRY" = 1 ] && echo ' --dry-run: nothing is fetched, copied or written'):"
echo "  pure-Python wheels (any Python 3) -> .gpu/whl/: $PURE"
echo "  compiled wheels, one per Python ($PYTHONS) -> .gpu/whl/cpXY/: $COMPILED"
echo "  data: $source_text -> .gpu/data/tinyshakespeare/input.txt"

exclude="$(git rev-parse --git-common-dir)/info/exclude"
if ! grep -qxF "/.gpu/" "$exclude" 2>/dev/null; then
    if [ "$DRY" = 1 ]; then echo "  would add /.gpu/ to $exclude"; else mkdir -p "$(dirname "$exclude")"; echo "/.gpu/" >>"$exclude"; fi
fi
step mkdir -p .gpu/whl .gpu/data/tinyshakespeare
# shellcheck disable=SC2086  # the lists are words on purpose
# (pure wheels fit every Python 3: asked for the first one named, to satisfy their Requires-Python)
step python3 -m pip download -q --no-deps --only-binary=:all: --python-version "${PYTHONS%% *}" \
    --implementation py --abi none --platform any -d .gpu/whl $PURE
for v in $PYTHONS; do
    tag="cp${v/./}"
    # shellcheck disable=SC2086
    step python3 -m pip download -q --no-deps --only-binary=:all: --python-version "$v" --implementation cp \
        --abi "$tag" $PLATFORMS -d ".gpu/whl/$tag" $COMPILED
done
step cp "$source_text" .gpu/data/tinyshakespeare/input.txt
if [ -d .gpu ]; then
    echo "  .gpu/ holds now:"
    find .gpu -type f | sort | sed 's/^/    /'
    du -sh .gpu | sed 's/^/  /'
    size=$(du -sm .gpu | cut -f1)
    if [ "$size" -gt 40 ]; then
        echo "gpu_prepare.sh: .gpu/ holds ${size} MiB; a device call carries 64 MiB with the tree: keep one Python's" \
            "wheels (remove the others from .gpu/whl/)" >&2
    fi
else
    echo "  .gpu/ does not exist yet"
fi
if [ "$DRY" = 0 ]; then
    git status --short --ignored .gpu | head -3
fi
