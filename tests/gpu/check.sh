#!/usr/bin/env bash
# GPU checks for stoker's CUDA path, on a machine with an NVIDIA GPU and nothing else needed: a
# driver. Runs the bundle tests/gpu/bundle.sh made (a build with its shared libraries beside it).
#   tests/gpu/check.sh [stoker-gpu-check options]     e.g. --device emulated for a dry run
# Runs the device tests, the LibTorch adapter's tests and the Python package's tests where the
# bundle has them and this machine has a matching torch and Python, then prints the figures
# (ceilings, end-to-end GB/s for both staging paths, GPU idle % in three regimes, device checksum)
# and writes them to $OUT/gpu-check.json when OUT is set.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bundle=${STOKER_GPU_BUNDLE:-$here/../../gpu-bundle}
if [[ ! -x $bundle/bin/stoker-gpu-check ]]; then
  echo "check.sh: no bundle at $bundle: run tests/gpu/bundle.sh first (on the build machine)" >&2
  exit 2
fi
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
# Programs that load this machine's own libraries too (torch, Python's) take from the bundle only
# the libraries this machine lacks: the bundle's libstdc++ or libz must not shadow newer ones.
# stoker's own libraries apart: the wheel's extension finds the wheel's libstoker by its RPATH.
mkdir -p "$scratch/lib" "$scratch/stoker-lib"
for lib in "$bundle"/lib/*; do
  case "$(basename "$lib")" in
    libstoker*) ln -s "$lib" "$scratch/stoker-lib/" ;;
    *) ldconfig -p 2>/dev/null | grep -q "^[[:space:]]*$(basename "$lib") " || ln -s "$lib" "$scratch/lib/" ;;
  esac
done
failed=()
# The device tests first: the CUDA one runs for real there, the emulated ones show the same
# pipeline passing on that machine.
LD_LIBRARY_PATH="$bundle/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$bundle/bin/stoker_tests" \
  --gtest_filter='CudaDevice.*:EmulatedDevice.*:DeviceParse.*' || failed+=("device tests")
machine_torch=$(python3 -c 'import torch; print(torch.__version__)' 2>/dev/null || true)
# The LibTorch adapter's tests run against this machine's own torch (not bundled: gigabytes), when
# it is the version they were built against.
if [[ -x $bundle/bin/stoker_torch_tests ]]; then
  built_torch=$(cat "$bundle/torch-version" 2>/dev/null || echo unknown)
  if [[ -z $machine_torch ]]; then
    echo "check.sh: no Python torch on this machine: the LibTorch adapter's tests are skipped" >&2
  elif [[ ${machine_torch%%+*} != "${built_torch%%+*}" ]]; then
    echo "check.sh: the LibTorch adapter's tests were built against torch $built_torch, this machine has" \
      "$machine_torch (LibTorch's C++ ABI differs between versions): skipped" >&2
  else
    torch_libs=$(python3 -c 'import os, glob, torch; d = os.path.dirname(torch.__file__); print(":".join([d + "/lib"] + glob.glob(d + "/../nvidia/*/lib")))')
    # Some torch wheels export the std::filesystem functions of a libstdc++ linked into them
    # (pytorch/pytorch#133437), broken ones that would take the tests' own calls: this machine's
    # libstdc++ comes first.
    stdcxx=$(ldconfig -p | awk '/libstdc\+\+\.so\.6 .*x86-64/ {print $NF; exit}')
    LD_PRELOAD="$stdcxx" LD_LIBRARY_PATH="$torch_libs:$scratch/stoker-lib:$scratch/lib" "$bundle/bin/stoker_torch_tests" ||
      failed+=("LibTorch adapter tests")
  fi
fi
# The Python package's tests, with this machine's Python and torch (the wheel is built for one
# Python version: pip refuses another, saying so).
wheels=("$bundle"/wheels/stoker-*.whl)
if [[ -f ${wheels[0]} ]]; then
  # The converter the tests use to make stoker-layout databases, with the bundle's libraries.
  printf '#!/bin/sh\nLD_LIBRARY_PATH=%q exec %q "$@"\n' "$bundle/lib" "$bundle/bin/h5-to-lmdb" >"$scratch/h5-to-lmdb"
  chmod +x "$scratch/h5-to-lmdb"
  if python3 -m pip install -q --no-index --no-deps --no-compile --target "$scratch/site" "$bundle"/wheels/*.whl; then
    PYTHONPATH="$scratch/site" LD_LIBRARY_PATH="$scratch/lib" STOKER_H5_TO_LMDB="$scratch/h5-to-lmdb" \
      PYTHONDONTWRITEBYTECODE=1 python3 -m pytest -q -p no:cacheprovider -rs "$here/../python" ||
      failed+=("Python package tests")
  else
    failed+=("Python package install")
  fi
fi
# The main job on the device: loader-bench's demo delivers to the GPU what it delivers to the CPU
# (content and order digests, read back from device memory), through a simulated step.
device=cuda
for ((i = 1; i < $#; ++i)); do [[ ${!i} == --device ]] && j=$((i + 1)) && device=${!j}; done
bench=$bundle/bin/loader-bench
export LD_LIBRARY_PATH="$bundle/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
"$bench" --make-demo "$scratch/demo" --demo-samples 20000 >/dev/null
digests=()
for dev in cpu "$device"; do
  if out=$("$bench" --data "$scratch/demo/demo.lmdb" --shuffle --seed 5 --epochs 2 --step-ms 1 --digest \
    --device "$dev"); then
    echo "$out"
    digests+=("$(grep -o 'content_digest [0-9a-f]*.*order_digest [0-9a-f]*' <<<"$out" | tail -n 1)")
  else
    failed+=("loader-bench --device $dev")
  fi
done
if ((${#digests[@]} == 2)) && [[ ${digests[0]} != "${digests[1]}" || -z ${digests[0]} ]]; then
  echo "check.sh: loader-bench --device $device delivered other data than --device cpu: ${digests[*]}" >&2
  failed+=("loader-bench digests")
fi
json=()
[[ -n ${OUT:-} ]] && json=(--json-out "$OUT/gpu-check.json")
check_rc=0
"$bundle/bin/stoker-gpu-check" "${json[@]}" "$@" || check_rc=$?
if ((${#failed[@]})); then
  echo "check.sh: failed: ${failed[*]}" >&2
  exit 1
fi
exit "$check_rc"
