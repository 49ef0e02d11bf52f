#!/usr/bin/env bash
# The formatting check ctest runs: every tracked C++ and CUDA file as .clang-format wants it
# (test fixtures under tests/reference excepted). Exit 77 (skipped) without clang-format.
# To fix what it reports: clang-format -i FILE...
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
command -v clang-format >/dev/null || { echo "clang-format not found: skipped"; exit 77; }
mapfile -t files < <(git ls-files '*.cpp' '*.h' '*.cu' | grep -v '^tests/reference/')
bad=()
for f in "${files[@]}"; do
  clang-format --dry-run --Werror "$f" >/dev/null 2>&1 || bad+=("$f")
done
if [ ${#bad[@]} -gt 0 ]; then
  printf 'not formatted as .clang-format says (clang-format -i FILE):\n'
  printf '  %s\n' "${bad[@]}"
  exit 1
fi
echo "${#files[@]} files formatted"
