#pragma once
/// kan::fit with the device audit switched on: the first steps traced operation by operation,
/// the model, optimiser and data audited statically, LibTorch's device errors explained.

#include "kan/diagnostics/device_audit.h"
#include "kan/diagnostics/operation_trace.h"
#include "kan/train/fit.h"

#include <nlohmann/json.hpp>

#include <cstdint>

namespace kan::diagnostics {

/// What an audited fit found, beside the training history.
struct AuditedFit {
  FitHistory history;
  /// Static audit of the model, the optimiser's state and the data after the last step (the
  /// optimiser only when at least one step ran).
  AuditReport audit;
  /// Operation trace of the first trace_steps steps.
  TraceReport trace;
  double traced_step_seconds = 0;   ///< mean wall time of a traced step
  double untraced_step_seconds = 0; ///< median wall time of the other steps; NaN when none ran

  bool clean() const { return audit.clean() && trace.clean(); }
  /// {"audit": ..., "trace": ..., "traced_step_seconds", "untraced_step_seconds"}; the history
  /// is not part of it (fit.json keeps it beside).
  nlohmann::json to_json() const;
};

/// The inverse of AuditedFit::to_json, strict (kan/io/json_reader.h); the history stays empty.
AuditedFit audited_fit_from_json(const nlohmann::json& json, const std::string& path = "");

/// Trains any model like kan::fit(model, data, options) while tracing its first `trace_steps` steps
/// (0: none) and, at the end, auditing everything statically against the model's device. A LibTorch
/// device-mismatch error escaping the training is rethrown naming the misplaced tensors and the
/// operations that mixed devices.
///
/// Example:
///   auto result = kan::diagnostics::audited_fit(model, data, kan::FitOptions().steps(50));
///   if (!result.clean()) std::cerr << result.audit.to_text() << result.trace.to_text();
AuditedFit audited_fit(Model& model, const Dataset& data, FitOptions options,
                       int64_t trace_steps = 1);
/// audited_fit(*model, ...): a KAN or an MLP by its module holder.
AuditedFit audited_fit(KAN& model, const Dataset& data, FitOptions options,
                       int64_t trace_steps = 1);
AuditedFit audited_fit(MLP& model, const Dataset& data, FitOptions options,
                       int64_t trace_steps = 1);

} // namespace kan::diagnostics
