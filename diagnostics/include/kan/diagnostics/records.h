#pragma once
/// fit.json and audit.json, the documents `kanbench fit` and `kanbench audit` write: their data,
/// their one JSON form and their strict readers (docs/formats.md describes every key). As with
/// results.json (kan/reports/results_io.h): a missing, mistyped or unknown key, or a summary
/// that contradicts what it summarises, is a kan::io::JsonError "FILE: KEY.PATH: PROBLEM";
/// unknown keys are tolerated only in a file of a newer minor version.

#include "kan/diagnostics/audited_fit.h"
#include "kan/fit.h"
#include "kan/network.h"
#include "kan/reports/results.h"

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace kan::diagnostics {

/// The version of fit.json this library writes (1.1: device_audit, config.trace_steps; 1.2:
/// config.fit.batch_draw; 1.3: config.fit.grid_update_memory, test_accuracy in the history; 1.4:
/// config.initial_model; 1.5: config.prune, pruned; 1.6: config.symbolic, symbolic; 1.7:
/// config.distributed, communication, config.symbolic.search).
inline constexpr const char* kFitSchemaVersion = "1.7.0";
/// The version of audit.json this library writes (1.1: one finding form with the optional
/// detail keys of results.json 1.2's findings).
inline constexpr const char* kAuditSchemaVersion = "1.1.0";

/// `kanbench fit --prune`: pykan's prune(node_th, edge_th) on the training inputs after the
/// first stage, then `steps` more steps with the same fit options.
struct FitPruneRun {
  double node_th = 1e-2;
  double edge_th = 3e-2;
  int64_t steps = 0;
};

/// `kanbench fit --symbolic`: pykan's auto_symbolic(lib, r2_threshold, weight_simple) on the
/// training inputs after the other stages, then `steps` more steps with the same fit options.
struct FitSymbolicRun {
  std::vector<std::string> lib; ///< library function names (kan/symbolic.h), in the order given
  double r2_threshold = 0.0;
  double weight_simple = 0.8;
  int64_t steps = 0;
  std::string search = "pykan"; ///< kan::symbolic_search's name (from fit.json 1.7)
};

/// `kanbench fit --distributed`: data-parallel training under torchrun (kan/data_parallel.h).
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

/// What `kanbench fit` trained: the reference function, the data and the options.
struct FitRun {
  std::string function = "toy"; ///< a kan::reference_functions() name
  int64_t train_num = 1000;
  int64_t test_num = 1000;
  uint64_t seed = 0;                ///< of data, model and minibatches
  std::string device = "cpu";       ///< as given on the command line, "cuda:0"
  int64_t refine = 0;               ///< the grid refined to after training (and pruning); 0: none
  std::optional<FitPruneRun> prune; ///< pruning after the first stage; none: no pruning
  std::optional<FitSymbolicRun> symbolic; ///< auto_symbolic after the others; none: no formula
  std::optional<FitDistributedRun> distributed; ///< none: one process. From fit.json 1.7.
  int64_t trace_steps = 1;                      ///< steps traced operation by operation
  KANOptions model{{2, 5, 1}};
  FitOptions fit;
  /// The pykan checkpoint (saveckpt prefix) training started from; empty: a new model drawn from
  /// `model` and `seed`. From fit.json 1.4.
  std::string initial_model;
};

/// One training of a fit: the first one, or the one after refinement.
struct FitStage {
  FitHistory history;    ///< its seconds: the stage's training time
  double train_rmse = 0; ///< on the whole training set after the stage
  double test_rmse = 0;
};

/// One layer of a width as pykan writes it: `sum` addition and `mult` multiplication nodes.
struct LayerWidth {
  int64_t sum = 0;
  int64_t mult = 0;
  int64_t nodes() const { return sum + mult; }
  bool operator==(const LayerWidth& other) const { return sum == other.sum && mult == other.mult; }
};
/// A network's width in pykan's form; JSON [2, [2, 1], 1] (a plain integer where a layer has no
/// multiplication node), as --width takes it.
std::vector<LayerWidth> pykan_width(const KANOptions& options);

/// The pruning of a fit (FitRun::prune) and the training after it.
struct FitPruning {
  std::vector<LayerWidth> width_before, width_after;
  /// The scores it pruned by: prune_node's, of the trained model's nodes (per layer), and
  /// prune_edge's, of the node-pruned model's edges (per layer, (in, out) as its masks).
  std::vector<std::vector<double>> node_scores;
  std::vector<std::vector<std::vector<double>>> edge_scores;
  FitStage retrained; ///< the steps after pruning
};

/// One edge's learned activation beside its symbolic fit, at a few of its training inputs.
struct SymbolicCurve {
  std::vector<double> x;          ///< ascending
  std::vector<double> activation; ///< the learned activation at x, before auto_symbolic
  std::vector<double> fit;        ///< c f(a x + b) + d at x, with the fit's a, b, c, d
};

/// What auto_symbolic chose for one edge.
struct FitSymbolicEdge {
  int64_t layer = 0, i = 0, j = 0;
  std::string function; ///< "0" for a pruned edge
  double r2 = 0;        ///< pykan's R^2 (-1e8 for a pruned edge)
  bool fixed = false;   ///< false: r2 below the threshold, the edge stayed numeric
  /// a, b, c, d after the training (when fixed).
  std::vector<double> params;
  std::optional<SymbolicCurve> curve;
};

/// One output's formula.
struct FitFormula {
  std::string sympy;       ///< constants rounded to FitSymbolic::digits decimals
  std::string latex;       ///< the same
  std::string sympy_exact; ///< every constant with 17 significant digits
};

/// The symbolic stage of a fit (FitRun::symbolic) and the training after it.
struct FitSymbolic {
  double auto_symbolic_seconds = 0;
  std::vector<FitSymbolicEdge> edges;
  std::optional<std::vector<FitFormula>> formula; ///< per output; none when an edge stayed numeric
  std::string formula_error;                      ///< why there is no formula
  int64_t digits = 4;
  FitStage retrained; ///< the steps after auto_symbolic
};

/// A whole fit.json.
struct FitRecord {
  std::string schema_version = kFitSchemaVersion;
  FitRun config;
  std::string libtorch;    ///< LibTorch's version, "2.11.0"
  int64_t threads = 0;     ///< intra-op threads
  AuditedFit device_audit; ///< of the first stage (its history is `trained.history`)
  FitStage trained;
  std::optional<FitPruning> pruned;              ///< when config.prune, after `trained`
  std::optional<FitStage> refined;               ///< when config.refine >= 1, at grid config.refine
  std::optional<FitSymbolic> symbolic;           ///< when config.symbolic, last
  std::optional<FitCommunication> communication; ///< when config.distributed
  std::string checkpoint = "model.pt";           ///< the model file beside fit.json

  /// Training time of all stages.
  double seconds() const {
    return trained.history.seconds + (pruned ? pruned->retrained.history.seconds : 0) +
           (refined ? refined->history.seconds : 0) +
           (symbolic ? symbolic->retrained.history.seconds : 0);
  }
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
  std::vector<reports::AuditFinding> findings;
  int exit_code = 0;                        ///< what `kanbench audit` returned: 0 clean, 1 findings
  AuditReport static_audit;                 ///< before training
  std::optional<AuditedFit> after_training; ///< when training ran
};

nlohmann::json to_json(const AuditRecord& record);
AuditRecord audit_record_from_json(const nlohmann::json& json, const std::string& source = "");
/// Reads and parses an audit.json; a kan::io::JsonError names the file.
AuditRecord read_audit_record(const std::string& path);

} // namespace kan::diagnostics
