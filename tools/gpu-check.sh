#!/usr/bin/env bash
# The GPU runner: on a machine with an NVIDIA GPU, the CUDA toolkit, CMake, Ninja and a Python
# torch 2.11 (but none of the Debian packages), build kanbench against that torch, run the
# *_CUDA tests, the default suite on cpu and cuda, the sweeps, the GPU benchmarks, symbolic
# regression and data-parallel training; leave logs, results and summary.txt in OUTDIR.
#
#   tools/gpu-check.sh OUTDIR [STEP ...]     steps: build test audit rehearsal run sweep bench
#                                            symbolic distributed (default: these), cputest (on
#                                            request)
#
# Sized for a short lease of the machine (docs/gpu.md): the build compiles only
# for the GPU's own architecture and only what the GPU steps run; `test` runs the *_CUDA tests
# (the CPU ones run in CI: `cputest` builds and runs them here too); stop-on-noise is capped at
# 1 s a case. Steps can be split across calls (a device call is limited to 10 minutes): the
# build folder persists as long as the machine does. Exits 1 when a step failed (a test, the
# audit, a suite problem, bench_kan), 0 otherwise; summary.txt gathers every call's key lines.
#   KANBENCH_BUILD  build folder (default: build-gpu in the repository, git-ignored)
#   KANBENCH_DEPS   folder of .deb files from tools/fetch-gpu-deps.sh (default: .deb), unpacked
#                   into a prefix under /tmp; or KANBENCH_DEPS_PREFIX, an already unpacked prefix
#   KANBENCH_JOBS   parallel CPU tests (default: nproc / 2)
#   KANBENCH_CUDA_ARCH  compute capabilities to build the kernels for, "9.0" or "8.0;9.0"
#                   (default: those of this machine's GPUs, from nvidia-smi)
set -uo pipefail
default_steps="build test audit rehearsal run sweep bench symbolic distributed"
all_steps="$default_steps cputest"
out=${1:?usage: tools/gpu-check.sh OUTDIR [STEP ...], steps: $all_steps}
shift
steps=${*:-$default_steps}
# The architectures come from KANBENCH_CUDA_ARCH or the GPU, never from a TORCH_CUDA_ARCH_LIST the
# machine's image may set (often with architectures CUDA 13 has dropped), in every cmake call.
unset TORCH_CUDA_ARCH_LIST
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${KANBENCH_BUILD:-$root/build-gpu}
jobs=${KANBENCH_JOBS:-$(($(nproc) > 1 ? $(nproc) / 2 : 1))}
mkdir -p "$out"
out=$(cd "$out" && pwd)
started=$SECONDS
log() {
  printf '[gpu-check %(%H:%M:%S)T +%ds] %s\n' -1 $((SECONDS - started)) "$*" |
    tee -a "$out/gpu-check.log" | tee -a "$out/summary.txt" >&2
}
want() { [[ " $steps " == *" $1 "* ]]; }
for step in $steps; do
  [[ " $all_steps " == *" $step "* ]] ||
    { echo "gpu-check: unknown step '$step' ($all_steps)" >&2; exit 2; }
done
rc=0
fail() { rc=1; log "FAILED: $*"; }
log "steps: $steps"

