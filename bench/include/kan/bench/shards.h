#pragma once
/// Shards: one plan of independent work items (accuracy's fits, run's cases, sweep's points) run
/// as N processes, each taking its share, on whatever runs them: `--shard I/N`, a Slurm job array,
/// a Kubernetes indexed Job, a CI matrix. Each process finds its index and the count, takes a share
/// balanced by the items' expected cost, and writes a complete results.json of its share; `kanbench
/// merge` puts the shares together (kan/results/merge.h). docs/accuracy.md, "Shards", has the
/// recipes.

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

/// The unit of every plan's expected costs: one optimiser step over `samples` samples of a model
/// of `forward_flops` FLOPs per sample's forward pass costs a fixed part (the optimiser's
/// bookkeeping, launches) plus the samples' FLOPs. Calibrated on the fits of docs/accuracy.md
/// ("Parallel fits"): an [n, 5, 5, 1] MLP's 400 steps on 1000 samples take 1 s, nearly all the
/// fixed part; an [n, 100, 100, 1] MLP's take 24 s, nearly all FLOPs.
double expected_step_cost(double samples, double forward_flops);
/// About what a 2-core machine gets through in a second of that unit: it turns the parts of a plan
/// that are bounded in time (stop-on-noise's cap, the edge cases) into costs.
inline constexpr double kExpectedCostPerSecond = 3.4e8;

/// The time left of a plan from the pace of its finished items, in expected cost a second:
/// accuracy's fits, run's cases and sweep's points each have their own expected cost, so a wide
/// MLP or a deep workload to go is most of the time left, a small KAN nearly none.
class TimeLeft {
public:
  /// More items to run, of expected cost `cost` in all.
  void add(double cost) { cost_left_ += cost; }
  /// An item of expected cost `cost` finished, `elapsed_seconds` after the plan started.
  void finished(double cost, double elapsed_seconds);
  /// Seconds left, at the pace so far: the cost not finished, less what the item under way (of
  /// cost `under_way_cost`, begun `under_way_seconds` ago) has done at that pace. Negative while
  /// no item with a cost has finished.
  double seconds_left(double under_way_cost = 0, double under_way_seconds = 0) const;

private:
  double cost_left_ = 0, cost_done_ = 0, elapsed_at_last_ = 0;
};

/// The file a shard writes where the plan names one `file` for all ("trace.json" ->
/// "trace.shard-2-of-8.json"), so that shards never share one.
std::string shard_file(const std::string& file, const results::Shard& shard);

/// The folder shard `shard` writes under `out`: out/shard-I-of-N, so that the shards of one
/// --out never share a file.
std::string shard_folder(const std::string& out, const results::Shard& shard);

} // namespace kan::bench
