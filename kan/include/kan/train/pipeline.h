#pragma once
/// pykan's whole workflow as one call: train, prune and train again, extend the grid and train
/// again (once, or through a schedule such as the KAN paper's G = 3, 5, 10, 20, ...), fix every
/// edge to a symbolic function and train again (docs/kan.md, "The fit pipeline"). `kanbench fit`
/// and `kanbench accuracy` are this function and a command line.

#include "kan/nn/model.h"
#include "kan/nn/network.h"
#include "kan/train/fit.h"
#include "kan/train/records.h" // what each stage measured

#include <nlohmann/json_fwd.hpp>
#include <torch/arg.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace kan {

/// pykan's prune(node_th, edge_th) on the training inputs after the first training, then
/// `steps` more steps (unset: the fit's steps).
struct PruneStage {
  double node_th = 1e-2;
  double edge_th = 3e-2;
  std::optional<int64_t> steps;
};

/// pykan's auto_symbolic(lib, weight_simple, r2_threshold) on the training inputs after the
/// other stages, then `steps` more steps (unset: the fit's steps).
struct SymbolicStage {
  std::vector<std::string> lib = symbolic_function_names(); ///< kan/symbolic/symbolic.h's names
  double r2_threshold = 0.0;
  double weight_simple = 0.8;
  std::optional<int64_t> steps;
  std::string search = "pykan"; ///< a symbolic_search_names() name
};

/// The stages' options as fit.json's config.prune and config.symbolic hold them (docs/formats.md,
/// "fit.json"); unset steps are null. The readers are strict: a kan::io::JsonError names the key
/// path below `path`.
nlohmann::json to_json(const PruneStage& stage);
PruneStage prune_stage_from_json(const nlohmann::json& json, const std::string& path = "");
nlohmann::json to_json(const SymbolicStage& stage);
SymbolicStage symbolic_stage_from_json(const nlohmann::json& json, const std::string& path = "");

/// Which training of a pipeline is running, for progress and hooks.
struct PipelineStage {
  enum class Kind { kTrain, kPrune, kRefine, kSymbolic };
  Kind kind = Kind::kTrain;
  int64_t grid = 0;  ///< the model's grid while the stage trains
  int64_t steps = 0; ///< the stage's optimisation steps
  /// "trained", "pruned", "refined" or "symbolic": the stage's key in fit.json.
  std::string key() const;
};

/// Options of run_pipeline. Each stage after the first runs only when asked for.
struct PipelineOptions {
  /// The training of every stage (steps, optimiser, regularisation, hooks). Its on_step and
  /// stop_early apply to every stage; on_stage_step below also says which stage a step is of.
  TORCH_ARG(FitOptions, fit);
  TORCH_ARG(std::optional<PruneStage>, prune) = std::nullopt;
  /// The grid extension schedule after training (and pruning): the model is refined to each
  /// grid in turn (KANImpl::refine on the training inputs) and trained `fit.steps()` steps at
  /// each. Each grid must exceed the one before it (and the model's). Empty: no refinement.
  TORCH_ARG(std::vector<int64_t>, grids) = {};
  TORCH_ARG(std::optional<SymbolicStage>, symbolic) = std::nullopt;
  /// Called when a stage starts, before its own work (pruning, refinement, auto_symbolic).
  TORCH_ARG(std::function<void(const PipelineStage&)>, on_stage) = nullptr;
  /// Called after every step of every stage with the stage (progress). Setting it makes the
  /// host read each step's losses at once, as FitOptions::on_step does.
  TORCH_ARG(std::function<void(const PipelineStage&, const StepRecord&)>, on_stage_step) = nullptr;
  /// Trains one stage; empty: kan::fit. A caller that audits or traces a stage (kanbench fit's
  /// device audit of the first training) wraps kan::fit here.
  TORCH_ARG(
      std::function<FitHistory(KAN&, const Dataset&, const FitOptions&, const PipelineStage&)>,
      train) = nullptr;
};

/// One training of any model (an MLP, or a KAN without the later stages) and its metrics on the
/// whole sets after it: run_pipeline's first stage alone, in the same StageResult. `train` trains
/// it (empty: kan::fit), as PipelineOptions::train does; `kanbench fit --model mlp` audits it
/// there.
///
/// Example:
///   kan::MLP mlp(kan::MLPOptions({2, 100, 100, 1}).dtype(torch::kFloat64));
///   auto trained = kan::train_stage(*mlp, data, kan::FitOptions().steps(100));
///   std::cout << trained.test_rmse;
StageResult train_stage(
    Model& model, const Dataset& data, const FitOptions& options,
    const std::function<FitHistory(Model&, const Dataset&, const FitOptions&)>& train = nullptr);

/// A network's width in pykan's form; JSON [2, [2, 1], 1] (a plain integer where a layer has no
/// multiplication node), as --width takes it.
std::vector<LayerWidth> pykan_width(const KANOptions& options);
/// "2,[2,1],1": the width as `kanbench fit --width` takes it.
std::string width_text(const std::vector<LayerWidth>& width);

/// Runs the stages `options` asks for on `model` (replaced by the pruned and refined models as
/// they are made) with `data`, and returns what each measured. Options are checked before any
/// training: a grid schedule that does not grow, an unknown symbolic function or search.
///
/// Example:
///   kan::KAN model(kan::KANOptions({2, 5, 1}).grid(3).dtype(torch::kFloat64));
///   auto result = kan::run_pipeline(model, data, kan::PipelineOptions()
///                                                    .fit(kan::FitOptions().steps(200))
///                                                    .grids({5, 10, 20}));
///   std::cout << result.last().test_rmse;
PipelineResult run_pipeline(KAN& model, const Dataset& data, const PipelineOptions& options);

} // namespace kan