prefix=${KANBENCH_DEPS_PREFIX:-}
if [ -z "$prefix" ]; then
  prefix=/tmp/kanbench-deps
  mkdir -p "$prefix"
  debs=("${KANBENCH_DEPS:-$root/.deb}"/*.deb)
  [ -e "${debs[0]}" ] || { log "no .deb files in ${KANBENCH_DEPS:-$root/.deb}: run tools/fetch-gpu-deps.sh and carry .deb"; exit 1; }
  for deb in "${debs[@]}"; do dpkg -x "$deb" "$prefix"; done
fi
export KANBENCH_CHARTJS=${KANBENCH_CHARTJS:-$prefix/usr/share/javascript/chart.js/chart.min.js}
export OMP_WAIT_POLICY=PASSIVE

if want build; then
  nvidia-smi > "$out/nvidia-smi.txt" 2>&1
  torch_prefix=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)') ||
    { log "python3 has no torch"; exit 1; }
  torch_cuda=$(python3 -c 'import torch; print(torch.version.cuda)')
  # The toolkit whose CUDA major version is torch's: a second libcudart major in one process
  # would give kanbench's kernels another runtime than LibTorch's streams.
  nvcc=/usr/local/cuda/bin/nvcc
  [ -x "$nvcc" ] || nvcc=$(command -v nvcc) || { log "no nvcc on this machine"; exit 1; }
  nvcc_release=$("$nvcc" --version | sed -n 's/.*release \([0-9.]*\).*/\1/p')
  if [ "${nvcc_release%%.*}" != "${torch_cuda%%.*}" ]; then
    log "nvcc $nvcc is CUDA $nvcc_release but torch is built for CUDA $torch_cuda"
    exit 1
  fi
  toolkit=$(cd "$(dirname "$nvcc")/.." && pwd)
  # CUPTI from the toolkit, or else from the nvidia wheel LibTorch itself loads it from.
  cupti=()
  if ! compgen -G "$toolkit/extras/CUPTI/lib64/libcupti.so*" >/dev/null &&
    ! compgen -G "$toolkit/lib*/libcupti.so*" >/dev/null; then
    wheel=$(python3 -c 'import torch, os; print(os.path.join(os.path.dirname(torch.__file__), "..", "nvidia", "cu'"${torch_cuda%%.*}"'"))')
    if [ -e "$wheel/include/cupti.h" ]; then
      cupti=(-DCUDAToolkit_CUPTI_INCLUDE_DIR="$wheel/include"
             -DCUDA_cupti_LIBRARY="$(ls "$wheel"/lib/libcupti.so* | head -1)")
    fi
  fi
  # The kernels for this machine's GPUs alone (KANBENCH_CUDA_ARCH overrides): one architecture
  # compiles fused_spline_cuda.cu in half the time of the default list (40 s against 80 s on the
  # development machine's two cores).
  arch=${KANBENCH_CUDA_ARCH:-$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null |
    sort -u | paste -sd';')}
  if ! [[ "$arch" =~ ^[0-9]+\.[0-9]+(\+PTX)?(\;[0-9]+\.[0-9]+(\+PTX)?)*$ ]]; then
    log "no compute capability from KANBENCH_CUDA_ARCH or nvidia-smi ('$arch'): the default list"
    arch="8.0;8.6;8.9;9.0+PTX"
  fi
  log "torch $(python3 -c 'import torch; print(torch.__version__)'), nvcc $nvcc_release ($toolkit), CUDA architectures $arch, deps in $prefix, build in $build"
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_PREFIX_PATH="$torch_prefix;$prefix/usr" -DCUDAToolkit_ROOT="$toolkit" \
    -DTORCH_CUDA_ARCH_LIST="$arch" -DCMAKE_CUDA_COMPILER="$nvcc" "${cupti[@]}" \
    > "$out/configure.log" 2>&1 ||
    { log "configure failed (configure.log)"; tail -20 "$out/configure.log" >&2; exit 1; }
  log "$(grep -E 'kanbench: NVTX3|kan: fused CUDA kernels' "$out/configure.log" | tr '\n' ' ')"
  # What the GPU steps run; `cputest` builds the rest.
  cmake --build "$build" -j"$(nproc)" --target kanbench kan_tests bench_kan > "$out/build.log" 2>&1 ||
    { log "build failed (build.log)"; grep -m5 -B2 -A5 'error' "$out/build.log" >&2; exit 1; }
  ldd "$build/bin/kanbench" | grep -E 'cuda|cupti|torch|benchmark' > "$out/ldd-kanbench.txt"
  log "built; kanbench loads $(grep -E 'libcudart|libcupti' "$out/ldd-kanbench.txt" | awk '{print $3}' | tr '\n' ' ')"
