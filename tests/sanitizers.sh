#!/usr/bin/env bash
# The test suite under AddressSanitizer + UndefinedBehaviorSanitizer (build-asan/) and under
# ThreadSanitizer (build-tsan/). The LibTorch adapter and the benchmarks are left out: the adapter's
# tests run in the main build, and LibTorch is neither built with a sanitizer nor quick to compile.
# A test that cannot run under a sanitizer skips itself and says why.
#   tests/sanitizers.sh [asan|tsan]...     (default: both)
set -euo pipefail
cd "$(dirname "$0")/.."
common=(-G Ninja -DSTOKER_WITH_TORCH=OFF -DSTOKER_REQUIRE_TORCH=OFF -DSTOKER_BUILD_BENCHMARKS=OFF -DSTOKER_INSTALL=OFF)
for kind in "${@:-asan tsan}"; do
  for k in $kind; do
    case $k in
      asan) flags=(-DSTOKER_SANITIZE=ON) ;;
      tsan) flags=(-DSTOKER_TSAN=ON) ;;
      *) echo "sanitizers.sh: unknown sanitizer '$k' (asan, tsan)" >&2; exit 2 ;;
    esac
    echo "sanitizers.sh: $k" >&2
    cmake -S . -B "build-$k" "${common[@]}" "${flags[@]}" >/dev/null
    cmake --build "build-$k" -j2
    ctest --test-dir "build-$k" -j2 --output-on-failure
  done
done
