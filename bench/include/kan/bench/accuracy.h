#pragma once
/// `kanbench accuracy`: the KAN paper's accuracy tables (special functions, Feynman equations)
/// re-measured. For every function of a table it trains KANs through the library's pipeline
/// (kan::run_pipeline: the paper's grid extension, each grid a point of parameters against test
/// RMSE) and MLPs (kan::MLP) on the same samples, independent fits several at once, and hands
/// over each finished fit at once so that a killed run loses at most the fits in flight.
/// docs/accuracy.md describes the protocol and the presets.

#include "kan/results/results.h"

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace kan::bench {

/// One model to train: a fit of the plan, before it ran.
struct AccuracyModel {
  std::string function;
  std::string device;
  std::string family; ///< "kan" or "mlp"
  std::string role;   ///< results::AccuracyFit::role
  std::vector<int64_t> width;
  std::string activation; ///< MLPs
  uint64_t seed = 0;
  /// With a KAN: train the first grid with this sparsity regularisation (lamb), prune as pykan's
  /// prune() and go on without it (the paper's pruned KANs); none: no pruning.
  std::optional<double> prune_lamb;

  /// Its fit as the results name it, before anything is measured (no points).
  results::AccuracyFit unmeasured_fit() const;
  /// results::AccuracyFit::key() of its fit.
  std::string key() const;
};

struct AccuracyOptions {
  std::string table = "special";      ///< "special" or "feynman" (the catalogue's groups)
  std::vector<std::string> functions; ///< a subset of the table, in this order; empty: all
  std::string preset = "quick";       ///< "quick" or "paper"
  std::vector<std::string> devices = {"cpu"};
  /// Override the preset's seeds, steps per grid and grid schedule (empty / 0: the preset's).
  std::vector<uint64_t> seeds;
  int64_t steps = 0;
  std::vector<int64_t> grids;
  /// Add the paper's sparsified and pruned KANs (lamb 1e-2 and 1e-3) to every width-5 KAN.
  bool prune = false;
  int64_t train_num = 1000;
  int64_t test_num = 1000;
  /// Only this share of the plan's fits (kan/bench/shards.h), balanced by expected_cost; none:
  /// all of them.
  std::optional<results::Shard> shard;
  /// Fits at once; 0: the machine's cores / threads_per_fit.
  int64_t jobs = 0;
  /// Intra-op threads of each fit.
  int64_t threads_per_fit = 1;
  /// A previous, unfinished run of the same plan: its fits are kept and not run again. A run of
  /// another plan (table, preset, seeds, grids, steps, samples) is an error saying which differs.
  std::optional<results::AccuracyRun> resume;
  /// Called (one call at a time) with the run so far after every finished fit, and when the run
  /// starts: where the caller writes it (atomically) and reports progress.
  std::function<void(const results::AccuracyRun&, const results::AccuracyFit* finished)> on_fit;
};

/// The fits `options` stands for, in the order they start (function by function), with the
/// run's configuration (no fits yet): with options.shard, only that shard's share, and
/// planned_fits counts the share. Unknown functions, tables, presets or devices are errors naming
/// the option and the value.
results::AccuracyRun plan_accuracy(const AccuracyOptions& options,
                                   std::vector<AccuracyModel>* models = nullptr);

/// What a model's fit is expected to cost, in forward FLOPs: per LBFGS step a fixed cost (the
/// step's operations and line search, as FLOPs at the speed of the samples' arithmetic) plus the
/// training samples' forward FLOPs at each grid. Shards split the plan by it, and the console's
/// time left is the finished fits' pace times the cost still to run. Only ratios matter.
double expected_cost(const AccuracyModel& model, const results::AccuracyRun& run);

/// Trains one model on its function's samples (train_num / test_num drawn with the model's
/// seed, float64) and measures it. Never throws for a fit that fails (a diverged LBFGS, a device
/// error): the fit holds the error.
results::AccuracyFit run_accuracy_fit(const AccuracyModel& model, const results::AccuracyRun& run);

/// Runs the plan: every fit not in options.resume, `jobs` at a time. Returns the whole run,
/// summarised (results::summarize_accuracy).
results::AccuracyRun run_accuracy(const AccuracyOptions& options);

} // namespace kan::bench
