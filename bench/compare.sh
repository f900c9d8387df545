#!/usr/bin/env bash
# stoker against PyTorch's DataLoader on the standard datasets, side by side, in one run, on equal
# terms (bench/compare.py says how). Exits 1 when a goal is missed.
#   bench/compare.sh [DATA_DIR]      (default: bench-data/; the datasets, ~2 GB, are made once)
# Needs tools/install-deps.sh to have run (the .venv with torch, h5py, lmdb).
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/prepare.sh compare.sh "${1:-}" stoker-ceilings
exec .venv/bin/python bench/compare.py "$build" "$data"
