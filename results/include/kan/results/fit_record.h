#pragma once
/// fit.json (docs/formats.md, "fit.json"): what one `kanbench fit` ran and what each stage of
/// kan::run_pipeline measured. One type, FitRecord, with one JSON form (to_json) and one reader
/// (fit_record_from_json), without LibTorch, so that the report reads what kanbench writes. The
/// stage records are kan's own (kan/train/records.h).
///
/// Four parts belong to LibTorch's side and are kept here as the JSON their owners write:
/// config.model (kan::KANOptions or kan::MLPOptions), config.fit (kan::FitOptions), config.prune
/// and config.symbolic (kan::PruneStage, kan::SymbolicStage) and device_audit
/// (kan::diagnostics::AuditedFit). This reader checks their shape only where the document's
/// other parts depend on it (model_shape); kan::diagnostics::read_fit_record_strict
/// (kan/diagnostics/fit_setup.h) reads a whole file with every part checked by its owner.

#include "kan/train/records.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace kan::results {

/// The version of fit.json kanbench writes and the newest this reader knows; it reads every 2.x
/// (2.1: config.data, config.model_kind, an MLP's configuration, and the final model's parameters
/// and forward FLOPs; 2.2: config.model_kind "torchscript" with the module's description as
/// config.model; the history of 1.x in docs/formats.md, whose files it refuses).
inline constexpr const char* kFitSchemaVersion = "2.2.0";

// ---------------------------------------------------------------------------------------------
// The training history (kan::fit) and the stages of the pipeline (kan::run_pipeline): kan's own
// records (kan/train/records.h), which fit.json holds.

using kan::EpochRecord;
using kan::FitHistory;
using kan::Formula;
using kan::LayerWidth;
using kan::PipelineResult;
using kan::PruneResult;
using kan::RefineResult;
using kan::StageResult;
using kan::StepRecord;
using kan::SymbolicCurve;
using kan::SymbolicEdgeResult;
using kan::SymbolicResult;

/// The history as JSON: metrics that do not apply (no test data, RMSE of a classification) are
/// null.
nlohmann::json to_json(const FitHistory& history);
/// The inverse of to_json, strict, null read as NaN.
FitHistory fit_history_from_json(const nlohmann::json& json, const std::string& path = "");
/// A width in pykan's form, JSON [2, [2, 1], 1]: a plain integer where a layer has no
/// multiplication node.
nlohmann::json width_json(const std::vector<LayerWidth>& width);
/// The inverse, strict; `path` names it in errors.
std::vector<LayerWidth> width_from_json(const nlohmann::json& json, const std::string& path);
/// "[2, [2, 1], 1]": the width as pykan prints it.
std::string to_string(const std::vector<LayerWidth>& width);

// ---------------------------------------------------------------------------------------------
// What ran.

/// A fit on a user's data file (kan::load_dataset) instead of a reference function.
struct FitDataRun {
  std::string path;                         ///< as given
  std::string format;                       ///< kan::to_string(DataFormat): "csv", "npz", ...
  std::vector<std::string> inputs, targets; ///< the columns read, by name (LoadedDataset)
  std::optional<std::string> test_data;     ///< the test set's file; none: split off, or its own
  std::optional<double> test_fraction;      ///< the held-out fraction, when split off
  int64_t classes = 0;                      ///< classification's class count; 0: regression
  std::string description;                  ///< LoadedDataset::description
};

/// `kanbench fit --distributed`: data-parallel training under torchrun.
struct FitDistributedRun {
  int64_t world_size = 1;
  std::string backend; ///< "gloo" or "nccl"
};

