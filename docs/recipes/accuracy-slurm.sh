#!/usr/bin/env bash
# The KAN paper's special-functions table with its protocol on a Slurm cluster: a job array of
# TASKS tasks, each running its share of the fits (kanbench reads SLURM_ARRAY_TASK_ID and
# SLURM_ARRAY_TASK_COUNT) into runs/paper/shard-I-of-TASKS/, then a job that merges them once the
# array has ended. Run it where sbatch is:  bash docs/recipes/accuracy-slurm.sh [TASKS]
# A task that was killed or ran out of time resumes its share when resubmitted with the same
# index (sbatch --array=I ...); the merge says which shards are missing until then (exit 1).
set -euo pipefail
tasks=${1:-8}
array=$(sbatch --parsable --job-name=kan-paper --array=0-$((tasks - 1)) --cpus-per-task=8 \
  --time=24:00:00 --wrap "kanbench accuracy --table special --preset paper --jobs 8 --out runs/paper")
sbatch --job-name=kan-paper-merge --dependency=afterany:"$array" \
  --wrap "kanbench merge runs/paper/shard-*-of-$tasks --out runs/paper/merged"
