#!/usr/bin/env bash
# The hard cases side by side with their peers and ceilings, in one run (bench/perf_compare.py says
# which). As root it also mounts a private 64 MB /dev/shm and drops the page cache between runs.
#   bench/perf_compare.sh [DATA_DIR]      (default: bench-data/, made once as by compare.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${STOKER_BUILD_DIR:-build}
data=${1:-bench-data}
if [[ ! -x .venv/bin/python ]]; then
  echo "perf_compare.sh: no .venv: run tools/install-deps.sh first" >&2
  exit 1
fi
cmake -S . -B "$build" -G Ninja >/dev/null
cmake --build "$build" -j2 --target loader-bench stoker-ceilings >/dev/null
"$build/tools/loader-bench" --make-data "$data"
exec .venv/bin/python bench/perf_compare.py "$build" "$data" "${@:2}"
