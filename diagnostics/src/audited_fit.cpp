#include "kan/diagnostics/audited_fit.h"

#include "kan/io/json_fields.h"

#include "kan/io/json_reader.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

namespace kan::diagnostics {
namespace {

double median(std::vector<double> values) {
  if (values.empty())
    return std::numeric_limits<double>::quiet_NaN();
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

} // namespace

// Its keys, for both directions (kan/io/json_fields.h); the history is fit.json's, beside it.
template <typename Fields> static void fields(Fields& f, AuditedFit& a) {
  f.custom(
      "audit", a.audit, [](const AuditReport& r) { return r.to_json(); }, audit_report_from_json);
  f.custom(
      "trace", a.trace, [](const TraceReport& r) { return r.to_json(); }, trace_report_from_json);
  f.metric("traced_step_seconds", a.traced_step_seconds);
  f.metric("untraced_step_seconds", a.untraced_step_seconds);
}

nlohmann::json AuditedFit::to_json() const {
  return io::write_object(*this);
}

AuditedFit audited_fit_from_json(const nlohmann::json& json, const std::string& path) {
  return io::read_object<AuditedFit>(json, path, /*lenient=*/false);
}

AuditedFit audited_fit(Model& model, const Dataset& data, FitOptions options, int64_t trace_steps) {
  TORCH_CHECK(trace_steps >= 0, "trace_steps must be >= 0, got ", trace_steps);
  const torch::Device device = model.device();
  OperationTrace trace(device);
  torch::optim::Optimizer* optimizer = nullptr;
  AuditedFit result;
  auto static_audit = [&] {
    DeviceAudit audit(device);
    audit.module(model.module()).dataset(data);
    if (optimizer != nullptr)
      audit.optimizer(*optimizer, model.module());
    return audit.report();
  };

  const auto user_begin = options.on_step_begin();
  const auto user_after = options.after_step();
  // A traced step ends where the next begins: by then fit() has read its losses, whenever it
  // reads them (every step, or once per epoch).
  options.on_step_begin([&](int64_t step, torch::optim::Optimizer& opt) {
    optimizer = &opt;
    if (trace.running()) {
      trace.count_step();
      if (step == trace_steps)
        trace.stop();
    }
    if (step == 0 && trace_steps > 0)
      trace.start();
    if (user_begin)
      user_begin(step, opt);
  });
  options.after_step([&](int64_t step, int64_t total) {
    if (step + 1 == total)
      result.audit = static_audit(); // while the optimiser still exists
    return user_after && user_after(step, total);
  });

  try {
    diagnose_device_errors([&] { result.history = fit(model, data, options); },
                           [&] {
                             trace.stop();
                             optimizer = nullptr; // fit's optimiser died with the unwinding
                             return static_audit();
                           });
  } catch (const c10::Error& error) {
    // Name the operations that mixed devices too, when the trace saw them.
    trace.stop();
    std::string operations;
    for (const auto& f : trace.report().findings) {
      if (f.problem == to_string(TraceProblem::kMixedDevices) ||
          f.problem == to_string(TraceProblem::kCreatedOnWrongDevice))
        operations += "\n  " + f.message + ". Fix: " + f.fix;
    }
    if (operations.empty())
      throw;
    TORCH_CHECK(false, error.what_without_backtrace(), "\nThe operation trace saw:", operations);
  }
  if (trace.running()) { // a run of fewer steps than trace_steps, or one stopped early
    trace.count_step();
    trace.stop();
  }
  if (options.steps() == 0)
    result.audit = static_audit();
  result.trace = trace.report();

  std::vector<double> step_seconds, traced;
  double previous = 0;
  for (const auto& s : result.history.steps) {
    (s.step < trace_steps ? traced : step_seconds).push_back(s.seconds - previous);
    previous = s.seconds;
  }
  result.traced_step_seconds =
      traced.empty() ? 0.0 : std::accumulate(traced.begin(), traced.end(), 0.0) / traced.size();
  result.untraced_step_seconds = median(step_seconds);
  return result;
}

AuditedFit audited_fit(KAN& model, const Dataset& data, FitOptions options, int64_t trace_steps) {
  return audited_fit(*model, data, std::move(options), trace_steps);
}

AuditedFit audited_fit(MLP& model, const Dataset& data, FitOptions options, int64_t trace_steps) {
  return audited_fit(*model, data, std::move(options), trace_steps);
}

} // namespace kan::diagnostics
