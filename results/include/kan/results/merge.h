#pragma once
/// `kanbench merge`: the shards of one plan (results.json documents that `--shard I/N` or a
/// scheduler's task index split, kan/bench/shards.h) put together into the document one process
/// would have written, apart from timings and where each part ran. Free of LibTorch.

#include "kan/results/results.h"

#include <stdexcept>
#include <string>
#include <vector>

namespace kan::results {

/// One shard as merge reads it.
struct ShardDocument {
  std::string folder; ///< where it was read from: the messages name it
  Results results;
};

/// The merged document, and what it lacks.
struct MergedRun {
  /// One document: the plan's configuration (without a shard), every item once in plan order
  /// (accuracy: fits, with the summary derived again; run: cases, comparisons, edge cases and
  /// rehearsed cases; sweep: points and max-batch searches, with the best batches and crossovers
  /// derived again from all points), `shards` naming each shard's folder, run id and
  /// environment, and as the wall time the longest shard's. A fresh run id.
  Results results;
  /// One line per missing part: a shard no folder holds, or an accuracy shard that did not
  /// finish its share (say how many fits, and that running it again with the same options
  /// resumes it). Empty when the shards cover the plan.
  std::vector<std::string> missing;
};

/// Why shards cannot be merged, in one line that names the folders and what differs.
class MergeError : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

/// Merges `kanbench accuracy`, `run` or `sweep` shards. Refused (MergeError): no shards; a
/// scaling run; shards of different plans (the command; for accuracy its table, preset,
/// functions, devices, seeds, grids, steps and samples; for run and sweep the suite, targets,
/// workloads, repeat, time limit and every further setting; the shard count and kanbench version);
/// an item present twice with different results (a fit's points, a case's status and final
/// metric, a point's or edge case's status; the same results twice, as from a folder given
/// twice, count once). A document without a shard is the plan's only shard (0/1).
MergedRun merge_shards(const std::vector<ShardDocument>& shards);

} // namespace kan::results
