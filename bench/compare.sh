#!/usr/bin/env bash
# stoker against PyTorch's DataLoader on the standard datasets, side by side, in one run, on equal
# terms (bench/compare.py says how). Exits 1 when a goal is missed.
#   bench/compare.sh [DATA_DIR]      (default: bench-data/; the datasets, ~2 GB, are made once)
# Needs tools/install-deps.sh to have run (the .venv with torch, h5py, lmdb).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${STOKER_BUILD_DIR:-build}
data=${1:-bench-data}
if [[ ! -x .venv/bin/python ]]; then
  echo "compare.sh: no .venv: run tools/install-deps.sh first" >&2
  exit 1
fi
cmake -S . -B "$build" -G Ninja >/dev/null
cmake --build "$build" -j2 --target loader-bench stoker-ceilings >/dev/null
echo "compare.sh: making the standard datasets in $data (once)" >&2
"$build/tools/loader-bench" --make-data "$data"
exec .venv/bin/python bench/compare.py "$build" "$data"
