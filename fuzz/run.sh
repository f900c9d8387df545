#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (build-fuzz/) and runs each on its corpus for a bounded
# time; exits non-zero when one finds a crash (its input is left in build-fuzz/crashes/).
#   fuzz/run.sh [SECONDS_PER_TARGET]      (default 20)
# New inputs the fuzzer finds go to a scratch directory, not into the committed corpora; to add
# the interesting ones: build-fuzz/fuzz/NAME_fuzz -merge=1 fuzz/corpus/NAME SCRATCH.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-20}
build=${STOKER_FUZZ_BUILD_DIR:-build-fuzz}
cmake -S . -B "$build" -G Ninja -DCMAKE_CXX_COMPILER=clang++ -DSTOKER_FUZZ=ON \
  -DSTOKER_BUILD_TESTS=OFF -DSTOKER_BUILD_TOOLS=OFF -DSTOKER_BUILD_BENCHMARKS=OFF -DSTOKER_WITH_TORCH=OFF -DSTOKER_REQUIRE_TORCH=OFF \
  -DSTOKER_INSTALL=OFF >/dev/null
cmake --build "$build" -j2 >/dev/null
mkdir -p "$build/crashes"
status=0
for corpus in fuzz/corpus/*/; do
  name=$(basename "$corpus")
  scratch=$(mktemp -d)
  echo "fuzz: $name for ${seconds}s ($(ls "$corpus" | wc -l) corpus inputs)"
  if ! "$build/fuzz/${name}_fuzz" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
      -artifact_prefix="$build/crashes/${name}-" -print_final_stats=0 "$scratch" "$corpus" \
      >"$build/$name.log" 2>&1; then
    echo "fuzz: $name FAILED: see $build/$name.log and $build/crashes/" >&2
    tail -30 "$build/$name.log" >&2
    status=1
  else
    grep -E "^#[0-9]+.*DONE" "$build/$name.log" | tail -1 || true
  fi
  rm -rf "$scratch"
done
exit $status
