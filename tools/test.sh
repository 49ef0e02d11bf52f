#!/usr/bin/env bash
# The tests: install what is missing, build, run every test with ctest.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
kanbench_build
cd "$KANBENCH_BUILD"
ctest --output-on-failure --timeout 1200 -j"$(nproc)" "$@"
