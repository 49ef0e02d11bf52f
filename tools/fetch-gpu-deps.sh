#!/usr/bin/env bash
# Downloads (does not install) the Debian packages kanbench builds against into .deb/, for a
# GPU machine that has CUDA, CMake, Ninja and a Python torch but no Debian packages and no
# network: carry .deb/ there and run tools/gpu-check.sh. Idempotent.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
mkdir -p "$root/.deb"
cd "$root/.deb"
# libboost-dev is only the default-version pointer: the headers and Boost's CMake package
# (BoostConfig.cmake, found under the unpacked prefix's usr/lib/<arch>/cmake) are libboost1.74-dev's.
packages=(nlohmann-json3-dev libcli11-dev libgtest-dev libbenchmark-dev libbenchmark1debian
          libjs-chart.js libyaml-cpp-dev libyaml-cpp0.7 libgloo-dev libboost-dev libboost1.74-dev
          zlib1g-dev)
missing=()
for p in "${packages[@]}"; do
  ls "${p}"_*.deb >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  apt-get update -q >/dev/null
  apt-get download "${missing[@]}"
fi
ls -1 "$root/.deb"
