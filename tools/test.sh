#!/usr/bin/env bash
# The tests: install what is missing, build, run every test with ctest.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
kanbench_build
cd "$KANBENCH_BUILD"
# ctest runs as many tests at once as there are cores, each with LibTorch's OpenMP threads; spinning
# idle threads of one test would then starve the others (a 0.4 s fit took 30 s on 2 busy cores).
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}
ctest --output-on-failure --timeout 1200 -j"$(nproc)" "$@"
