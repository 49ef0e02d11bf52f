#!/usr/bin/env bash
# The main job: install what is missing, build, train pykan's reference model, then run the
# default benchmark suite on every device this machine has. Results go to kanbench-out/ (or $1).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
kanbench_build kanbench # the main job runs nothing else: no tests, no bench_kan
out=${1:-$KANBENCH_ROOT/kanbench-out}
"$KANBENCH_BUILD/bin/kanbench" fit --function toy --width 2,5,1 --grid 3 --k 3 --opt lbfgs \
  --steps 50 --seed 0 --dtype float64 --device cpu --refine 10 --out "$out/reference-fit"
"$KANBENCH_BUILD/bin/kanbench" run --suite default --devices auto --out "$out/default"
