#pragma once
/// fit.json and audit.json, the documents `kanbench fit` and `kanbench audit` write: their data,
/// their one JSON form and their strict readers (docs/formats.md describes every key). As with
/// results.json (kan/results/results_io.h): a missing, mistyped or unknown key, or a summary
/// that contradicts what it summarises, is a kan::io::JsonError "FILE: KEY.PATH: PROBLEM";
/// unknown keys are tolerated only in a file of a newer minor version.

#include "kan/diagnostics/audited_fit.h"
#include "kan/nn/mlp.h"
#include "kan/nn/model.h"
#include "kan/nn/network.h"
#include "kan/results/fit_summary.h"
#include "kan/results/results.h"
#include "kan/train/fit.h"
#include "kan/train/pipeline.h"

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace kan::diagnostics {

/// The version of fit.json this library writes: the one the report's reader knows.
using results::kFitSchemaVersion;
/// The version of audit.json this library writes (1.1: one finding form with the optional
/// detail keys of results.json 1.2's findings).
inline constexpr const char* kAuditSchemaVersion = "1.1.0";

/// `kanbench fit --distributed`: data-parallel training under torchrun
/// (kan/distributed/data_parallel.h).
struct FitDistributedRun {
  int64_t world_size = 1;
  std::string backend; ///< "gloo" or "nccl"
};

/// What the collectives of a data-parallel fit cost rank 0 (kan::CommunicationStats).
struct FitCommunication {
  int64_t collectives = 0;
  int64_t bytes = 0;
  double wait_seconds = 0;
};

/// A fit on a user's data file (kan::load_dataset) instead of a reference function.
struct FitDataRun {
  std::string path;                         ///< as given
  std::string format;                       ///< kan::to_string(DataFormat): "csv", "npz", ...
  std::vector<std::string> inputs, targets; ///< the columns read, by name (LoadedDataset)
  std::string test_data;               ///< the test set's file; "": split off, or the file's own
  std::optional<double> test_fraction; ///< the held-out fraction, when split off
  int64_t classes = 0;                 ///< classification's class count; 0: regression
  std::string description;             ///< LoadedDataset::description
};

/// What `kanbench fit` trained: the reference function or data file, and the options.
struct FitRun {
  std::string function = "toy";   ///< a kan::reference_functions() name; "" with `data`
  std::optional<FitDataRun> data; ///< the data file; none: the function's samples
  int64_t train_num = 1000;
  int64_t test_num = 1000;
  uint64_t seed = 0;          ///< of data, model and minibatches
  std::string device = "cpu"; ///< as given on the command line, "cuda:0"
  /// The grids refined to in turn after training (and pruning), each trained fit.steps() steps.
  std::vector<int64_t> refine;
  /// Pruning after the first stage (its steps set); none: no pruning.
  std::optional<PruneStage> prune;
  /// auto_symbolic after the others (its steps set); none: no formula.
  std::optional<SymbolicStage> symbolic;
  std::optional<FitDistributedRun> distributed; ///< none: one process
  int64_t trace_steps = 1;                      ///< steps traced operation by operation
  /// What was trained: a KAN (`model`) or its MLP baseline (`mlp`); an MLP has no pruning,
  /// refinement or symbolic stage. fit.json before 2.1 holds a KAN.
  ModelKind model_kind = ModelKind::kKAN;
  KANOptions model{{2, 5, 1}}; ///< a KAN's options
  MLPOptions mlp{{2, 5, 1}};   ///< an MLP's options
  FitOptions fit;
  /// The pykan checkpoint (saveckpt prefix) training started from; empty: a new model drawn from
  /// `model` and `seed`.
  std::string initial_model;
};

/// A whole fit.json: every stage the pipeline measured (kan/train/pipeline.h), and what ran it.
struct FitRecord : PipelineResult {
  std::string schema_version = kFitSchemaVersion;
  FitRun config;
  std::string libtorch;    ///< LibTorch's version, "2.11.0"
  int64_t threads = 0;     ///< intra-op threads
  AuditedFit device_audit; ///< of the first stage (its history is `trained.history`)
  std::optional<FitCommunication> communication; ///< when config.distributed
  std::string checkpoint = "model.pt";           ///< the model file beside fit.json
  /// The final model's (model.pt's) trainable scalars and FLOPs per sample of its forward pass
  /// (kan::Model::parameter_count, forward_flops), both or neither; from fit.json 2.1 (`kanbench
  /// fit` always sets them), empty in older files.
  std::optional<int64_t> parameters;
  std::optional<int64_t> forward_flops;
};

nlohmann::json to_json(const FitRecord& record);
/// `source` names the document in errors (a file name).
FitRecord fit_record_from_json(const nlohmann::json& json, const std::string& source = "");
/// Reads and parses a fit.json; a kan::io::JsonError names the file.
FitRecord read_fit_record(const std::string& path);

/// What `kanbench audit` audited.
struct AuditRun {
  std::string checkpoint;      ///< the model.pt audited; "" when built from options
  KANOptions model{{2, 5, 1}}; ///< the audited model's options
  std::string data_device;     ///< where the audit's dataset was put, "cpu"
  std::string data_dtype;      ///< its dtype, or "model": the model's
  int64_t samples = 0;         ///< training samples of the audit's dataset
  std::string opt = "lbfgs";   ///< optimiser of the traced steps
  int64_t trace_steps = 0;     ///< 0: static audit only
  uint64_t seed = 0;
};

/// A whole audit.json.
struct AuditRecord {
  std::string schema_version = kAuditSchemaVersion;
  std::string device; ///< the device audited against, "cuda:0"
  AuditRun config;
  /// Every finding once, each with its stage (static audit before and after training, trace).
  std::vector<results::AuditFinding> findings;
  int exit_code = 0;                        ///< what `kanbench audit` returned: 0 clean, 1 findings
  AuditReport static_audit;                 ///< before training
  std::optional<AuditedFit> after_training; ///< when training ran
};

nlohmann::json to_json(const AuditRecord& record);
AuditRecord audit_record_from_json(const nlohmann::json& json, const std::string& source = "");
/// Reads and parses an audit.json; a kan::io::JsonError names the file.
AuditRecord read_audit_record(const std::string& path);

} // namespace kan::diagnostics