fi

# ctest in the build folder with the given arguments, its output in OUTDIR/LOG: a selection that
# matches no test or a test that fails is a failed step; its tally and failures go to the summary.
ctest_step() {
  local what=$1 log=$2
  shift 2
  (cd "$build" && ctest --no-tests=error --output-on-failure "$@" > "$out/$log" 2>&1) ||
    fail "$what ($log)"
  log "ctest ($what): $(grep -E 'tests passed|tests failed' "$out/$log" | tail -1)"
  grep -hE '^\s*[0-9]+ - .*\((Failed|SEGFAULT|Timeout|Subprocess aborted|Exception)' "$out/$log" |
    tee -a "$out/summary.txt" >&2
}

if want test; then
  # The *_CUDA tests one at a time (the out-of-memory edge case takes most of the card for a
  # moment), the fused kernels first: everything else trains on them.
  ctest_step "FusedBackend _CUDA" ctest-cuda-fused.log -j1 -R 'FusedBackend.*_CUDA' --timeout 300
  ctest_step "other _CUDA" ctest-cuda.log -j1 -R '_CUDA' -E 'FusedBackend' --timeout 300
  # The CPU tests whose targets or messages change where a GPU is present (devices "auto").
  ctest_step "CPU tests with a GPU present" ctest-gpu-present.log -j"$jobs" --timeout 300 \
    -R 'RunModel|Suite.Targets|Suite.StopOnNoise|Environment|Cli.Env|Cli.AuditThatCannotRun|Predict.MissingFiles|Cli.Sweep' \
    -E '_CUDA|HtmlReport|ResultsJson'
  # The fused backend once more on the per-thread CUDA kernels (the default is the block ones).
  KAN_CUDA_KERNELS=threads ctest_step "FusedBackend _CUDA, KAN_CUDA_KERNELS=threads" \
    ctest-cuda-threads.log -j1 -R 'FusedBackend.*_CUDA' --timeout 300
  grep -hE '\(Skipped\)' "$out"/ctest-cuda*.log | head -5 | tee -a "$out/summary.txt" >&2
fi

if want audit; then
  "$build/bin/kanbench" env --json "$out/env.json" > "$out/env.txt" 2>&1
  "$build/bin/kanbench" audit --device cuda --width 2,5,1 --trace-steps 2 --json "$out/audit.json" \
    > "$out/audit.txt" 2>&1 || fail "audit, exit $? (1 findings, 2 could not run; audit.txt)"
  "$build/bin/kanbench" audit --device cuda --width 2,5,1 --opt adam --json "$out/audit-adam.json" \
    > "$out/audit-adam.txt" 2>&1 || fail "audit --opt adam, exit $? (audit-adam.txt)"
  log "audits done"
fi

