#pragma once
/// `kanbench sweep`: a workload's throughput against the batch size on every target, where one
/// target overtakes another (the CPU/GPU crossover), where throughput stops growing, and the
/// largest batch that fits in memory (the max-batch search).

#include "kan/bench/suite.h"

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace kan::bench {

/// What the max-batch search found.
struct MaxBatchSearch {
  std::optional<int64_t> largest; ///< the largest batch that fit; nullopt: not even `start`
  std::vector<std::pair<int64_t, bool>> attempts; ///< every batch tried, in order, and whether
  std::string bound; ///< "memory" (a batch did not fit) or "limit" (`limit` fit)
};

/// The largest batch in [start, limit] for which `fits` holds, assuming that a batch fits when a
/// larger one does: doubling from `start` until a batch does not fit (or `limit` is reached),
/// then bisection between the last batch that fit and the first that did not, to within
/// `resolution` (relative: 1/64 of the batch by default, so a search takes about 6 + log2 steps
/// more than the doubling).
///
/// Example (a stand-in for the GPU):
///   auto r = kan::bench::search_max_batch([](int64_t b) { return b <= 3000; }, 16, 1 << 20);
///   // r.largest is within 3000 * (1 - 1/64) .. 3000, r.bound == "memory"
MaxBatchSearch search_max_batch(const std::function<bool(int64_t)>& fits, int64_t start,
                                int64_t limit, double resolution = 1.0 / 64);

/// Whether one training step of `workload` at `batch` samples (fresh model, random inputs in
/// the first grid's range) fits in `target`'s memory: an out-of-memory error is caught, the
/// caching allocator emptied, and the answer is false. Other errors propagate.
bool trains_one_step(const Workload& workload, const Target& target, int64_t batch);

struct SweepOptions {
  std::string suite = "default";
  std::string devices = "auto";
  std::vector<std::string> cases = {"deep"};
  /// A user's model to sweep instead of `cases` (model_workload: any model file, in its own
  /// dtype); "" = none. With it: trust_torchscript, model_inputs, data, data_options and loss, as
  /// SuiteOptions has them. Without `data`, each point's training set is the synthetic regression
  /// enlarged to its batch; with it, the file's training rows, which bound the batches (an error
  /// for a larger one; "auto" stops there).
  std::string model;
  bool trust_torchscript = false;
  int64_t model_inputs = 0;
  std::string data;
  LoadDatasetOptions data_options;
  Loss loss = Loss::kMSE;
  /// Batch sizes, each >= 1; empty: "auto", the powers of two from 16 up to the training set
  /// (rounded up to a power of two), and on a GPU up to the largest batch that fits.
  std::vector<int64_t> batches;
  /// Timed epochs per point; 0 = the suite's own count.
  int64_t repeat = 0;
  /// Per-point limit; 0 = the suite's default.
  double time_limit_seconds = 0;
  /// Stop-on-noise (SuiteOptions): target CV and timed seconds per point (0: suite default).
  double cv_target = 0.02;
  double cv_max_seconds = 0;
  /// CUDA memory cap (SuiteOptions::memory_fraction) and emptying the cache between points.
  double memory_fraction = 0;
  bool empty_cache = false;
  /// Run the max-batch search on every GPU target (it always runs for "auto" batches).
  bool max_batch = false;
  /// The search's upper bound, in samples.
  int64_t max_batch_limit = int64_t{1} << 24;
  /// Only this share of the plan (kan/bench/shards.h), balanced by expected cost: single points
  /// (a batch on a target) and each target's max-batch search. A shard plans its batches without
  /// the searches, so that every shard plans the same points: "auto" is then the powers of two
  /// from 16 up to the training set, and a point that does not fit is out of memory. None: all.
  std::optional<results::Shard> shard;
  std::function<void(const Progress&)> on_progress;
};

/// Runs the sweep: every batch size of every case on every target, each point a run_case with
/// the training set enlarged to at least one batch (throughput is samples per second, so points
/// with different epoch sizes compare). Never throws for a point that fails: it is recorded
/// with its status and reason. The results have no cases; `sweep` holds everything.
///
/// Example:
///   auto results = kan::bench::run_sweep({.suite = "quick", .batches = {64, 256, 1024}});
///   for (const auto& c : results.sweep->crossovers) std::cout << c.message << "\n";
results::Results run_sweep(const SweepOptions& options);

} // namespace kan::bench
