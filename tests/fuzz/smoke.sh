#!/usr/bin/env bash
# A fuzz target's smoke run (ctest's Fuzz.*): every regression input and seed, then a fixed
# number of new inputs from a fixed seed, in a corpus folder of its own that is removed after.
#   smoke.sh FUZZER SEEDS REGRESSIONS [DICT]
# KAN_FUZZ_SMOKE_RUNS changes the number of new inputs (default 10000).
set -euo pipefail
fuzzer=$1 seeds=$2 regressions=$3 dict=${4:-}
corpus=$(mktemp -d)
trap 'rm -rf "$corpus"' EXIT
dirs=("$corpus" "$seeds")
[ -d "$regressions" ] && dirs+=("$regressions")
args=(-seed=1 -runs="${KAN_FUZZ_SMOKE_RUNS:-10000}" -timeout=20 -rss_limit_mb=2048
      -malloc_limit_mb=1024 -print_final_stats=1 -artifact_prefix="$corpus/")
[ -n "$dict" ] && args+=(-dict="$dict")
# LibTorch keeps allocations alive until exit (not ours to fix) and CUDA's libraries map the
# shadow gap, as in tools/sanitize.sh.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0:protect_shadow_gap=0:detect_odr_violation=0:allocator_may_return_null=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
if ! "$fuzzer" "${args[@]}" "${dirs[@]}"; then
  echo "smoke.sh: $fuzzer failed; the input that did it:" >&2
  ls -l "$corpus"/crash-* "$corpus"/leak-* "$corpus"/timeout-* "$corpus"/oom-* 2>/dev/null >&2 || true
  exit 1
fi
