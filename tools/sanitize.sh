#!/usr/bin/env bash
# The tests under AddressSanitizer and UndefinedBehaviorSanitizer: builds into build-sanitize/
# (KAN_SANITIZE=address,undefined, CUDA kernels off: nvcc code is not instrumented) and runs
# every test there. About 30 minutes on 2 cores. Extra arguments go to ctest (e.g. -R Cli).
#
#   KANBENCH_SANITIZE   the sanitizers (default: address,undefined)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
KANBENCH_BUILD=${KANBENCH_SANITIZE_BUILD:-$KANBENCH_ROOT/build-sanitize}
kanbench_install_debian_packages
kanbench_install_torch
torch_prefix=$("$KANBENCH_VENV/bin/python" -c 'import torch; print(torch.utils.cmake_prefix_path)')
cmake -S "$KANBENCH_ROOT" -B "$KANBENCH_BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_PREFIX_PATH="$torch_prefix" -DKAN_WITH_CUDA_KERNELS=OFF \
  -DKAN_SANITIZE="${KANBENCH_SANITIZE:-address,undefined}" >&2
cmake --build "$KANBENCH_BUILD" -j"$(nproc)"
cd "$KANBENCH_BUILD"
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}
# LibTorch keeps allocations alive until exit (leaks are not ours to fix); CUDA's libraries map
# the shadow gap; an impossible allocation returns null as malloc does (the out-of-memory tests);
# every finding fails the test that hit it.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0:protect_shadow_gap=0:abort_on_error=1:detect_odr_violation=0:allocator_may_return_null=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
ctest --output-on-failure --timeout 3600 -j"$(nproc)" "$@"
