#pragma once
/// What training returns: kan::fit's history and kan::run_pipeline's stage records, as plain
/// structs without LibTorch (target kan::train_records), so that the document library
/// (kan::results, which writes and reads them as fit.json's) and the reports use them without
/// LibTorch, and kan does not link the document library for its own return types.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace kan {

// ---------------------------------------------------------------------------------------------
// The training history (kan::fit).

/// What one optimisation step measured. RMSE fields are sqrt(MSE) and NaN for cross-entropy;
/// test_accuracy is NaN for MSE; test fields are NaN when the test set is empty.
struct StepRecord {
  int64_t step = 0;
  double train_loss = 0; ///< loss of the last evaluation on the step's training batch
  double test_loss = 0;  ///< loss on the step's test batch after the step
  double train_rmse = 0;
  double test_rmse = 0;
  double test_accuracy = 0;
  double reg = 0; ///< regulariser (0 when lamb = 0)
  /// Wall time since fit() started, after this step. A step whose losses were not read at once
  /// (see kan::FitOptions::on_step) is timed when its work was queued: on a GPU, the device's
  /// time shows at the step where they are read (the epoch's last).
  double seconds = 0;
  bool grid_updated = false; ///< a grid update ran before this step
  /// Objective evaluations (forward and backward on the step's batch) the step took: 1 for Adam,
  /// LBFGS's iterations and line searches for LBFGS. It is what a step's time is made of: two
  /// LBFGS runs whose rounding differs take different numbers of evaluations for the same steps.
  int64_t evaluations = 0;
};

/// One pass over the training set (one step at full batch, N / batch steps otherwise).
struct EpochRecord {
  int64_t epoch = 0;
  int64_t last_step = 0;
  double train_loss = 0; ///< mean of the epoch's step losses, each weighted by its batch size
  double test_loss = 0;  ///< of the epoch's last step
  double train_rmse = 0; ///< sqrt of train_loss (MSE)
  double test_rmse = 0;
  double test_accuracy = 0;
  double reg = 0;
  double seconds = 0;       ///< since fit() started
  double epoch_seconds = 0; ///< this epoch alone
};

struct FitHistory {
  std::vector<StepRecord> steps;
  std::vector<EpochRecord> epochs;
  int64_t grid_updates = 0;
  double seconds = 0;
};

// ---------------------------------------------------------------------------------------------
// The stages of the pipeline (kan::run_pipeline).

/// One training of a pipeline and the model's metrics on the whole sets after it.
struct StageResult {
  FitHistory history;        ///< its seconds: the stage's training time
  double train_rmse = 0;     ///< NaN for cross-entropy
  double test_rmse = 0;      ///< NaN for cross-entropy or without test data
  double train_accuracy = 0; ///< cross-entropy only; NaN for MSE
  double test_accuracy = 0;
};

/// One layer of a width as pykan writes it: `sum` addition and `mult` multiplication nodes.
struct LayerWidth {
  int64_t sum = 0;
  int64_t mult = 0;
  int64_t nodes() const { return sum + mult; }
  bool operator==(const LayerWidth& other) const { return sum == other.sum && mult == other.mult; }
};

/// The pruning stage and the training after it.
struct PruneResult {
  std::vector<LayerWidth> width_before, width_after;
  /// The scores it pruned by: prune_node's, of the trained model's nodes (per layer), and
  /// prune_edge's, of the node-pruned model's edges (per layer, (in, out) as its masks).
  std::vector<std::vector<double>> node_scores;
  std::vector<std::vector<std::vector<double>>> edge_scores;
  StageResult retrained;
};

/// One step of the grid schedule: the grid refined to and the training at it.
struct RefineResult {
  int64_t grid = 0;
  StageResult trained;
};

/// One edge's learned activation beside its symbolic fit, at a few of its training inputs.
struct SymbolicCurve {
  std::vector<double> x;          ///< ascending
  std::vector<double> activation; ///< the learned activation at x, before auto_symbolic
  std::vector<double> fit;        ///< c f(a x + b) + d at x, with the fit's a, b, c, d
};

/// What auto_symbolic chose for one edge: layer `layer`'s input `i` -> output `j`.
struct SymbolicEdgeResult {
  int64_t layer = 0, i = 0, j = 0;
  std::string function; ///< "0" for a pruned edge
  double r2 = 0;        ///< pykan's R^2 (-1e8 for a pruned edge)
  bool fixed = false;   ///< false: r2 below the threshold, the edge stayed numeric
  /// a, b, c, d after the training (when fixed).
  std::vector<double> params;
  std::optional<SymbolicCurve> curve;
};

/// One output's formula.
struct Formula {
  std::string sympy;       ///< constants rounded to SymbolicResult::digits decimals
  std::string latex;       ///< the same
  std::string sympy_exact; ///< every constant with 17 significant digits
};

/// The symbolic stage and the training after it.
struct SymbolicResult {
  /// Curves are kept for this many fixed edges (the first ones), at this many points each.
  static constexpr size_t kMaxCurves = 100;
  static constexpr int64_t kCurvePoints = 48;

  double auto_symbolic_seconds = 0;
  std::vector<SymbolicEdgeResult> edges;
  std::optional<std::vector<Formula>> formula; ///< per output; none when an edge stayed numeric
  std::string formula_error;                   ///< why there is no formula
  int64_t digits = 4;
  StageResult retrained;
};

/// Every stage a pipeline ran, in order.
struct PipelineResult {
  StageResult trained;
  std::optional<PruneResult> pruned;
  std::vector<RefineResult> refined; ///< one per grid of the schedule
  std::optional<SymbolicResult> symbolic;

  /// Training time of all stages.
  double seconds() const {
    double total = trained.history.seconds;
    if (pruned)
      total += pruned->retrained.history.seconds;
    for (const auto& r : refined)
      total += r.trained.history.seconds;
    if (symbolic)
      total += symbolic->retrained.history.seconds;
    return total;
  }
  /// The last stage's metrics: those of the model run_pipeline leaves.
  const StageResult& last() const {
    if (symbolic)
      return symbolic->retrained;
    if (!refined.empty())
      return refined.back().trained;
    if (pruned)
      return pruned->retrained;
    return trained;
  }
  /// The last stage's key: "trained", "pruned", "refined" or "symbolic".
  std::string last_key() const {
    return symbolic ? "symbolic" : !refined.empty() ? "refined" : pruned ? "pruned" : "trained";
  }
};

} // namespace kan
