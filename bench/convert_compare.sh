#!/usr/bin/env bash
# h5-to-lmdb against a straightforward h5py + py-lmdb script, on the same files in one run.
#   bench/convert_compare.sh [DATA_DIR [OUTPUT_DIR]]   (default: bench-data/, shared with compare.sh;
#                                                      OUTPUT_DIR=/dev/shm takes the disk out)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${STOKER_BUILD_DIR:-build}
data=${1:-bench-data}
if [[ ! -x .venv/bin/python ]]; then
  echo "convert_compare.sh: no .venv: run tools/install-deps.sh first" >&2
  exit 1
fi
cmake -S . -B "$build" -G Ninja >/dev/null
cmake --build "$build" -j2 --target loader-bench h5-to-lmdb >/dev/null
"$build/tools/loader-bench" --make-data "$data"
exec .venv/bin/python bench/convert_compare.py "$build" "$data" ${2:+"$2"}
