#!/usr/bin/env bash
# stoker's image pipeline against PyTorch's DataLoader with the ImageNet training transforms, in one
# run (bench/image_compare.py says how). Exits 1 when stoker is under 2x PyTorch.
#   bench/image_compare.sh [DATA_DIR] [-- image_compare.py options]   (default DATA_DIR: bench-data/)
# Needs tools/install-deps.sh to have run (the .venv with torch, lmdb, Pillow, scikit-image).
set -euo pipefail
cd "$(dirname "$0")/.."
data=${1:-bench-data}
shift $(($# > 0 ? 1 : 0))
[[ ${1:-} == -- ]] && shift
if [[ ! -x .venv/bin/python ]]; then
  echo "image_compare.sh: no .venv: run tools/install-deps.sh first" >&2
  exit 1
fi
build=${STOKER_BUILD_DIR:-build}
cmake -S . -B "$build" -G Ninja >/dev/null
cmake --build "$build" -j2 --target loader-bench >/dev/null
mkdir -p "$data"
exec .venv/bin/python bench/image_compare.py "$build" "$data" "$@"
