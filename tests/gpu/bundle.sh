#!/usr/bin/env bash
# Builds stoker-gpu-check here and packs it with every shared library it needs (but glibc's) into
# gpu-bundle/, so that a GPU machine with nothing but a driver can run tests/gpu/check.sh.
#   tests/gpu/bundle.sh [BUNDLE_DIR]
set -euo pipefail
cd "$(dirname "$0")/../.."
bundle=${1:-gpu-bundle}
build=${STOKER_BUILD_DIR:-build}
cmake -S . -B "$build" -G Ninja >/dev/null
targets=(stoker-gpu-check loader-bench stoker_tests)
# The LibTorch adapter's tests too, where it is built: its CUDA tensors have never met a GPU here.
[[ -f $build/tests/stoker_torch_tests || -n $(grep -l stoker_torch_tests "$build/build.ninja" 2>/dev/null) ]] &&
  targets+=(stoker_torch_tests)
cmake --build "$build" -j2 --target "${targets[@]}"
rm -rf "$bundle"
mkdir -p "$bundle/bin" "$bundle/lib"
cp "$build/bench/stoker-gpu-check" "$build/tools/loader-bench" "$build/tests/stoker_tests" "$bundle/bin/"
[[ -x $build/tests/stoker_torch_tests ]] && cp "$build/tests/stoker_torch_tests" "$bundle/bin/"
# Everything ldd resolves, except the C library family and the dynamic loader, which the target
# machine has (and which must match its kernel interface).
for exe in "$bundle"/bin/*; do
  ldd "$exe" | awk '/=> \// {print $3}'
done | sort -u | while read -r lib; do
  case "$lib" in
    # LibTorch and its CUDA libraries are gigabytes: check.sh uses the GPU machine's own torch.
    */site-packages/torch/*|*/site-packages/nvidia/*) continue ;;
  esac
  case "$(basename "$lib")" in
    libc.so.*|libm.so.*|libdl.so.*|libpthread.so.*|librt.so.*|ld-linux*|libresolv.so.*) ;;
    *) cp -L "$lib" "$bundle/lib/" ;;
  esac
done
du -sh "$bundle"
