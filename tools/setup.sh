#!/usr/bin/env bash
# Installs what kanbench needs, once per machine, and configures the build.
# Sourced by the two README commands; every step checks before it installs, so a
# second run downloads nothing.
#
#   KANBENCH_VENV   where the LibTorch virtual environment lives
#                   (default: ~/.cache/kanbench/venv-torch-<version>, shared by every
#                   clone on the machine because the wheel and its CUDA libraries are ~5 GB)
#   KANBENCH_BUILD  the build folder (default: build/ in the checkout)
#   KANBENCH_FUZZ_BUILD  the fuzz targets' build folder (default: build-fuzz/ in the checkout)
#
# It sets no shell options of its own: the scripts that source it run with `set -euo pipefail`.

KANBENCH_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
KANBENCH_TORCH_VERSION=2.11.0
KANBENCH_VENV=${KANBENCH_VENV:-${HOME:-/root}/.cache/kanbench/venv-torch-$KANBENCH_TORCH_VERSION}
KANBENCH_BUILD=${KANBENCH_BUILD:-$KANBENCH_ROOT/build}
KANBENCH_FUZZ_BUILD=${KANBENCH_FUZZ_BUILD:-$KANBENCH_ROOT/build-fuzz}

kanbench_log() { printf '[kanbench setup] %s\n' "$*" >&2; }

kanbench_install_debian_packages() {
  # chromium: the HTML report's browser test (skipped, with that reason, where it is missing)
  # clang-format: the formatting check (tools/check-format.sh, a ctest)
  # libgloo-dev: declarations for c10d's Gloo backend (kan/CMakeLists.txt says why)
  # libboost-dev: Boost.Math's headers, for the function catalogue's Jacobi elliptic functions
  # zlib1g-dev: inflates np.savez_compressed's .npz files (kan's data files)
  # clang-14, libclang-rt-14-dev: the fuzz targets (libFuzzer, tests/fuzz)
  local wanted=(cmake ninja-build g++ libgtest-dev libbenchmark-dev nlohmann-json3-dev
                libcli11-dev libyaml-cpp-dev libjs-chart.js chromium clang-format libgloo-dev
                libboost-dev zlib1g-dev clang-14 libclang-rt-14-dev)
  local missing=() package
  for package in "${wanted[@]}"; do
    dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q 'install ok installed' ||
      missing+=("$package")
  done
  # A Python that can make virtual environments (a stock Debian 12 has none; a machine with its
  # own Python, such as pyenv's, needs nothing).
  command -v python3 >/dev/null && python3 -c 'import ensurepip, venv' 2>/dev/null ||
    missing+=(python3 python3-venv)
  [ ${#missing[@]} -eq 0 ] && return 0
  local sudo=()
  [ "$(id -u)" -eq 0 ] || sudo=(sudo)
  kanbench_log "installing Debian packages: ${missing[*]}"
  "${sudo[@]}" apt-get update -q
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
}

kanbench_torch_ok() {
  "$KANBENCH_VENV/bin/python" - "$KANBENCH_TORCH_VERSION" 2>/dev/null <<'PY'
import sys, torch
sys.exit(0 if torch.__version__.split("+")[0] == sys.argv[1] else 1)
PY
}

kanbench_install_torch() {
  kanbench_torch_ok && return 0
  kanbench_log "installing torch==$KANBENCH_TORCH_VERSION (LibTorch, CUDA 13.0 build) into $KANBENCH_VENV"
  python3 -m venv "$KANBENCH_VENV"
  "$KANBENCH_VENV/bin/python" -m pip install -q --disable-pip-version-check "torch==$KANBENCH_TORCH_VERSION"
  kanbench_torch_ok || { kanbench_log "torch $KANBENCH_TORCH_VERSION is not importable from $KANBENCH_VENV"; return 1; }
}

# Configures when the build folder is new or when what it was configured with changed (another
# virtual environment or torch, CI's -Werror, the CUDA toolkit); otherwise the build reuses it.
kanbench_configure() {
  local torch_prefix
  torch_prefix=$("$KANBENCH_VENV/bin/python" -c 'import torch; print(torch.utils.cmake_prefix_path)' 2>/dev/null)
  local werror=OFF
  [ "${CI:-}" = true ] && werror=ON
  local cuda_args=()
  [ -x /usr/local/cuda/bin/nvcc ] && cuda_args=(-DCUDAToolkit_ROOT=/usr/local/cuda)
  local stamp="$KANBENCH_BUILD/kanbench-configure.stamp"
  local wanted="torch_prefix=$torch_prefix werror=$werror cuda=${cuda_args[*]-}"
  if [ ! -f "$KANBENCH_BUILD/build.ninja" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$wanted" ]; then
    cmake -S "$KANBENCH_ROOT" -B "$KANBENCH_BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_PREFIX_PATH="$torch_prefix" -DKAN_WARNINGS_AS_ERRORS="$werror" ${cuda_args[@]+"${cuda_args[@]}"} >&2
    printf '%s' "$wanted" > "$stamp"
  fi
}

# kanbench_build [TARGET...]: everything, or only the targets named (and what they need).
kanbench_build() {
  kanbench_install_debian_packages
  kanbench_install_torch
  kanbench_configure
  cmake --build "$KANBENCH_BUILD" -j"$(nproc)" ${1+--target "$@"}
}

# Whether this machine has clang-14 with libFuzzer (Debian's clang-14 and libclang-rt-14-dev), which
# the fuzz targets need; says so when not.
kanbench_have_libfuzzer() {
  command -v clang++-14 >/dev/null &&
    [ -n "$(ls /usr/lib/llvm-14/lib/clang/*/lib/linux/libclang_rt.fuzzer-*.a 2>/dev/null)" ] && return 0
  kanbench_log "no clang-14 with libFuzzer (Debian's clang-14 and libclang-rt-14-dev): the fuzz targets are not built"
  return 1
}

# The fuzz targets' build (tests/fuzz): clang-14 with libFuzzer, ASan and UBSan in every library,
# the CUDA kernels left out (nvcc code is not instrumented), nothing but the libraries and the
# targets built.
kanbench_build_fuzzers() {
  local torch_prefix
  torch_prefix=$("$KANBENCH_VENV/bin/python" -c 'import torch; print(torch.utils.cmake_prefix_path)')
  if [ ! -f "$KANBENCH_FUZZ_BUILD/build.ninja" ]; then
    # -O1 with line tables: fast enough to fuzz, readable stack traces, and quick to compile.
    cmake -S "$KANBENCH_ROOT" -B "$KANBENCH_FUZZ_BUILD" -G Ninja -DCMAKE_BUILD_TYPE= \
      -DCMAKE_CXX_COMPILER=clang++-14 -DCMAKE_CXX_FLAGS="-O1 -gline-tables-only" \
      -DCMAKE_PREFIX_PATH="$torch_prefix" -DKAN_BUILD_FUZZERS=ON -DKAN_WITH_CUDA_KERNELS=OFF >&2
  fi
  cmake --build "$KANBENCH_FUZZ_BUILD" -j"$(nproc)"
}
