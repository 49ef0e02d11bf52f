#pragma once
/// fit.json's parts that need LibTorch: what was trained and how, typed (FitSetup), and the strict
/// reader of the whole document. The document itself, its one JSON form and its reader without
/// LibTorch are kan::results' (kan/results/fit_record.h), which keeps these parts as the JSON
/// their owners write. docs/formats.md describes every key.

#include "kan/diagnostics/audited_fit.h"
#include "kan/nn/mlp.h"
#include "kan/nn/model.h"
#include "kan/nn/network.h"
#include "kan/results/fit_record.h"
#include "kan/train/fit.h"
#include "kan/train/pipeline.h"

#include <nlohmann/json.hpp>

#include <optional>
#include <string>

namespace kan::diagnostics {

/// fit.json's parts that LibTorch's side owns, typed: kan::results::FitRecord keeps them as the
/// JSON their owners write (config.model_kind, model, fit, prune and symbolic).
struct FitSetup {
  /// What was trained: a KAN (`model`), its MLP baseline (`mlp`) or a TorchScript module
  /// (`script`); only a KAN has pruning, refinement or a symbolic stage.
  ModelKind model_kind = ModelKind::kKAN;
  KANOptions model{{2, 5, 1}}; ///< a KAN's options
  MLPOptions mlp{{2, 5, 1}};   ///< an MLP's options
  /// A TorchScript module's description (TorchScriptModelImpl::config()).
  nlohmann::json script = nlohmann::json::object();
  FitOptions fit;
  /// Pruning after the first stage; none: no pruning.
  std::optional<PruneStage> prune;
  /// auto_symbolic after the others; none: no formula.
  std::optional<SymbolicStage> symbolic;
};

/// Writes `setup` into `config` as fit.json holds it.
void write_fit_setup(const FitSetup& setup, results::FitConfig& config);
/// Reads it back from `config`, strictly, by its owners' readers (kan::kan_options_from_json,
/// kan::fit_options_from_json, ...): a kan::io::JsonError names the key ("config.model.k").
FitSetup read_fit_setup(const results::FitConfig& config);

/// The strict reader of fit.json: kan::results' reader of the document, then what it keeps as
/// JSON, each part by its owner's strict reader: config's typed parts (read_fit_setup),
/// device_audit (audited_fit_from_json), and what only they can check (an MLP's size in `final`).
/// `source` names the document in errors (a file name).
results::FitRecord strict_fit_record_from_json(const nlohmann::json& json,
                                               const std::string& source = "");
/// Reads, parses and checks a fit.json strictly (strict_fit_record_from_json); a
/// kan::io::JsonError names the file.
results::FitRecord read_fit_record_strict(const std::string& path);

} // namespace kan::diagnostics
