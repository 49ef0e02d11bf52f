#!/usr/bin/env bash
# A fuzzing campaign on one reader: builds the fuzz targets (build-fuzz/, clang-14 with libFuzzer,
# ASan and UBSan) and runs TARGET for MINUTES on every core, from its seeds and regressions into a
# corpus that persists between campaigns (build-fuzz/campaigns/TARGET/corpus). Crashing inputs land
# in build-fuzz/campaigns/TARGET/; each one found belongs in tests/fuzz/regressions/TARGET once
# fixed (the smoke tests run them all). docs/fuzzing.md says more.
#
#   tools/fuzz.sh TARGET MINUTES [libFuzzer options...]
#   tools/fuzz.sh --list
#
#   KANBENCH_FUZZ_JOBS   parallel fuzzing processes (default: the number of cores)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
targets=(torch_file checkpoint pykan_config data_file results_json fit_json audit_json gbench_json)
if [ "${1:-}" = --list ] || [ $# -lt 2 ]; then
  echo "usage: tools/fuzz.sh TARGET MINUTES [libFuzzer options...]; targets: ${targets[*]}" >&2
  [ "${1:-}" = --list ] && exit 0 || exit 2
fi
target=$1 minutes=$2
shift 2
printf '%s\n' "${targets[@]}" | grep -qx "$target" ||
  { echo "tools/fuzz.sh: no target '$target'; targets: ${targets[*]}" >&2; exit 2; }
[[ "$minutes" =~ ^[0-9]+$ ]] && [ "$minutes" -gt 0 ] ||
  { echo "tools/fuzz.sh: MINUTES must be a whole number > 0, got '$minutes'" >&2; exit 2; }

kanbench_install_debian_packages
kanbench_install_torch
kanbench_have_libfuzzer || exit 2
kanbench_build_fuzzers
campaign=$KANBENCH_FUZZ_BUILD/campaigns/$target
mkdir -p "$campaign/corpus"
dirs=("$campaign/corpus" "$KANBENCH_FUZZ_BUILD/tests/fuzz/seeds/$target")
[ -d "$KANBENCH_ROOT/tests/fuzz/regressions/$target" ] && dirs+=("$KANBENCH_ROOT/tests/fuzz/regressions/$target")
dict=()
case $target in
  torch_file | checkpoint) dict=(-dict="$KANBENCH_ROOT/tests/fuzz/dict/pickle.dict") ;;
  pykan_config) dict=(-dict="$KANBENCH_ROOT/tests/fuzz/dict/pykan_config.dict") ;;
  *_json) dict=(-dict="$KANBENCH_ROOT/tests/fuzz/dict/json.dict") ;;
esac
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0:protect_shadow_gap=0:detect_odr_violation=0:allocator_may_return_null=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
jobs=${KANBENCH_FUZZ_JOBS:-$(nproc)} # before OMP_NUM_THREADS, which nproc obeys
export OMP_NUM_THREADS=1
kanbench_log "fuzzing $target for $minutes min on $jobs core(s); corpus $campaign/corpus"
cd "$campaign"
# The fork children mostly end through _Exit, which skips the targets' removal of their scratch
# folders (tests/fuzz/fuzz_input.h): they go into one folder, removed when the campaign ends.
export TMPDIR=$campaign/tmp
rm -rf "$TMPDIR" && mkdir -p "$TMPDIR"
# -fork keeps fuzzing after a crash (each crash saved), so one run gives the whole campaign's
# findings; the final stats line says executions, coverage and crashes.
"$KANBENCH_FUZZ_BUILD/bin/fuzz_$target" -fork="$jobs" -ignore_crashes=1 -ignore_timeouts=1 \
  -ignore_ooms=1 -max_total_time=$((minutes * 60)) -timeout=20 -rss_limit_mb=2048 \
  -malloc_limit_mb=1024 -artifact_prefix="$campaign/" "${dict[@]}" "$@" "${dirs[@]}" 2>&1 |
  tee "$campaign/fuzz.log" | grep -E "^#|INFO: fuzzed|crash|ERROR|SUMMARY" || true
rm -rf "$TMPDIR"
crashes=$(ls "$campaign" | grep -cE '^(crash|leak|timeout|oom)-' || true)
echo "fuzz.sh: $target: $(tail -n 50 "$campaign/fuzz.log" | grep -E '^#[0-9]+' | tail -1)"
echo "fuzz.sh: $target: $crashes crashing input(s) in $campaign (log: $campaign/fuzz.log)"
[ "$crashes" -eq 0 ]