# The meta rehearsal held against the real run: every TorchScript fixture audited on meta and on
# cuda; rehearsal.txt lists, per fixture, the findings (problem at source line) each one saw. A
# GPU run stops at its first device error, so it sees a subset of the rehearsal's errors; its
# copies and synchronisations must be the rehearsal's.
if want rehearsal; then
  : > "$out/rehearsal.txt"
  for model in "$root"/tests/reference/torchscript/bugs/*.pt "$root"/tests/reference/torchscript/*.pt; do
    case $model in *.expected.pt) continue ;; esac
    name=$(basename "$(dirname "$model")")-$(basename "$model" .pt)
    inputs=$(python3 -c 'import json, sys, os
d = os.path.dirname(sys.argv[1]); f = os.path.basename(sys.argv[1])
print([e["inputs"] for e in json.load(open(os.path.join(d, "manifest.json"))) if e["file"] == f][0])' "$model")
    for device in meta cuda; do
      "$build/bin/kanbench" audit --device $device --model "$model" --trust-torchscript \
        --inputs "$inputs" --opt adam --json "$out/rehearsal-$name-$device.json" \
        > "$out/rehearsal-$name-$device.txt" 2>&1
      echo "$name $device exit $?" >> "$out/rehearsal.txt"
    done
    python3 - "$out/rehearsal-$name-meta.json" "$out/rehearsal-$name-cuda.json" "$name" \
      >> "$out/rehearsal.txt" 2>&1 <<'PY'
import json, sys
def seen(path):
    try:
        doc = json.load(open(path))
    except Exception as e:
        return {"(no audit.json: %s)" % e}
    return {f"{f.get('problem')} at {f.get('source', '?')} ({f.get('phase', '')})"
            for f in doc["findings"] if f.get("stage") == "trace"}
meta, cuda = seen(sys.argv[1]), seen(sys.argv[2])
print(sys.argv[3], "both:", sorted(meta & cuda))
print(sys.argv[3], "only rehearsed:", sorted(meta - cuda))
print(sys.argv[3], "only on cuda:", sorted(cuda - meta))
PY
  done
  grep -E 'only on cuda: \[.+\]' "$out/rehearsal.txt" | sed 's/^/rehearsal missed: /' |
    tee -a "$out/summary.txt" >&2
  log "rehearsal held against cuda (rehearsal.txt)"
fi

if want run; then
  "$build/bin/kanbench" run --suite default --devices cpu,cuda --cv-max-time 1 \
    --trace "$out/trace.json" --out "$out/run" > "$out/run.log" 2>&1 ||
    fail "kanbench run, exit $? (run.log)"
  grep -E ' vs |problem:|warning:|edge cases:' "$out/run.log" | tee -a "$out/summary.txt" >&2
  "$build/bin/kanbench" run --suite default --devices cuda --no-cupti --no-edge-cases \
    --cv-max-time 1 --out "$out/run-no-cupti" > "$out/run-no-cupti.log" 2>&1 ||
    fail "kanbench run --no-cupti, exit $? (run-no-cupti.log)"
  grep -E '^[^ ]+ on cuda: ' "$out/run-no-cupti.log" | sed 's/^/no cupti: /' |
    tee -a "$out/summary.txt" >&2
  # Each precision on the GPU against float32: speed and parity; each case from an emptied cache.
  "$build/bin/kanbench" run --suite default --case toy --case deep --devices cuda \
    --precision float32,tf32,bf16,fp16 --no-edge-cases --cv-max-time 1 --empty-cache \
    --out "$out/run-precision" \
    > "$out/run-precision.log" 2>&1 || fail "kanbench run --precision, exit $? (run-precision.log)"
  grep -E ' vs ' "$out/run-precision.log" | sed 's/^/precision: /' | tee -a "$out/summary.txt" >&2
fi

if want sweep; then
  # Throughput against batch size on cpu and every GPU, the crossover, and the max-batch search
  # at two memory caps (the whole H200, and a tenth of it standing in for a smaller GPU).
  # Stop-on-noise is capped at 1 s per point so that the step stays within a few minutes.
  "$build/bin/kanbench" sweep --suite default --case deep --devices cpu,cuda:all \
    --batch 64,256,1024,4096,16384 --max-batch --max-batch-limit 4194304 --cv-max-time 1 \
    --out "$out/sweep" > "$out/sweep.log" 2>&1 || fail "kanbench sweep, exit $? (sweep.log)"
  grep -E 'overtakes|best |max batch' "$out/sweep.log" | tee -a "$out/summary.txt" >&2
  "$build/bin/kanbench" sweep --suite default --case deep --devices cuda \
    --batch 1024,16384,262144 --max-batch --memory-fraction 0.1 --max-batch-limit 4194304 \
    --cv-max-time 1 --out "$out/sweep-capped" > "$out/sweep-capped.log" 2>&1 ||
    fail "kanbench sweep --memory-fraction 0.1, exit $? (sweep-capped.log)"
  grep -E 'best |max batch' "$out/sweep-capped.log" | sed 's/^/capped at 10%: /' |
    tee -a "$out/summary.txt" >&2
fi

if want bench; then
  # The GPU families (the CPU ones are measured on CI's machine), with the dense-GEMM yardstick;
  # the symbolic searches are the next step.
  "$build/bin/bench_kan" --benchmark_min_time=0.05 --benchmark_out="$out/bench_kan.json" \
    --benchmark_filter='^BM_(BsplineBasis|DenseEquivalentGemm|FitSteps|GridUpdate|Layer[A-Za-z]*|RegularisedStep|TrainStep)_CUDA' \
    > "$out/bench_kan.txt" 2>&1 || fail "bench_kan, exit $? (bench_kan.txt)"
  grep -E '^BM_.*_CUDA/' "$out/bench_kan.txt" | awk '{print $1, $2, $3, $NF}' |
    tee -a "$out/summary.txt" >&2
  # The layer families on the per-thread kernels, to compare with the block ones above.
  KAN_CUDA_KERNELS=threads "$build/bin/bench_kan" --benchmark_min_time=0.05 \
    --benchmark_out="$out/bench_kan_threads.json" \
    --benchmark_filter='BM_Layer(ForwardBackward|Forward|Activations)_CUDA' \
    > "$out/bench_kan_threads.txt" 2>&1 || fail "bench_kan threads, exit $? (bench_kan_threads.txt)"
  grep -E '^BM_.*_CUDA/' "$out/bench_kan_threads.txt" | awk '{print "threads:", $1, $2, $3}' |
    tee -a "$out/summary.txt" >&2
fi

if want symbolic; then
  # auto_symbolic on the deep model on the GPU, pykan's search of the whole library last.
  "$build/bin/bench_kan" --benchmark_out="$out/bench_symbolic.json" \
    --benchmark_filter='BM_FitSymbolicLayer_CUDA|BM_AutoSymbolicDeep_CUDA' \
    > "$out/bench_symbolic.txt" 2>&1 || fail "bench_kan symbolic, exit $? (bench_symbolic.txt)"
  grep -E '^BM_.*_CUDA/' "$out/bench_symbolic.txt" | awk '{print $1, $2, $3, $NF}' |
    tee -a "$out/summary.txt" >&2
fi
if want distributed; then
  # Data-parallel training with NCCL (docs/distributed.md): the scaling sweep over 1 .. every GPU,
  # then one torchrun launch of kanbench fit on every GPU.
  gpus=$(python3 -c 'import torch; print(torch.cuda.device_count())')
  nproc=$(seq -s, 1 "$gpus")
  "$build/bin/kanbench" scaling --suite full --case toy,deep --nproc "$nproc" --device cuda \
    --out "$out/scaling" > "$out/scaling.txt" 2>&1 ||
    fail "kanbench scaling on $gpus GPU(s), exit $? (scaling.txt)"
  grep -E 'rank\(s\)' "$out/scaling.txt" | grep -v '^scaling:' | tee -a "$out/summary.txt" >&2
  python3 -m torch.distributed.run --no-python --nproc-per-node "$gpus" "$build/bin/kanbench" \
    fit --distributed --device cuda --function exp_sin4 --width 4,100,100,100,1 --opt adam \
    --lr 0.001 --steps 50 --lamb 0.001 --train-num 1000 --test-num 1000 --trace-steps 0 \
    --out "$out/distributed" > "$out/distributed.txt" 2>&1 ||
    fail "torchrun kanbench fit --distributed on $gpus GPU(s), exit $? (distributed.txt)"
  tail -1 "$out/distributed.txt" | tee -a "$out/summary.txt" >&2
fi
if want cputest; then
  # The CPU tests (they need the whole build), with CI's timeout.
  if cmake --build "$build" -j"$(nproc)" > "$out/build-all.log" 2>&1; then
    ctest_step "CPU" ctest-cpu.log -j"$jobs" -E '_CUDA' --timeout 1200
  else
    fail "build of the CPU tests (build-all.log)"
  fi
fi
log "done: $steps (exit $rc)"
exit $rc