/// `config`: what `kanbench fit` trained, on what, and how.
struct FitConfig {
  std::string function = "toy";   ///< a kan::reference_functions() name; "" with `data`
  std::optional<FitDataRun> data; ///< the data file; none: the function's samples
  int64_t train_num = 1000;
  int64_t test_num = 1000;
  uint64_t seed = 0;          ///< of data, model and minibatches
  std::string device = "cpu"; ///< as given on the command line, "cuda:0"
  /// The grids refined to in turn after training (and pruning), each trained fit.steps steps.
  std::vector<int64_t> refine;
  nlohmann::json prune = nullptr;    ///< kan::PruneStage's JSON (steps set); null: no pruning
  nlohmann::json symbolic = nullptr; ///< kan::SymbolicStage's JSON (steps set); null: none
  std::optional<FitDistributedRun> distributed; ///< none: one process
  int64_t trace_steps = 1;                      ///< steps traced operation by operation
  /// "kan", "mlp" or "torchscript": what `model` holds (a KAN's options, its MLP baseline's, or
  /// a TorchScript module's description: kan::TorchScriptModelImpl::config()); only a KAN has
  /// pruning, refinement or a symbolic stage.
  std::string model_kind = "kan";
  nlohmann::json model = nlohmann::json::object(); ///< kan::KANOptions' or kan::MLPOptions' JSON
  nlohmann::json fit = nlohmann::json::object();   ///< kan::FitOptions' JSON
  /// The pykan checkpoint (saveckpt prefix) training started from; empty: a new model drawn from
  /// `model` and `seed`.
  std::string initial_model;
};

/// `config` as fit.json holds it (the report's configuration table).
nlohmann::json to_json(const FitConfig& config);

/// What a reader without LibTorch needs of config.model and config.symbolic (the report's
/// header, the cross-checks of the stages); their strict readers are LibTorch's.
struct FitModelShape {
  std::vector<LayerWidth> width;         ///< in pykan's form, from config.model's width and mult
  int64_t grid = 0;                      ///< a KAN's; 0 for an MLP
  int64_t k = 0;                         ///< a KAN's; 0 for an MLP
  std::string activation;                ///< an MLP's ("silu", "tanh", "relu"); "" for a KAN
  std::string script_class;              ///< a TorchScript module's class ("models.KAN"); "" else
  std::string dtype;                     ///< "float64"
  std::vector<std::string> symbolic_lib; ///< config.symbolic's library; empty without
  double r2_threshold = 0;               ///< config.symbolic's threshold
};
/// Reads it from `config`; a kan::io::JsonError names the key ("config.model.width[1]").
FitModelShape model_shape(const FitConfig& config);

/// What the collectives of a data-parallel fit cost rank 0 (kan::CommunicationStats).
struct FitCommunication {
  int64_t collectives = 0;
  int64_t bytes = 0;
  double wait_seconds = 0;
};

/// A whole fit.json: every stage the pipeline measured, and what ran it.
struct FitRecord : PipelineResult {
  std::string schema_version = kFitSchemaVersion;
  FitConfig config;
  std::string libtorch; ///< LibTorch's version, "2.11.0"
  int64_t threads = 0;  ///< intra-op threads
  /// kan::diagnostics::AuditedFit's JSON, of the first stage (whose history is
  /// `trained.history`).
  nlohmann::json device_audit = nlohmann::json::object();
  std::optional<FitCommunication> communication; ///< when config.distributed
  std::string checkpoint = "model.pt";           ///< the model file beside fit.json
  /// The final model's (model.pt's) trainable scalars and FLOPs per sample of its forward pass
  /// (kan::Model::parameter_count, forward_flops), both or neither; from fit.json 2.1 (`kanbench
  /// fit` always sets them), empty in older files.
  std::optional<int64_t> parameters;
  std::optional<int64_t> forward_flops;
};

/// Whether `document` is a fit.json: an object whose "command" is "fit".
bool is_fit_document(const nlohmann::json& document);

nlohmann::json to_json(const FitRecord& record);
/// The inverse of to_json, strict: a missing, mistyped or unknown key, a summary that
/// contradicts what it summarises (a stage's seconds, `final`), a stage present without its
/// configuration or the other way round, is a kan::io::JsonError "SOURCE: KEY.PATH: PROBLEM".
/// Unknown keys are tolerated only in a file of a newer minor version. `source` names the
/// document in errors (a file name).
FitRecord fit_record_from_json(const nlohmann::json& json, const std::string& source = "");
/// Reads and parses a fit.json; the error names the file.
///
/// Example:
///   const auto fit = kan::results::read_fit_record("out/fit.json");
///   std::cout << fit.last().test_rmse;
FitRecord read_fit_record(const std::string& path);

} // namespace kan::results
