#pragma once
/// audit.json, the document `kanbench audit` writes: its data, its one JSON form and its strict
/// reader. docs/formats.md describes every key. As with results.json
/// (kan/results/results_io.h): a missing, mistyped or unknown key, or a summary that contradicts
/// what it summarises, is a kan::io::JsonError "FILE: KEY.PATH: PROBLEM"; unknown keys are
/// tolerated only in a file of a newer minor version.

#include "kan/diagnostics/audited_fit.h"
#include "kan/diagnostics/graph_check.h"
#include "kan/nn/model.h"
#include "kan/results/results.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace kan::diagnostics {

/// The version of audit.json this library writes (1.1: one finding form with the optional
/// detail keys of results.json 1.2's findings; 1.2: config.model_kind, and config.model of any
/// kind of model; 1.3: graph_check, config.rehearsal, the finding's source).
inline constexpr const char* kAuditSchemaVersion = "1.3.0";

/// What `kanbench audit` audited.
struct AuditRun {
  std::string checkpoint;                 ///< the model file audited; "" when built from options
  ModelKind model_kind = ModelKind::kKAN; ///< what it is (files before it hold a KAN)
  /// The audited model's config() (a KAN's or an MLP's options, a TorchScript model's
  /// description), checked against its kind when read.
  nlohmann::json model;
  std::string data_device;   ///< where the audit's dataset was put, "cpu"
  std::string data_dtype;    ///< its dtype, or "model": the model's
  int64_t samples = 0;       ///< training samples of the audit's dataset
  std::string opt = "lbfgs"; ///< optimiser of the traced steps
  int64_t trace_steps = 0;   ///< 0: static audit only
  uint64_t seed = 0;
  /// The audit rehearsed a GPU run on the meta device (kan/diagnostics/meta_rehearsal.h).
  bool rehearsal = false;
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
  std::optional<GraphCheckReport> graph_check; ///< a TorchScript model's graphs, read statically
};

nlohmann::json to_json(const AuditRecord& record);
AuditRecord audit_record_from_json(const nlohmann::json& json, const std::string& source = "");
/// Reads and parses an audit.json; a kan::io::JsonError names the file.
AuditRecord read_audit_record(const std::string& path);

} // namespace kan::diagnostics
