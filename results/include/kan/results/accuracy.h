#pragma once
/// `kanbench accuracy`: the KAN paper's tables re-measured, as results.json's `accuracy` section
/// (from schema 1.5). Plain structs, free of LibTorch: the runner (kan/bench/accuracy.h) fills
/// `fits` and each function's `published` numbers; summarize_accuracy() derives the rest, and the
/// strict reader refuses a summary that contradicts the fits. results/SCHEMA.md documents every
/// key.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace kan::results {

/// One trained stage of one model: what the model measured after it.
struct AccuracyPoint {
  std::string stage;         ///< "trained", "pruned" or "refined" (kan::PipelineStage::key())
  int64_t grid = 0;          ///< the KAN's grid during the stage; 0 for an MLP
  int64_t parameters = 0;    ///< trainable scalars of the model after the stage
  int64_t forward_flops = 0; ///< per sample, of the model after the stage
  double train_rmse = 0;     ///< NaN when not measured or diverged (written null)
  double test_rmse = 0;      ///< NaN (or infinite) when diverged: then never a best or on a front
  double seconds = 0;        ///< the stage's training time

  /// NaN RMSEs compare equal: a diverged stage read back from its JSON null is the same stage.
  bool operator==(const AccuracyPoint&) const;
};

/// One model trained on one function with one seed on one device.
struct AccuracyFit {
  std::string function;       ///< the catalogue's name, "jv"
  std::string device;         ///< "cpu", "cuda:0"
  std::string family;         ///< "kan" or "mlp"
  std::string role;           ///< why this model: "minimal", "best", "width5" (KANs), "width5",
                              ///< "width100" (MLPs)
  std::vector<int64_t> width; ///< nodes per layer, [2,5,1]
  std::string activation;     ///< an MLP's: "silu", "tanh", "relu"; "" for a KAN
  uint64_t seed = 0;
  std::vector<AccuracyPoint> points; ///< in training order; empty when the fit failed
  double seconds = 0;                ///< wall time of the whole fit
  std::string error;                 ///< why the fit failed; "" when it did not
  /// The machine that ran it (its hostname; from 1.9): shards merged from several machines
  /// keep where each fit ran.
  std::optional<std::string> host;

  /// Identifies the fit within a run (what a resumed run skips):
  /// "jv/cpu/kan/[2,5,1]/seed0", "jv/cpu/mlp/[2,100,100,1]/tanh/seed2": function, device,
  /// family, width, the activation when there is one, seed. `role` is not part of it, except
  /// for a pruned KAN's ("jv/cpu/kan/[2,5,1]/pruned-lamb0.01/seed0"): its training differs.
  std::string key() const;
  bool operator==(const AccuracyFit&) const;
};

/// The paper's numbers for one function, as its data file holds them (empty: not verified).
struct PublishedAccuracy {
  std::string source; ///< the table they come from: "arXiv:2404.19756 Table 1 (Special functions)"
  std::vector<int64_t> minimal_kan_width;
  std::optional<double> minimal_kan_test_rmse;
  std::vector<int64_t> best_kan_width;
  std::optional<double> best_kan_test_rmse;
  std::optional<double> mlp_test_rmse;

  bool operator==(const PublishedAccuracy&) const;
};

/// A point of one fit: the fit's index in AccuracyRun::fits and the point's in its `points`.
struct AccuracyPointRef {
  int64_t fit = 0;
  int64_t point = 0;
  bool operator==(const AccuracyPointRef&) const;
};

/// One function on one device: what its fits reached.
struct AccuracyFunction {
  std::string function;
  std::string device;
  std::string formula;                        ///< the catalogue's
  std::optional<PublishedAccuracy> published; ///< none: the paper's tables do not have it
  // Derived by summarize_accuracy():
  int64_t fits = 0;                         ///< finished fits (failed ones included)
  int64_t failed = 0;                       ///< of them, failed
  std::optional<AccuracyPointRef> best_kan; ///< the KAN point of lowest test RMSE
  std::optional<AccuracyPointRef> best_mlp;
  /// Both families' points that no other point beats in parameters and test RMSE together,
  /// parameters ascending (test RMSE then strictly descending).
  std::vector<AccuracyPointRef> pareto;
  /// The paper's finding reproduced: the best KAN's test RMSE <= the best MLP's. None without
  /// both.
  std::optional<bool> kan_beats_mlp;
  double seconds = 0; ///< the fits' wall time, summed

  bool operator==(const AccuracyFunction&) const;
};

/// A whole `kanbench accuracy` run.
struct AccuracyRun {
  std::string table;                  ///< "special" or "feynman"
  std::string preset;                 ///< "quick" or "paper"
  std::vector<std::string> functions; ///< in the order run
  std::vector<std::string> devices;
  std::vector<uint64_t> seeds;
  int64_t train_num = 1000;
  int64_t test_num = 1000;
  std::vector<int64_t> grids; ///< the KANs' grid schedule, [3, 5, 10, 20]
  int64_t steps = 200;        ///< LBFGS steps per grid (and of an MLP's training, per grid)
  int64_t jobs = 1;           ///< fits run at once
  int64_t threads_per_fit = 1;
  int64_t planned_fits = 0;              ///< fits the run consists of; fits.size() when complete
  std::vector<AccuracyFit> fits;         ///< every finished fit, in the order they finished
  std::vector<AccuracyFunction> summary; ///< one per function and device, in run order
  double wall_seconds = 0; ///< of all sessions of the run (a resumed run adds its own)

  bool operator==(const AccuracyRun&) const;
};

/// A width as the paper writes shapes and fit keys hold them: "[2,5,1]".
std::string width_text(const std::vector<int64_t>& width);

/// Sets every summary entry's derived fields (fits, failed, best_kan, best_mlp, pareto,
/// kan_beats_mlp, seconds) from run.fits, keeping function, device, formula and published.
/// Every point of the entry's fits counts (a failed fit's too, should it have any), except one
/// whose test RMSE is not finite. A best is the point of lowest test RMSE; of equal ones, the
/// one with fewer parameters, then the first (in fit order, then training order).
void summarize_accuracy(AccuracyRun& run);

/// How often a run shows the paper's finding (the best KAN's test RMSE at most the best MLP's):
/// over the summary entries (function and device) that have both a KAN and an MLP to compare.
/// `kan_role` "" takes every KAN (the summary's best); a role ("minimal": the paper's minimal
/// shapes) takes the best KAN of that role alone, against the same best MLP.
struct FindingCount {
  int64_t holds = 0;
  int64_t compared = 0;
};
FindingCount finding_count(const AccuracyRun& run, const std::string& kan_role = "");

/// The finding in one line for a console: "the paper's finding (best KAN <= best MLP) holds for 9
/// of 15 functions (with the paper's minimal KAN shapes alone: 7 of 15)"; the second count where
/// the run trained other KANs beside the minimal shapes.
std::string finding_text(const AccuracyRun& run);

/// Whether the run trained KANs of `role` and KANs of other roles too (so that the count of that
/// role alone says something of its own).
bool has_other_kans(const AccuracyRun& run, const std::string& role);

/// The Pareto front of one function on one device: the points of the fits of `family` ("kan",
/// "mlp"; "" for both) that no other point dominates (has no more parameters and no higher test
/// RMSE, and is below in one of them). Parameters ascending, test RMSE strictly descending; of
/// equal points the first; points whose test RMSE is not finite are left out. What
/// summarize_accuracy() sets as `pareto` (family "") and the report draws per family.
std::vector<AccuracyPointRef> pareto_front(const AccuracyRun& run, const std::string& function,
                                           const std::string& device, const std::string& family);

} // namespace kan::results
