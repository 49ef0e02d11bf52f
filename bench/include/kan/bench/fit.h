#pragma once
/// `kanbench fit`: one training run of any model, recorded. A KAN goes through kan::run_pipeline
/// (training, then pruning, grid refinement and auto_symbolic as asked, training again after
/// each); an MLP baseline and a model file's model are trained once (kan::train_stage). The first
/// training runs under the device audit. The record (fit.json, kan/results/fit_record.h) and the
/// trained model (model.pt, in the format the model came in) are written together into one
/// folder. docs/commands.md describes the command.

#include "kan/data/data_file.h"
#include "kan/diagnostics/fit_setup.h"
#include "kan/distributed/data_parallel.h"
#include "kan/nn/model.h"
#include "kan/results/fit_record.h"
#include "kan/train/pipeline.h"

#include <torch/types.h>

#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>

namespace kan::bench {

/// What to train, on what, and where to write it. Option names in its errors are those of
/// `kanbench fit`.
struct FitRequest {
  /// The run as fit.json records it: the reference function and its sample counts, the seed,
  /// the grid schedule (`refine`), the traced steps, and the pykan checkpoint to start from
  /// (`initial_model`, empty: a new model). The device, the data and the data-parallel run are
  /// filled in from the fields below.
  results::FitConfig config;
  /// The model's and the stages' options. A new KAN is drawn from `setup.model` (its width set,
  /// its dtype from `dtype`), an MLP from `setup.mlp` (its width set); seeds come from
  /// config.seed. Pruning's and the symbolic stage's steps must be set.
  diagnostics::FitSetup setup;
  /// A model file (kanbench checkpoint, or TorchScript archive with trust_torchscript) trained as
  /// it is; empty: the model setup.model_kind names, built here.
  std::string model_file;
  bool trust_torchscript = false;
  /// The model's floating type; none: float64 for a new model, the file's otherwise.
  std::optional<torch::Dtype> dtype;
  /// A data file to train on instead of the reference function (kan::load_dataset); its seed,
  /// dtype and device are set here.
  std::string data;
  LoadDatasetOptions data_options;
  torch::Device device = torch::kCPU;
  /// A joined data-parallel group (kan::DataParallel::join): every rank trains on
  /// group->device(), rank 0 alone writes. None: one process.
  std::shared_ptr<DataParallel> group;
  /// The output folder: fit.json and model.pt.
  std::string out = "kanbench-out/fit";
};

/// What a caller shows while the fit runs; each may be empty. Called on the rank that writes only.
struct FitProgress {
  /// Training is about to begin: what the run is called (the function, or the data file's name)
  /// and what kind of model it trains.
  std::function<void(const std::string& subject, ModelKind kind)> on_start;
  /// The data file's description, once it is read.
  std::function<void(const std::string& description)> on_data;
  /// A stage begins; `functions` is the symbolic library's size for the symbolic stage.
  std::function<void(const PipelineStage& stage, size_t functions)> on_stage;
  /// A step of a stage ended.
  std::function<void(const PipelineStage& stage, const StepRecord& step)> on_step;
  /// The first training's device audit is done.
  std::function<void(const diagnostics::AuditedFit& audited)> on_audit;
};

/// What a fit did.
struct FitOutcome {
  results::FitRecord record;
  /// fit.json's path; empty on a rank that does not write.
  std::string fit_json;
  /// What progress and the summary call the run: the function, or the data file's name.
  std::string subject;
  /// The trained model's floating type and device.
  torch::Dtype dtype = torch::kFloat64;
  torch::Device device = torch::kCPU;
};

/// Trains as `request` asks and writes DIR/fit.json and DIR/model.pt (on rank 0 of a group).
/// Everything that can be checked before training is: the model against the data's width, the
/// output folder, a KAN's memory. Errors name the option and its value.
///
/// Example:
///   kan::bench::FitRequest request;
///   request.config.function = "toy";
///   request.out = "out";
///   const auto outcome = kan::bench::run_fit(request);
///   std::cout << outcome.record.last().test_rmse;
FitOutcome run_fit(FitRequest request, const FitProgress& progress = {});

} // namespace kan::bench
