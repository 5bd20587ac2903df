#!/usr/bin/env bash
# Prepare the folder .gpu/ (ignored by git) that the device call carries: wheels of meanfield's
# dependencies missing from the GPU machine's image (Python 3.12, x86-64; no registry there) and the
# tiny-shakespeare data of the char_lm and particle_attention experiments. Run it here, once, from anywhere.
set -euo pipefail
cd "$(dirname "$0")/.."
exclude="$(git rev-parse --git-common-dir)/info/exclude"
mkdir -p "$(dirname "$exclude")"
grep -qxF "/.gpu/" "$exclude" 2>/dev/null || echo "/.gpu/" >>"$exclude"
mkdir -p .gpu/whl .gpu/data/tinyshakespeare
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d .gpu/whl \
    pot==0.9.7.post1 torchsde==0.2.6 trampoline==0.1.2
data="${MEANFIELD_DATA:-../shared/data}"
cp "$data/tinyshakespeare/input.txt" .gpu/data/tinyshakespeare/input.txt
du -sh .gpu
git status --short --ignored .gpu | head -3
