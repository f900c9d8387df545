#!/usr/bin/env bash
# The code's mechanical checks, at zero findings: the format (.clang-format, every tracked C++ file;
# ruff format, every tracked Python file), the Python lint (ruff check; both configured in
# pyproject.toml) and the C++ lint (.clang-tidy, the library's, the tools' and the Python extension's
# sources, from BUILD_DIR's compile_commands.json; a source whose exact input was clean before is
# not run again: tools/dev/tidy_cached.py). Prints what is wrong and exits 1 when anything is. ruff is
# the project's .venv's (tools/install-deps.sh installs it), else the one on PATH.
#   tools/dev/lint.sh [BUILD_DIR]        (default: build; configured by the README's commands)
#   tools/dev/lint.sh --format-only
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
status=0

mapfile -t cxx < <(git ls-files '*.cc' '*.h' '*.cpp')
if ! clang-format --dry-run -Werror "${cxx[@]}" 2>/tmp/stoker-format.$$; then
  grep -oE '^[^ :]+:[0-9]+' /tmp/stoker-format.$$ | sort -u -t: -k1,1 |
    sed 's/^/lint: not formatted as .clang-format says (clang-format -i FILE): /' >&2
  status=1
fi
rm -f /tmp/stoker-format.$$
mapfile -t py < <(git ls-files '*.py')
ruff=.venv/bin/ruff
[[ -x $ruff ]] || ruff=$(command -v ruff || true)
if [[ -z $ruff ]]; then
  echo "lint: no ruff (.venv/bin/ruff, or on PATH): run tools/install-deps.sh" >&2
  status=1
else
  if ! "$ruff" format --check --quiet "${py[@]}"; then
    echo "lint: Python not formatted as pyproject.toml says (.venv/bin/ruff format FILE)" >&2
    status=1
  fi
  "$ruff" check --quiet "${py[@]}" || status=1
fi
[[ ${1:-} == --format-only ]] && exit $status

if [[ ! -f $build/compile_commands.json ]]; then
  echo "lint: no $build/compile_commands.json: configure with cmake -S . -B $build first" >&2
  exit 1
fi
mapfile -t sources < <(git ls-files 'base/*.cc' 'loader/*.cc' 'formats/*.cc' 'torch_adapter/*.cc' 'tools/*.cc')
# The Python extension's sources too, where this build has the extension (nanobind was found).
while read -r f; do
  grep -q "\"file\": \"$PWD/$f\"" "$build/compile_commands.json" && sources+=("$f")
done < <(git ls-files 'python/src/*.cc')
# A source whose exact input was clean before is not run again (tools/dev/tidy_cached.py says how).
python3 tools/dev/tidy_cached.py "$build" "${sources[@]}" || status=1
if ((status == 0)); then
  echo "lint: ${#cxx[@]} C++ and ${#py[@]} Python files formatted, ${#sources[@]} sources clean under clang-tidy"
fi
exit $status
