# Sourced by the benchmark scripts: from the repository root, checks the .venv, builds TARGETS
# and makes the standard datasets in $data (once). Sets $build and $data (default bench-data/).
#   source bench/prepare.sh NAME DATA_DIR TARGET...
bench_name=$1
build=${STOKER_BUILD_DIR:-build}
data=${2:-bench-data}
shift 2
if [[ ! -x .venv/bin/python ]]; then
  echo "$bench_name: no .venv: run tools/install-deps.sh first" >&2
  exit 1
fi
cmake -S . -B "$build" -G Ninja >/dev/null
cmake --build "$build" -j2 --target loader-bench "$@" >/dev/null
echo "$bench_name: the standard datasets in $data (made once)" >&2
"$build/tools/loader-bench" --make-data "$data"
