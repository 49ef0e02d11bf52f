#!/usr/bin/env bash
# The GPU runner: on a machine with an NVIDIA GPU, the CUDA toolkit, CMake, Ninja and a Python
# torch 2.11 (but none of the Debian packages), build kanbench against that torch, run every
# test including the *_CUDA ones, the default suite on cpu and cuda, and bench_kan; leave logs
# and results in OUTDIR.
#
#   tools/gpu-check.sh OUTDIR
#   KANBENCH_DEPS   folder of .deb files from tools/fetch-gpu-deps.sh (default: .deb), unpacked
#                   into a prefix under /tmp; or KANBENCH_DEPS_PREFIX, an already unpacked prefix
set -uo pipefail
out=${1:?usage: tools/gpu-check.sh OUTDIR}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
mkdir -p "$out"
log() { printf '[gpu-check %(%H:%M:%S)T] %s\n' -1 "$*" | tee -a "$out/gpu-check.log" >&2; }

prefix=${KANBENCH_DEPS_PREFIX:-}
if [ -z "$prefix" ]; then
  prefix=/tmp/kanbench-deps
  mkdir -p "$prefix"
  for deb in "${KANBENCH_DEPS:-$root/.deb}"/*.deb; do dpkg -x "$deb" "$prefix"; done
fi
export KANBENCH_CHARTJS=${KANBENCH_CHARTJS:-$prefix/usr/share/javascript/chart.js/chart.min.js}
torch_prefix=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')
build=${KANBENCH_BUILD:-/tmp/kanbench-build}
nvidia-smi > "$out/nvidia-smi.txt" 2>&1
log "torch $(python3 -c 'import torch; print(torch.__version__)'), deps in $prefix, build in $build"

log "configure and build"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$torch_prefix;$prefix/usr" -DCUDAToolkit_ROOT=/usr/local/cuda \
  > "$out/configure.log" 2>&1 || { log "configure failed (configure.log)"; exit 1; }
cmake --build "$build" -j"$(nproc)" > "$out/build.log" 2>&1 || { log "build failed (build.log)"; exit 1; }

log "tests (ctest, the *_CUDA ones included)"
(cd "$build" && ctest -j4 --timeout 600 --output-on-failure > "$out/ctest.log" 2>&1)
log "ctest: $(grep -E 'tests passed|tests failed' "$out/ctest.log" | tail -1)"

log "kanbench env and audit"
"$build/bin/kanbench" env --json "$out/env.json" > "$out/env.txt" 2>&1
"$build/bin/kanbench" audit --device cuda --width 2,5,1 --trace-steps 2 --json "$out/audit.json" \
  > "$out/audit.txt" 2>&1
log "audit exit code $?"

log "kanbench run --suite default --devices cpu,cuda"
"$build/bin/kanbench" run --suite default --devices cpu,cuda --trace "$out/trace.json" \
  --out "$out/run" > "$out/run.log" 2>&1
log "run exit code $?"

log "bench_kan"
"$build/bin/bench_kan" --benchmark_min_time=0.05 --benchmark_out="$out/bench_kan.json" \
  > "$out/bench_kan.txt" 2>&1
log "done"
