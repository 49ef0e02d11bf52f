#pragma once
/// Shards: one plan of independent work items (accuracy's fits) run as N processes, each taking
/// its share, on whatever runs them: `--shard I/N`, a Slurm job array, a Kubernetes indexed Job,
/// a CI matrix. Each process finds its index and the count, takes a share balanced by the items'
/// expected cost, and writes a complete results.json of its share; `kanbench merge` puts the
/// shares together (kan/results/merge.h). docs/accuracy.md, "Shards", has the recipes.

#include "kan/results/results.h"

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace kan::bench {

/// "I/N" as --shard takes it: 0 <= I < N. Anything else is an error naming `option` and the
/// value.
results::Shard parse_shard(const std::string& text, const std::string& option = "--shard");

/// Reads an environment variable; null where it is unset. Tests pass their own.
using EnvironmentLookup = std::function<const char*(const char*)>;

/// The share a scheduler gave this process, from the first of these that is set:
/// - Slurm job arrays: SLURM_ARRAY_TASK_ID, with SLURM_ARRAY_TASK_COUNT tasks numbered from
///   SLURM_ARRAY_TASK_MIN (default 0) in steps of SLURM_ARRAY_TASK_STEP (default 1);
/// - Kubernetes indexed Jobs: JOB_COMPLETION_INDEX, with `count` (the Job's completions, from the
///   command line: Kubernetes sets no count);
/// - GoogleTest's sharding protocol, which CI systems use: GTEST_SHARD_INDEX and
///   GTEST_TOTAL_SHARDS.
/// None set: none. A variable that is malformed, an index outside its count, or an index without
/// its count is an error naming the variables and their values. `source` is the index's variable.
std::optional<results::Shard> shard_from_environment(const EnvironmentLookup& lookup,
                                                     std::optional<int64_t> count = std::nullopt);
/// The same with the process's environment.
std::optional<results::Shard> shard_from_environment(std::optional<int64_t> count = std::nullopt);

/// The items of shard `shard` among items of expected costs `costs`, in their original order:
/// the costliest first, each to the shard with the least cost so far (the lowest index among
/// equals). Every process computes the same split, and the shards' sums differ by at most the
/// costliest item.
std::vector<size_t> shard_share(const std::vector<double>& costs, const results::Shard& shard);

/// The folder shard `shard` writes under `out`: out/shard-I-of-N, so that the shards of one
/// --out never share a file.
std::string shard_folder(const std::string& out, const results::Shard& shard);

} // namespace kan::bench
