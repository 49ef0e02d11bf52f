#!/usr/bin/env bash
# The tests: install what is missing, build, run every test with ctest; then the fuzz targets'
# smoke runs, in their own build (build-fuzz/, clang with libFuzzer and sanitizers; skipped, with
# a message, where clang-14 is missing). Extra arguments go to both ctest runs (e.g. -R Cli).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
kanbench_build
fuzzers=0
if kanbench_have_libfuzzer; then
  kanbench_build_fuzzers
  fuzzers=1
fi
cd "$KANBENCH_BUILD"
# ctest runs as many tests at once as there are cores, each with LibTorch's OpenMP threads; spinning
# idle threads of one test would then starve the others (a 0.4 s fit takes 30 s on 2 busy cores).
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}
ctest --output-on-failure --timeout 1200 -j"$(nproc)" "$@"
if [ "$fuzzers" = 1 ]; then
  cd "$KANBENCH_FUZZ_BUILD"
  ctest --output-on-failure --timeout 600 -j"$(nproc)" "$@"
fi
