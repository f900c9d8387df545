#!/usr/bin/env bash
# GPU checks for stoker's CUDA path, on a machine with an NVIDIA GPU and nothing else needed: a
# driver. Runs the bundle tests/gpu/bundle.sh made (a build with its shared libraries beside it).
#   tests/gpu/check.sh [stoker-gpu-check options]     e.g. --device emulated for a dry run
# Runs the device tests, then prints the figures (ceilings, end-to-end GB/s for both staging
# paths, GPU idle % in three regimes, device checksum) and writes them to $OUT/gpu-check.json when
# OUT is set.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bundle=${STOKER_GPU_BUNDLE:-$here/../../gpu-bundle}
if [[ ! -x $bundle/bin/stoker-gpu-check ]]; then
  echo "check.sh: no bundle at $bundle: run tests/gpu/bundle.sh first (on the build machine)" >&2
  exit 2
fi
export LD_LIBRARY_PATH="$bundle/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
# The device tests first: the CUDA one runs for real there, the emulated ones show the same
# pipeline passing on that machine.
tests_rc=0
"$bundle/bin/stoker_tests" --gtest_filter='CudaDevice.*:EmulatedDevice.*:DeviceParse.*' --gtest_brief=1 || tests_rc=$?
# The LibTorch adapter's tests run against the GPU machine's own torch (not bundled: gigabytes).
if [[ -x $bundle/bin/stoker_torch_tests ]]; then
  torch_libs=$(python3 -c 'import os, glob, torch; d = os.path.dirname(torch.__file__); print(":".join([d + "/lib"] + glob.glob(d + "/../nvidia/*/lib")))' 2>/dev/null || true)
  if [[ -z $torch_libs ]]; then
    echo "check.sh: no Python torch on this machine: the LibTorch adapter's tests are skipped" >&2
  else
    LD_LIBRARY_PATH="$torch_libs:$LD_LIBRARY_PATH" "$bundle/bin/stoker_torch_tests" --gtest_brief=1 || tests_rc=$?
  fi
fi
json=()
[[ -n ${OUT:-} ]] && json=(--json-out "$OUT/gpu-check.json")
check_rc=0
"$bundle/bin/stoker-gpu-check" "${json[@]}" "$@" || check_rc=$?
if ((tests_rc)); then echo "check.sh: the device tests failed" >&2; exit 1; fi
exit "$check_rc"
