#!/usr/bin/env bash
# The hard cases side by side with their peers and ceilings, in one run (bench/perf_compare.py says
# which). As root it also mounts a private 64 MB /dev/shm and drops the page cache between runs.
#   bench/perf_compare.sh [DATA_DIR [--only shm,gzip,cold,auto,lmdb]]   (default: bench-data/)
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/prepare.sh perf_compare.sh "${1:-}" stoker-ceilings
exec .venv/bin/python bench/perf_compare.py "$build" "$data" "${@:2}"
