#!/usr/bin/env bash
# The GPU study on a lent machine, in one command from the repository root:
#
#     bash bench/gpu/run.sh [python -m bench gpu options]
#
# 1. installs the carried wheels (.whl/, filled by bench/gpu/wheels.sh: GraphBLAS and what it
#    needs, which the machine lacks) into a temporary folder put first on the path;
# 2. runs `python -m bench gpu` with src/ on the path, writing its results to $OUT when the
#    device tool set it (what comes back from the machine), else bench/results/current.
#
# GPU_STUDY_WHEELS names another wheel folder, GPU_STUDY_SITE the install folder (default: a
# fresh temporary one). Without a wheel folder the machine's own packages are used.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root" || exit 2
wheels=${GPU_STUDY_WHEELS:-.whl}
if compgen -G "$wheels/*.whl" >/dev/null; then
    site=${GPU_STUDY_SITE:-$(mktemp -d)}
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target "$site" "$wheels"/*.whl || { echo "gpu study: installing $wheels failed"; exit 2; }
    export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
    echo "gpu study: installed $(ls "$wheels"/*.whl | wc -l) wheels into $site"
else
    echo "gpu study: no wheels in $wheels; using the machine's own packages"
fi
export PYTHONPATH="$root/src:$root${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
out=${OUT:-bench/results/current}
mkdir -p "$out"
python3 -m bench gpu --out "$out" "$@" 2>&1 | tee "$out/gpu-study.log"
exit "${PIPESTATUS[0]}"
