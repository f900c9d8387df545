#!/usr/bin/env bash
# h5-to-lmdb against a straightforward h5py + py-lmdb script, on the same files in one run.
#   bench/convert_compare.sh [DATA_DIR [OUTPUT_DIR]]   (default: bench-data/, shared with compare.sh;
#                                                      OUTPUT_DIR=/dev/shm takes the disk out)
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/prepare.sh convert_compare.sh "${1:-}" h5-to-lmdb
exec .venv/bin/python bench/convert_compare.py "$build" "$data" ${2:+"$2"}
