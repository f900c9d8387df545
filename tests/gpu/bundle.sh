#!/usr/bin/env bash
# Builds stoker-gpu-check here and packs it with every shared library it needs (but glibc's) into
# gpu-bundle/, so that a GPU machine with nothing but a driver can run tests/gpu/check.sh.
#   tests/gpu/bundle.sh [BUNDLE_DIR]
# With STOKER_GPU_PYTHON=/path/to/pythonX.Y (the GPU machine's Python version), also a wheel of the
# Python package built with that Python and py-lmdb's wheel for it, so that check.sh runs the
# Python tests there against that machine's own torch (device="cuda" for real).
# The binaries are stripped of debug information: the bundle has to travel (about 35 MB, not 200).
set -euo pipefail
cd "$(dirname "$0")/../.."
bundle=${1:-gpu-bundle}
build=${STOKER_BUILD_DIR:-build}
cmake -S . -B "$build" -G Ninja >/dev/null
targets=(stoker-gpu-check loader-bench h5-to-lmdb stoker_tests)
# The LibTorch adapter's tests too, where it is built: its CUDA tensors have never met a GPU here.
[[ -f $build/tests/stoker_torch_tests || -n $(grep -l stoker_torch_tests "$build/build.ninja" 2>/dev/null) ]] &&
  targets+=(stoker_torch_tests)
cmake --build "$build" -j2 --target "${targets[@]}"
rm -rf "$bundle"
mkdir -p "$bundle/bin" "$bundle/lib"
cp "$build/bench/stoker-gpu-check" "$build/tools/loader-bench" "$build/tools/h5-to-lmdb" "$build/tests/stoker_tests" \
  "$bundle/bin/"
if [[ -x $build/tests/stoker_torch_tests ]]; then
  cp "$build/tests/stoker_torch_tests" "$bundle/bin/"
  # LibTorch's C++ ABI changes between versions: check.sh runs these only against the same torch.
  .venv/bin/python -c 'import torch; print(torch.__version__)' >"$bundle/torch-version"
fi
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
strip --strip-debug "$bundle"/bin/* "$bundle"/lib/*

if [[ -n ${STOKER_GPU_PYTHON:-} ]]; then
  py=$STOKER_GPU_PYTHON
  version=$("$py" -c 'import sys; print("%d%d" % sys.version_info[:2])')
  mkdir -p "$bundle/wheels"
  # pip builds it in an isolated environment (scikit-build-core and nanobind from PyPI), with a
  # build directory of its own per Python version, kept between bundles.
  "$py" -m pip wheel . --no-deps -q -w "$bundle/wheels" -C build-dir="$build-py$version"
  "$py" -m pip download lmdb --only-binary=:all: --no-deps -q -d "$bundle/wheels"
fi
du -sh "$bundle"
