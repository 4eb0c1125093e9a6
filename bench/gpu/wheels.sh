#!/usr/bin/env bash
# Fills the git-ignored wheel folder (default .whl/) with exactly the wheels the GPU study
# needs on a lent machine that has none of them (Python 3.12, x86-64 manylinux): GraphBLAS
# and what it needs. About 19 MB; the machine's limit on what travels is 64 MiB.
#
#     bash bench/gpu/wheels.sh [FOLDER]
set -euo pipefail
cd "$(dirname "$0")/../.."
dest=${1:-.whl}
rm -rf "$dest"
mkdir -p "$dest"
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 -d "$dest" \
    python-graphblas==2025.2.0 suitesparse-graphblas==9.4.5.0 donfig==0.8.1.post1 \
    cffi==2.0.0 pycparser==3.0
ls "$dest"
du -sh "$dest"
