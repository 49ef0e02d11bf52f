#include "kan/results/results_io.h"

#include "kan/io/atomic_file.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <tuple>

namespace kan::results {

using json = nlohmann::json;
using io::Bound;
using io::ObjectReader;
using io::read_array;

namespace {

// ---------------------------------------------------------------------------------------------
// Writing.

template <typename T> void put_optional(json& j, const char* key, const std::optional<T>& value) {
  if (value)
    j[key] = *value;
}
template <typename T> json nullable(const std::optional<T>& value) {
  return value ? json(*value) : json(nullptr);
}
template <typename T> void put_nonempty(json& j, const char* key, const T& value) {
  if (!value.empty())
    j[key] = value;
}

json to_json(const EpochActivity& e) {
  return {{"kernels", e.kernels},           {"busy_seconds", e.busy_seconds},
          {"wall_seconds", e.wall_seconds}, {"busy_fraction", e.busy_fraction},
          {"h2d_copies", e.h2d_copies},     {"h2d_bytes", e.h2d_bytes},
          {"d2h_copies", e.d2h_copies},     {"d2h_bytes", e.d2h_bytes}};
}

json to_json(const GpuActivity& g) {
  json epochs = json::array();
  for (const auto& e : g.epochs)
    epochs.push_back(to_json(e));
  return {{"traced", g.traced}, {"reason", g.reason}, {"epochs", epochs}};
}

json to_json(const MonitorSample& m) {
  json j{{"seconds", m.seconds}};
  put_optional(j, "gpu_utilization_percent", m.gpu_utilization_percent);
  put_optional(j, "memory_utilization_percent", m.memory_utilization_percent);
  put_optional(j, "memory_used_bytes", m.memory_used_bytes);
  put_optional(j, "sm_clock_mhz", m.sm_clock_mhz);
  put_optional(j, "power_watts", m.power_watts);
  put_optional(j, "temperature_celsius", m.temperature_celsius);
  put_optional(j, "throttle_reasons", m.throttle_reasons);
  put_optional(j, "cpu_utilization_percent", m.cpu_utilization_percent);
  return j;
}

json to_json(const DeviceMonitoring& m) {
  json samples = json::array(), summary = json::object();
  for (const auto& s : m.samples)
    samples.push_back(to_json(s));
  for (const auto& [metric, s] : m.summary)
    summary[metric] = {{"mean", s.mean}, {"max", s.max}};
  json j{{"source", m.source},
         {"available", m.available},
         {"interval_seconds", m.interval_seconds},
         {"samples", samples},
         {"summary", summary}};
  put_nonempty(j, "reason", m.reason);
  put_nonempty(j, "throttle_reasons", m.throttle_reasons);
  put_nonempty(j, "findings", m.findings);
  return j;
}

json to_json(const ActivationCurve& c) {
  return {{"layer", c.layer}, {"input", c.input}, {"output", c.output}, {"x", c.x}, {"y", c.y}};
}

json to_json(const CaseResult& c) {
  json j{{"name", c.name},
         {"target", c.target},
         {"device", c.device},
         {"dtype", c.dtype},
         {"status", to_string(c.status)},
         {"reason", c.reason},
         {"epoch_seconds", c.epoch_seconds},
         {"median_epoch_seconds", nullable(c.median_epoch_seconds)},
         {"iqr_epoch_seconds", nullable(c.iqr_epoch_seconds)},
         {"peak_memory_bytes", nullable(c.peak_memory_bytes)}};
  // The contract: final_test_rmse or final_accuracy; write whichever is known (both may be).
  put_optional(j, "final_test_rmse", c.final_test_rmse);
  put_optional(j, "final_accuracy", c.final_accuracy);
  put_optional(j, "model_kind", c.model_kind);
  put_optional(j, "parameters", c.parameters);
  put_optional(j, "forward_flops", c.forward_flops);
  put_optional(j, "backend", c.backend);
  put_optional(j, "threads", c.threads);
  put_optional(j, "warmup_epochs", c.warmup_epochs);
  put_optional(j, "min_epoch_seconds", c.min_epoch_seconds);
  put_optional(j, "max_epoch_seconds", c.max_epoch_seconds);
  put_optional(j, "steps_per_epoch", c.steps_per_epoch);
  put_optional(j, "samples_per_epoch", c.samples_per_epoch);
  put_optional(j, "steps_per_second", c.steps_per_second);
  put_optional(j, "samples_per_second", c.samples_per_second);
  put_optional(j, "timer", c.timer);
  put_optional(j, "memory_kind", c.memory_kind);
  put_optional(j, "peak_reserved_bytes", c.peak_reserved_bytes);
  put_optional(j, "epoch_cv", c.epoch_cv);
  put_optional(j, "cv_target", c.cv_target);
  put_optional(j, "cv_target_met", c.cv_target_met);
  put_optional(j, "precision", c.precision);
  put_optional(j, "precision_detail", c.precision_detail);
  put_nonempty(j, "train_loss_per_epoch", c.train_loss_per_epoch);
  put_nonempty(j, "test_loss_per_epoch", c.test_loss_per_epoch);
  if (!c.config.is_null())
    j["config"] = c.config;
  if (c.gpu_activity)
    j["gpu_activity"] = to_json(*c.gpu_activity);
  if (c.monitoring)
    j["monitoring"] = to_json(*c.monitoring);
  if (!c.audit_findings.empty()) {
    json findings = json::array();
    for (const auto& f : c.audit_findings)
      findings.push_back(to_json(f));
    j["audit_findings"] = findings;
  }
  if (!c.activations.empty()) {
    json curves = json::array();
    for (const auto& curve : c.activations)
      curves.push_back(to_json(curve));
    j["activations"] = curves;
  }
  return j;
}

json to_json(const Comparison& c) {
  json j{{"case", c.case_name},
         {"a", c.a},
         {"b", c.b},
         {"speedup", nullable(c.speedup)},
         {"max_abs_output_diff", nullable(c.max_abs_output_diff)},
         {"max_rel_loss_diff", nullable(c.max_rel_loss_diff)},
         {"final_metric_rel_diff", nullable(c.final_metric_rel_diff)},
         {"parity", to_string(c.parity)}};
  put_optional(j, "label", c.label);
  put_optional(j, "speedup_low", c.speedup_low);
  put_optional(j, "speedup_high", c.speedup_high);
  put_optional(j, "max_rel_output_diff", c.max_rel_output_diff);
  put_optional(j, "max_abs_grad_diff", c.max_abs_grad_diff);
  put_optional(j, "max_rel_grad_diff", c.max_rel_grad_diff);
  put_optional(j, "final_accuracy_diff_points", c.final_accuracy_diff_points);
  put_nonempty(j, "tolerances", c.tolerances);
  put_nonempty(j, "message", c.message);
  return j;
}

json to_json(const EdgeCaseResult& e) {
  json j{{"name", e.name},
         {"device", e.device},
         {"status", to_string(e.status)},
         {"message", e.message}};
  put_optional(j, "samples", e.samples);
  put_optional(j, "peak_memory_bytes", e.peak_memory_bytes);
  put_optional(j, "seconds", e.seconds);
  put_nonempty(j, "measurements", e.measurements);
  return j;
}

json to_json(const ScalingResult& s) {
  json j{{"case", s.case_name},
         {"device", s.device},
         {"backend", s.backend},
         {"ranks", s.ranks},
         {"status", to_string(s.status)},
         {"epoch_seconds", s.epoch_seconds},
         {"median_epoch_seconds", nullable(s.median_epoch_seconds)},
         {"speedup", nullable(s.speedup)},
         {"efficiency", nullable(s.efficiency)},
         {"max_rel_loss_diff", nullable(s.max_rel_loss_diff)}};
  put_nonempty(j, "reason", s.reason);
  put_optional(j, "communication_seconds", s.communication_seconds);
  put_optional(j, "collectives_per_step", s.collectives_per_step);
  put_optional(j, "bytes_per_step", s.bytes_per_step);
  put_nonempty(j, "train_loss_per_epoch", s.train_loss_per_epoch);
  return j;
}

json to_json(const SweepPoint& p) {
  json j{{"case", p.case_name},
         {"target", p.target},
         {"device", p.device},
         {"dtype", p.dtype},
         {"batch", p.batch},
         {"status", to_string(p.status)},
         {"epoch_seconds", p.epoch_seconds},
         {"median_epoch_seconds", nullable(p.median_epoch_seconds)},
         {"samples_per_second", nullable(p.samples_per_second)}};
  put_nonempty(j, "reason", p.reason);
  put_optional(j, "epoch_cv", p.epoch_cv);
  put_optional(j, "peak_memory_bytes", p.peak_memory_bytes);
  if (!p.audit_findings.empty()) {
    json findings = json::array();
    for (const auto& f : p.audit_findings)
      findings.push_back(to_json(f));
    j["audit_findings"] = findings;
  }
  return j;
}

json to_json(const SweepTarget& t) {
  json j{{"case", t.case_name},
         {"target", t.target},
         {"best_batch", nullable(t.best_batch)},
         {"best_samples_per_second", nullable(t.best_samples_per_second)},
         {"saturation_batch", nullable(t.saturation_batch)},
         {"max_batch", nullable(t.max_batch)}};
  if (!t.max_batch_attempts.empty()) {
    json attempts = json::array();
    for (const auto& [batch, fits] : t.max_batch_attempts)
      attempts.push_back({{"batch", batch}, {"fits", fits}});
    j["max_batch_attempts"] = attempts;
  }
  put_nonempty(j, "max_batch_reason", t.max_batch_reason);
  return j;
}

json to_json(const Sweep& s) {
  json points = json::array(), targets = json::array(), crossovers = json::array();
  for (const auto& p : s.points)
    points.push_back(to_json(p));
  for (const auto& t : s.targets)
    targets.push_back(to_json(t));
  for (const auto& c : s.crossovers)
    crossovers.push_back({{"case", c.case_name},
                          {"a", c.a},
                          {"b", c.b},
                          {"batch", nullable(c.batch)},
                          {"message", c.message}});
  return {
      {"batches", s.batches}, {"points", points}, {"targets", targets}, {"crossovers", crossovers}};
}

// A diverged stage's RMSE (NaN or infinite) has no JSON number: null, as everywhere else.
json rmse_json(double value) {
  return std::isfinite(value) ? json(value) : json(nullptr);
}

json to_json(const AccuracyPointRef& ref) {
  return {{"fit", ref.fit}, {"point", ref.point}};
}

json to_json(const std::optional<AccuracyPointRef>& ref) {
  return ref ? to_json(*ref) : json(nullptr);
}

json to_json(const AccuracyPoint& p) {
  return {{"stage", p.stage},
          {"grid", p.grid},
          {"parameters", p.parameters},
          {"forward_flops", p.forward_flops},
          {"train_rmse", rmse_json(p.train_rmse)},
          {"test_rmse", rmse_json(p.test_rmse)},
          {"seconds", p.seconds}};
}

json to_json(const AccuracyFit& f) {
  json points = json::array();
  for (const auto& p : f.points)
    points.push_back(to_json(p));
  return {{"function", f.function}, {"device", f.device}, {"family", f.family},
          {"role", f.role},         {"width", f.width},   {"activation", f.activation},
          {"seed", f.seed},         {"points", points},   {"seconds", f.seconds},
          {"error", f.error}};
}

json to_json(const PublishedAccuracy& p) {
  return {{"source", p.source},
          {"minimal_kan_width", p.minimal_kan_width},
          {"minimal_kan_test_rmse", nullable(p.minimal_kan_test_rmse)},
          {"best_kan_width", p.best_kan_width},
          {"best_kan_test_rmse", nullable(p.best_kan_test_rmse)},
          {"mlp_test_rmse", nullable(p.mlp_test_rmse)}};
}

json to_json(const AccuracyFunction& f) {
  json pareto = json::array();
  for (const auto& ref : f.pareto)
    pareto.push_back(to_json(ref));
  return {{"function", f.function},
          {"device", f.device},
          {"formula", f.formula},
          {"published", f.published ? to_json(*f.published) : json(nullptr)},
          {"fits", f.fits},
          {"failed", f.failed},
          {"best_kan", to_json(f.best_kan)},
          {"best_mlp", to_json(f.best_mlp)},
          {"pareto", pareto},
          {"kan_beats_mlp", nullable(f.kan_beats_mlp)},
          {"seconds", f.seconds}};
}

json to_json(const AccuracyRun& r) {
  json fits = json::array(), summary = json::array();
  for (const auto& f : r.fits)
    fits.push_back(to_json(f));
  for (const auto& f : r.summary)
    summary.push_back(to_json(f));
  return {{"table", r.table},
          {"preset", r.preset},
          {"functions", r.functions},
          {"devices", r.devices},
          {"seeds", r.seeds},
          {"train_num", r.train_num},
          {"test_num", r.test_num},
          {"grids", r.grids},
          {"steps", r.steps},
          {"jobs", r.jobs},
          {"threads_per_fit", r.threads_per_fit},
          {"planned_fits", r.planned_fits},
          {"wall_seconds", r.wall_seconds},
          {"fits", fits},
          {"summary", summary}};
}

json to_json(const RunConfig& c) {
  json j{{"suite", c.suite}, {"devices", c.devices}, {"repeat", c.repeat}};
  put_optional(j, "warmup", c.warmup);
  put_nonempty(j, "cases", c.cases);
  put_optional(j, "seed", c.seed);
  put_optional(j, "time_limit_seconds", c.time_limit_seconds);
  put_optional(j, "cupti", c.cupti);
  put_optional(j, "trace", c.trace);
  put_optional(j, "out", c.out);
  if (!c.extra.is_null())
    j["extra"] = c.extra;
  return j;
}

// ---------------------------------------------------------------------------------------------
// Reading. Each reader takes the value and its key path; `lenient` allows unknown keys (a file
// of a newer minor version).

template <typename T, typename F>
std::vector<T> read_optional_array(ObjectReader& r, const std::string& key, F&& read_one) {
  const auto* value = r.optional(key);
  return value ? read_array<T>(*value, r.path_of(key), read_one) : std::vector<T>{};
}

AuditFinding finding_from_json(const json& value, const std::string& path, bool lenient) {
  ObjectReader r(value, path, lenient);
  AuditFinding f;
  f.tensor = r.string("tensor");
  f.kind = r.string("kind");
  f.device = r.string("device");
  f.expected_device = r.string("expected_device");
  f.message = r.string("message");
  f.problem = r.optional_string("problem").value_or("");
  f.fix = r.optional_string("fix").value_or("");
  f.dtype = r.optional_string("dtype").value_or("");
  if (const auto* shape = r.optional("shape")) {
    const auto& sizes = io::as_array(*shape, r.path_of("shape"));
    for (size_t i = 0; i < sizes.size(); ++i)
      f.shape.push_back(
          io::as_integer(sizes[i], io::index_path(r.path_of("shape"), i), Bound::kNonNegative));
  }
  f.module = r.optional_string("module").value_or("");
  f.phase = r.optional_string("phase").value_or("");
  f.count = r.optional_integer("count", Bound::kNonNegative);
  f.stage = r.optional_string("stage").value_or("");
  r.finish();
  return f;
}

EpochActivity epoch_activity_from_json(const json& value, const std::string& path, bool lenient) {
  ObjectReader r(value, path, lenient);
  EpochActivity e;
  e.kernels = r.integer("kernels", Bound::kNonNegative);
  e.busy_seconds = r.number("busy_seconds", Bound::kNonNegative);
  e.wall_seconds = r.number("wall_seconds", Bound::kNonNegative);
  e.busy_fraction = r.number("busy_fraction", Bound::kFraction);
  e.h2d_copies = r.integer("h2d_copies", Bound::kNonNegative);
  e.h2d_bytes = r.integer("h2d_bytes", Bound::kNonNegative);
  e.d2h_copies = r.integer("d2h_copies", Bound::kNonNegative);
  e.d2h_bytes = r.integer("d2h_bytes", Bound::kNonNegative);
  r.finish();
  return e;
}

GpuActivity gpu_activity_from_json(const json& value, const std::string& path, bool lenient) {
  ObjectReader r(value, path, lenient);
  GpuActivity g;
  g.traced = r.boolean("traced");
  g.reason = r.string("reason");
  g.epochs = read_array<EpochActivity>(
      r.required("epochs"), r.path_of("epochs"),
      [&](const json& v, const std::string& p) { return epoch_activity_from_json(v, p, lenient); });
  r.finish();
  return g;
}

MonitorSample monitor_sample_from_json(const json& value, const std::string& path, bool lenient) {
  ObjectReader r(value, path, lenient);
  MonitorSample m;
  m.seconds = r.number("seconds", Bound::kNonNegative);
  m.gpu_utilization_percent = r.optional_number("gpu_utilization_percent", Bound::kNonNegative);
  m.memory_utilization_percent =
      r.optional_number("memory_utilization_percent", Bound::kNonNegative);
  m.memory_used_bytes = r.optional_integer("memory_used_bytes", Bound::kNonNegative);
  m.sm_clock_mhz = r.optional_number("sm_clock_mhz", Bound::kNonNegative);
  m.power_watts = r.optional_number("power_watts", Bound::kNonNegative);
  m.temperature_celsius = r.optional_number("temperature_celsius");
  m.throttle_reasons = r.optional_unsigned("throttle_reasons");
  m.cpu_utilization_percent = r.optional_number("cpu_utilization_percent", Bound::kNonNegative);
  r.finish();
  return m;
}

DeviceMonitoring monitoring_from_json(const json& value, const std::string& path, bool lenient) {
  ObjectReader r(value, path, lenient);
  DeviceMonitoring m;
  m.source = r.string("source");
  m.available = r.boolean("available");
  m.reason = r.optional_string("reason").value_or("");
  m.interval_seconds = r.number("interval_seconds", Bound::kNonNegative);
  m.samples = read_array<MonitorSample>(
      r.required("samples"), r.path_of("samples"),
      [&](const json& v, const std::string& p) { return monitor_sample_from_json(v, p, lenient); });
  const auto& summary = io::as_object(r.required("summary"), r.path_of("summary"));
  for (const auto& [metric, figures] : summary.items()) {
    ObjectReader s(figures, io::child_path(r.path_of("summary"), metric), lenient);
    m.summary[metric] = {s.number("mean"), s.number("max")};
    s.finish();
  }
  m.throttle_reasons = r.optional_strings("throttle_reasons");
  m.findings = r.optional_strings("findings");
  r.finish();
  if (!m.available && m.reason.empty())
    io::fail(r.path_of("reason"), "is empty but available is false (say why)");
  return m;
}

ActivationCurve activation_from_json(const json& value, const std::string& path, bool lenient) {
  ObjectReader r(value, path, lenient);
  ActivationCurve c;
  c.layer = r.integer("layer", Bound::kNonNegative);
  c.input = r.integer("input", Bound::kNonNegative);
  c.output = r.integer("output", Bound::kNonNegative);
  c.x = r.numbers("x");
  c.y = r.numbers("y");
  if (c.x.size() != c.y.size())
    io::fail(r.path_of("y"), "has " + std::to_string(c.y.size()) + " values but x has " +
                                 std::to_string(c.x.size()));
  r.finish();
  return c;
}

// The statistics a case states must be those of its epoch times, as fill_epoch_statistics()
// defines them: a file that contradicts itself is refused rather than shown. The tolerance is
// relative, 1e-9 of the larger value; for the IQR, a difference of two quantiles, of the
// quantiles' size (another producer's quantiles may differ in their last bits).
void check_epoch_statistics(const CaseResult& c, const ObjectReader& r) {
  CaseResult expected;
  expected.epoch_seconds = c.epoch_seconds;
  expected.steps_per_epoch = c.steps_per_epoch;
  expected.samples_per_epoch = c.samples_per_epoch;
  fill_epoch_statistics(expected);
  const auto check = [&](const char* key, const std::optional<double>& stated,
                         const std::optional<double>& computed, const std::string& what,
                         double scale) {
    if (!stated)
      return;
    if (!computed) {
      if (c.epoch_seconds.empty())
        io::fail(r.path_of(key), "is " + io::format_number(*stated) +
                                     " but epoch_seconds is empty (it is " + what + ")");
      return; // a rate without steps_per_epoch, or with a median of 0: nothing to compare
    }
    const double tolerance = 1e-9 * std::max({std::fabs(*stated), std::fabs(*computed), scale});
    if (!(std::fabs(*stated - *computed) <= tolerance))
      io::fail(r.path_of(key), "is " + io::format_number(*stated) + " but " + what + " is " +
                                   io::format_number(*computed));
  };
  // q3 <= median + IQR: the size of the quantiles the IQR is the difference of.
  const double quantiles = expected.median_epoch_seconds
                               ? *expected.median_epoch_seconds + *expected.iqr_epoch_seconds
                               : 0;
  check("median_epoch_seconds", c.median_epoch_seconds, expected.median_epoch_seconds,
        "the median of epoch_seconds", 0);
  check("iqr_epoch_seconds", c.iqr_epoch_seconds, expected.iqr_epoch_seconds,
        "the interquartile range of epoch_seconds", quantiles);
  check("min_epoch_seconds", c.min_epoch_seconds, expected.min_epoch_seconds,
        "the minimum of epoch_seconds", 0);
  check("max_epoch_seconds", c.max_epoch_seconds, expected.max_epoch_seconds,
        "the maximum of epoch_seconds", 0);
  check("steps_per_second", c.steps_per_second, expected.steps_per_second,
        "steps_per_epoch / the median of epoch_seconds", 0);
  check("samples_per_second", c.samples_per_second, expected.samples_per_second,
        "samples_per_epoch / the median of epoch_seconds", 0);
}

CaseResult case_from_json(const json& value, const std::string& path, bool lenient) {
  ObjectReader r(value, path, lenient);
  CaseResult c;
  c.name = r.string("name");
  c.target = r.string("target");
  c.device = r.string("device");
  c.dtype = r.string("dtype");
  c.status = io::enum_from_string(r.string("status"), kCaseStatusNames, r.path_of("status"));
  c.reason = r.string("reason");
  c.epoch_seconds = r.numbers("epoch_seconds", Bound::kNonNegative);
  c.median_epoch_seconds = r.nullable_number("median_epoch_seconds", Bound::kNonNegative);
  c.iqr_epoch_seconds = r.nullable_number("iqr_epoch_seconds", Bound::kNonNegative);
  c.peak_memory_bytes = r.nullable_integer("peak_memory_bytes", Bound::kNonNegative);
  c.final_test_rmse = r.optional_number("final_test_rmse", Bound::kNonNegative);
  c.final_accuracy = r.optional_number("final_accuracy", Bound::kFraction);
  c.model_kind = r.optional_string("model_kind");
  if (c.model_kind && *c.model_kind != "kan" && *c.model_kind != "mlp")
    io::fail(r.path_of("model_kind"),
             "expected \"kan\" or \"mlp\", got " + io::quoted(*c.model_kind));
  c.parameters = r.optional_integer("parameters", Bound::kNonNegative);
  c.forward_flops = r.optional_integer("forward_flops", Bound::kNonNegative);
  c.backend = r.optional_string("backend");
  c.threads = r.optional_integer("threads", Bound::kNonNegative);
  c.warmup_epochs = r.optional_integer("warmup_epochs", Bound::kNonNegative);
  c.min_epoch_seconds = r.optional_number("min_epoch_seconds", Bound::kNonNegative);
  c.max_epoch_seconds = r.optional_number("max_epoch_seconds", Bound::kNonNegative);
  c.steps_per_epoch = r.optional_integer("steps_per_epoch", Bound::kNonNegative);
  c.samples_per_epoch = r.optional_integer("samples_per_epoch", Bound::kNonNegative);
  c.steps_per_second = r.optional_number("steps_per_second", Bound::kNonNegative);
  c.samples_per_second = r.optional_number("samples_per_second", Bound::kNonNegative);
  c.timer = r.optional_string("timer");
  c.memory_kind = r.optional_string("memory_kind");
  c.peak_reserved_bytes = r.optional_integer("peak_reserved_bytes", Bound::kNonNegative);
  c.epoch_cv = r.optional_number("epoch_cv", Bound::kNonNegative);
  c.cv_target = r.optional_number("cv_target", Bound::kNonNegative);
  c.cv_target_met = r.optional_bool("cv_target_met");
  c.precision = r.optional_string("precision");
  c.precision_detail = r.optional_string("precision_detail");
  if (c.precision && *c.precision != "tf32" && *c.precision != "bf16" && *c.precision != "fp16")
    io::fail(r.path_of("precision"),
             "expected \"tf32\", \"bf16\" or \"fp16\", got " + io::quoted(*c.precision));
  c.train_loss_per_epoch = r.optional_numbers("train_loss_per_epoch");
  c.test_loss_per_epoch = r.optional_numbers("test_loss_per_epoch");
  c.config = r.optional_object("config");
  if (const auto* g = r.optional("gpu_activity"))
    c.gpu_activity = gpu_activity_from_json(*g, r.path_of("gpu_activity"), lenient);
  if (const auto* m = r.optional("monitoring"))
    c.monitoring = monitoring_from_json(*m, r.path_of("monitoring"), lenient);
  c.audit_findings = read_optional_array<AuditFinding>(
      r, "audit_findings",
      [&](const json& v, const std::string& p) { return finding_from_json(v, p, lenient); });
  c.activations = read_optional_array<ActivationCurve>(
      r, "activations",
      [&](const json& v, const std::string& p) { return activation_from_json(v, p, lenient); });
  r.finish();

  // What the status promises.
  if (c.name.empty())
    io::fail(r.path_of("name"), "must not be empty");
  if (c.target.empty())
    io::fail(r.path_of("target"), "must not be empty");
  if (c.status == CaseStatus::kOk) {
    if (c.epoch_seconds.empty())
      io::fail(r.path_of("epoch_seconds"), "is empty but status is \"ok\"");
    if (!c.median_epoch_seconds)
      io::fail(r.path_of("median_epoch_seconds"), "is null but status is \"ok\"");
    if (!c.iqr_epoch_seconds)
      io::fail(r.path_of("iqr_epoch_seconds"), "is null but status is \"ok\"");
    if (!c.final_test_rmse && !c.final_accuracy)
      io::fail(path, "status is \"ok\" but neither final_test_rmse nor final_accuracy is "
                     "given");
  } else {
    if (c.reason.empty())
      io::fail(r.path_of("reason"),
               "is empty but status is \"" + to_string(c.status) + "\" (say why)");
    if (c.status == CaseStatus::kSkipped && (!c.epoch_seconds.empty() || c.median_epoch_seconds))
      io::fail(path, "status is \"skipped\" but it has epoch times (a skipped case has no "
                     "numbers)");
  }
  check_epoch_statistics(c, r);
  return c;
}

Comparison comparison_from_json(const json& value, const std::string& path, bool lenient) {
  ObjectReader r(value, path, lenient);
  Comparison c;
  c.case_name = r.string("case");
  c.a = r.string("a");
  c.b = r.string("b");
  // Ratios of times and sizes of differences: none can be negative.
  c.speedup = r.nullable_number("speedup", Bound::kNonNegative);
  c.max_abs_output_diff = r.nullable_number("max_abs_output_diff", Bound::kNonNegative);
  c.max_rel_loss_diff = r.nullable_number("max_rel_loss_diff", Bound::kNonNegative);
  c.final_metric_rel_diff = r.nullable_number("final_metric_rel_diff", Bound::kNonNegative);
  c.parity = io::enum_from_string(r.string("parity"), kParityNames, r.path_of("parity"));
  c.label = r.optional_string("label");
  c.speedup_low = r.optional_number("speedup_low", Bound::kNonNegative);
  c.speedup_high = r.optional_number("speedup_high", Bound::kNonNegative);
  c.max_rel_output_diff = r.optional_number("max_rel_output_diff", Bound::kNonNegative);
  c.max_abs_grad_diff = r.optional_number("max_abs_grad_diff", Bound::kNonNegative);
  c.max_rel_grad_diff = r.optional_number("max_rel_grad_diff", Bound::kNonNegative);
  c.final_accuracy_diff_points =
      r.optional_number("final_accuracy_diff_points", Bound::kNonNegative);
  c.tolerances = r.optional_number_map("tolerances", Bound::kNonNegative);
  c.message = r.optional_string("message").value_or("");
  r.finish();
  return c;
}

EdgeCaseResult edge_case_from_json(const json& value, const std::string& path, bool lenient) {
  ObjectReader r(value, path, lenient);
  EdgeCaseResult e;
  e.name = r.string("name");
  e.device = r.string("device");
  e.status = io::enum_from_string(r.string("status"), kEdgeStatusNames, r.path_of("status"));
  e.message = r.string("message");
  e.samples = r.optional_integer("samples", Bound::kNonNegative);
  e.peak_memory_bytes = r.optional_integer("peak_memory_bytes", Bound::kNonNegative);
  e.seconds = r.optional_number("seconds", Bound::kNonNegative);
  e.measurements = r.optional_number_map("measurements");
  r.finish();
  return e;
}

ScalingResult scaling_from_json(const json& value, const std::string& path, bool lenient) {
  ObjectReader r(value, path, lenient);
  ScalingResult s;
  s.case_name = r.string("case");
  s.device = r.string("device");
  s.backend = r.string("backend");
  s.ranks = r.integer("ranks", Bound::kNonNegative);
  if (s.ranks < 1)
    io::fail(r.path_of("ranks"), "expected an integer >= 1, got " + std::to_string(s.ranks));
  s.status = io::enum_from_string(r.string("status"), kCaseStatusNames, r.path_of("status"));
  s.reason = r.optional_string("reason").value_or("");
  s.epoch_seconds = r.numbers("epoch_seconds", Bound::kNonNegative);
  s.median_epoch_seconds = r.nullable_number("median_epoch_seconds", Bound::kNonNegative);
  s.speedup = r.nullable_number("speedup", Bound::kNonNegative);
  s.efficiency = r.nullable_number("efficiency", Bound::kNonNegative);
  s.max_rel_loss_diff = r.nullable_number("max_rel_loss_diff", Bound::kNonNegative);
  s.communication_seconds = r.optional_number("communication_seconds", Bound::kNonNegative);
  s.collectives_per_step = r.optional_number("collectives_per_step", Bound::kNonNegative);
  s.bytes_per_step = r.optional_number("bytes_per_step", Bound::kNonNegative);
  s.train_loss_per_epoch = r.optional_numbers("train_loss_per_epoch");
  r.finish();
  return s;
}

SweepPoint sweep_point_from_json(const json& value, const std::string& path, bool lenient) {
  ObjectReader r(value, path, lenient);
  SweepPoint p;
  p.case_name = r.string("case");
  p.target = r.string("target");
  p.device = r.string("device");
  p.dtype = r.string("dtype");
  p.batch = r.integer("batch", Bound::kNonNegative);
  if (p.batch < 1)
    io::fail(r.path_of("batch"), "expected an integer >= 1, got " + std::to_string(p.batch));
  p.status = io::enum_from_string(r.string("status"), kCaseStatusNames, r.path_of("status"));
  p.reason = r.optional_string("reason").value_or("");
  p.epoch_seconds = r.numbers("epoch_seconds", Bound::kNonNegative);
  p.median_epoch_seconds = r.nullable_number("median_epoch_seconds", Bound::kNonNegative);
  p.samples_per_second = r.nullable_number("samples_per_second", Bound::kNonNegative);
  p.epoch_cv = r.optional_number("epoch_cv", Bound::kNonNegative);
  p.peak_memory_bytes = r.optional_integer("peak_memory_bytes", Bound::kNonNegative);
  p.audit_findings = read_optional_array<AuditFinding>(
      r, "audit_findings",
      [&](const json& v, const std::string& path) { return finding_from_json(v, path, lenient); });
  r.finish();
  if (p.status == CaseStatus::kOk && !p.median_epoch_seconds)
    io::fail(r.path_of("median_epoch_seconds"), "is null but status is \"ok\"");
  if (p.status != CaseStatus::kOk && p.reason.empty())
    io::fail(r.path_of("reason"),
             "is empty but status is \"" + to_string(p.status) + "\" (say why)");
  return p;
}

SweepTarget sweep_target_from_json(const json& value, const std::string& path, bool lenient) {
  ObjectReader r(value, path, lenient);
  SweepTarget t;
  t.case_name = r.string("case");
  t.target = r.string("target");
  t.best_batch = r.nullable_integer("best_batch", Bound::kNonNegative);
  t.best_samples_per_second = r.nullable_number("best_samples_per_second", Bound::kNonNegative);
  t.saturation_batch = r.nullable_integer("saturation_batch", Bound::kNonNegative);
  t.max_batch = r.nullable_integer("max_batch", Bound::kNonNegative);
  t.max_batch_attempts = read_optional_array<
      std::pair<int64_t, bool>>(r, "max_batch_attempts", [&](const json& v, const std::string& p) {
    ObjectReader a(v, p, lenient);
    std::pair<int64_t, bool> attempt{a.integer("batch", Bound::kNonNegative), a.boolean("fits")};
    a.finish();
    return attempt;
  });
  t.max_batch_reason = r.optional_string("max_batch_reason").value_or("");
  r.finish();
  return t;
}

Crossover crossover_from_json(const json& value, const std::string& path, bool lenient) {
  ObjectReader r(value, path, lenient);
  Crossover c;
  c.case_name = r.string("case");
  c.a = r.string("a");
  c.b = r.string("b");
  c.batch = r.nullable_integer("batch", Bound::kNonNegative);
  c.message = r.string("message");
  r.finish();
  return c;
}

Sweep sweep_from_json(const json& value, const std::string& path, bool lenient) {
  ObjectReader r(value, path, lenient);
  Sweep s;
  s.batches = read_array<int64_t>(
      r.required("batches"), r.path_of("batches"), [](const json& v, const std::string& p) {
        const auto batch = io::as_integer(v, p, Bound::kNonNegative);
        if (batch < 1)
          io::fail(p, "expected an integer >= 1, got " + std::to_string(batch));
        return batch;
      });
  s.points = read_array<SweepPoint>(
      r.required("points"), r.path_of("points"),
      [&](const json& v, const std::string& p) { return sweep_point_from_json(v, p, lenient); });
  s.targets = read_array<SweepTarget>(
      r.required("targets"), r.path_of("targets"),
      [&](const json& v, const std::string& p) { return sweep_target_from_json(v, p, lenient); });
  s.crossovers = read_array<Crossover>(
      r.required("crossovers"), r.path_of("crossovers"),
      [&](const json& v, const std::string& p) { return crossover_from_json(v, p, lenient); });
  r.finish();
  for (size_t i = 0; i < s.points.size(); ++i)
    if (std::find(s.batches.begin(), s.batches.end(), s.points[i].batch) == s.batches.end())
      io::fail(io::child_path(io::index_path(r.path_of("points"), i), "batch"),
               std::to_string(s.points[i].batch) + " is not one of the sweep's batches");
  return s;
}

// Integers of an array, each at least `min`.
std::vector<int64_t> integers_from_json(const json& value, const std::string& path, int64_t min) {
  return read_array<int64_t>(value, path, [&](const json& v, const std::string& p) {
    const auto n = io::as_integer(v, p, Bound::kNonNegative);
    if (n < min)
      io::fail(p, "expected an integer >= " + std::to_string(min) + ", got " + std::to_string(n));
    return n;
  });
}

// A measured RMSE: null (a diverged or unmeasured stage) reads as NaN.
double rmse_from_json(ObjectReader& r, const std::string& key) {
  return r.nullable_number(key, Bound::kNonNegative).value_or(std::nan(""));
}

std::optional<AccuracyPointRef> point_ref_from_json(const json& value, const std::string& path,
                                                    bool lenient) {
  if (value.is_null())
    return std::nullopt;
  ObjectReader r(value, path, lenient);
  AccuracyPointRef ref;
  ref.fit = r.integer("fit", Bound::kNonNegative);
  ref.point = r.integer("point", Bound::kNonNegative);
  r.finish();
  return ref;
}

AccuracyPoint accuracy_point_from_json(const json& value, const std::string& path, bool lenient) {
  ObjectReader r(value, path, lenient);
  AccuracyPoint p;
  p.stage = r.string("stage");
  p.grid = r.integer("grid", Bound::kNonNegative);
  p.parameters = r.integer("parameters", Bound::kNonNegative);
  p.forward_flops = r.integer("forward_flops", Bound::kNonNegative);
  p.train_rmse = rmse_from_json(r, "train_rmse");
  p.test_rmse = rmse_from_json(r, "test_rmse");
  p.seconds = r.number("seconds", Bound::kNonNegative);
  r.finish();
  if (p.stage.empty())
    io::fail(r.path_of("stage"), "must not be empty");
  return p;
}

AccuracyFit accuracy_fit_from_json(const json& value, const std::string& path, bool lenient) {
  ObjectReader r(value, path, lenient);
  AccuracyFit f;
  f.function = r.string("function");
  f.device = r.string("device");
  f.family = r.string("family");
  if (f.family != "kan" && f.family != "mlp")
    io::fail(r.path_of("family"), "expected one of kan, mlp; got " + io::quoted(f.family));
  f.role = r.string("role");
  f.width = integers_from_json(r.required("width"), r.path_of("width"), 0);
  f.activation = r.string("activation");
  f.seed = io::as_unsigned(r.required("seed"), r.path_of("seed"));
  f.points = read_array<AccuracyPoint>(
      r.required("points"), r.path_of("points"),
      [&](const json& v, const std::string& p) { return accuracy_point_from_json(v, p, lenient); });
  f.seconds = r.number("seconds", Bound::kNonNegative);
  f.error = r.string("error");
  r.finish();
  if (f.function.empty())
    io::fail(r.path_of("function"), "must not be empty");
  if (f.device.empty())
    io::fail(r.path_of("device"), "must not be empty");
  if (f.error.empty() && f.points.empty())
    io::fail(r.path_of("points"), "is empty but error is empty (a fit that did not fail has "
                                  "its stages' points)");
  return f;
}

PublishedAccuracy published_from_json(const json& value, const std::string& path, bool lenient) {
  ObjectReader r(value, path, lenient);
  PublishedAccuracy p;
  p.source = r.string("source");
  p.minimal_kan_width =
      integers_from_json(r.required("minimal_kan_width"), r.path_of("minimal_kan_width"), 0);
  p.minimal_kan_test_rmse = r.nullable_number("minimal_kan_test_rmse", Bound::kNonNegative);
  p.best_kan_width =
      integers_from_json(r.required("best_kan_width"), r.path_of("best_kan_width"), 0);
  p.best_kan_test_rmse = r.nullable_number("best_kan_test_rmse", Bound::kNonNegative);
  p.mlp_test_rmse = r.nullable_number("mlp_test_rmse", Bound::kNonNegative);
  r.finish();
  return p;
}

AccuracyFunction accuracy_function_from_json(const json& value, const std::string& path,
                                             bool lenient) {
  ObjectReader r(value, path, lenient);
  AccuracyFunction f;
  f.function = r.string("function");
  f.device = r.string("device");
  f.formula = r.string("formula");
  if (const auto& published = r.required("published"); !published.is_null())
    f.published = published_from_json(published, r.path_of("published"), lenient);
  f.fits = r.integer("fits", Bound::kNonNegative);
  f.failed = r.integer("failed", Bound::kNonNegative);
  f.best_kan = point_ref_from_json(r.required("best_kan"), r.path_of("best_kan"), lenient);
  f.best_mlp = point_ref_from_json(r.required("best_mlp"), r.path_of("best_mlp"), lenient);
  f.pareto = read_array<AccuracyPointRef>(r.required("pareto"), r.path_of("pareto"),
                                          [&](const json& v, const std::string& p) {
                                            if (v.is_null())
                                              io::fail(p, "expected an object, got null");
                                            return *point_ref_from_json(v, p, lenient);
                                          });
  if (const auto& beats = r.required("kan_beats_mlp"); !beats.is_null())
    f.kan_beats_mlp = io::as_bool(beats, r.path_of("kan_beats_mlp"));
  f.seconds = r.number("seconds", Bound::kNonNegative);
  r.finish();
  return f;
}

// A point reference as the messages show it: "accuracy.fits[0].points[3] (test RMSE 0.002)".
std::string describe_ref(const AccuracyRun& run, const std::optional<AccuracyPointRef>& ref,
                         const std::string& fits_path) {
  if (!ref)
    return "null";
  const auto& point =
      run.fits[static_cast<size_t>(ref->fit)].points[static_cast<size_t>(ref->point)];
  return io::index_path(
             io::child_path(io::index_path(fits_path, static_cast<size_t>(ref->fit)), "points"),
             static_cast<size_t>(ref->point)) +
         " (test RMSE " + io::format_number(point.test_rmse) + ", " +
         std::to_string(point.parameters) + " parameters)";
}

// Where a reference points must exist: a fit of the run and a point of that fit.
void check_ref(const AccuracyRun& run, const AccuracyPointRef& ref, const std::string& path,
               const std::string& fits_path) {
  if (static_cast<size_t>(ref.fit) >= run.fits.size())
    io::fail(io::child_path(path, "fit"), std::to_string(ref.fit) + " is not a fit (" + fits_path +
                                              " has " + std::to_string(run.fits.size()) + ")");
  const auto& fit = run.fits[static_cast<size_t>(ref.fit)];
  if (static_cast<size_t>(ref.point) >= fit.points.size())
    io::fail(io::child_path(path, "point"),
             std::to_string(ref.point) + " is not a point of " +
                 io::index_path(fits_path, static_cast<size_t>(ref.fit)) + " (it has " +
                 std::to_string(fit.points.size()) + ")");
}

// The derived fields of each summary entry must be what summarize_accuracy() makes of the fits:
// a file whose summary contradicts what it summarises is refused rather than shown.
void check_accuracy_summary(const AccuracyRun& run, const std::string& path) {
  const auto fits_path = io::child_path(path, "fits");
  const auto summary_path = io::child_path(path, "summary");
  AccuracyRun expected = run;
  summarize_accuracy(expected);
  for (size_t k = 0; k < run.summary.size(); ++k) {
    const auto& s = run.summary[k];
    const auto& e = expected.summary[k];
    const auto entry = io::index_path(summary_path, k);
    const auto key = [&](const char* name) { return io::child_path(entry, name); };
    const std::string of = io::quoted(s.function) + " on " + io::quoted(s.device);
    for (const auto& [name, ref] :
         {std::pair{"best_kan", s.best_kan}, std::pair{"best_mlp", s.best_mlp}})
      if (ref)
        check_ref(run, *ref, key(name), fits_path);
    for (size_t i = 0; i < s.pareto.size(); ++i)
      check_ref(run, s.pareto[i], io::index_path(key("pareto"), i), fits_path);

    if (s.fits != e.fits)
      io::fail(key("fits"), "is " + std::to_string(s.fits) + " but " + fits_path + " has " +
                                std::to_string(e.fits) + " fits of " + of);
    if (s.failed != e.failed)
      io::fail(key("failed"), "is " + std::to_string(s.failed) + " but " +
                                  std::to_string(e.failed) + " of the fits of " + of + " failed");
    for (const auto& [name, family, stated, computed] :
         {std::tuple{"best_kan", "KAN", s.best_kan, e.best_kan},
          std::tuple{"best_mlp", "MLP", s.best_mlp, e.best_mlp}})
      if (!(stated == computed))
        io::fail(key(name), "is " + describe_ref(run, stated, fits_path) + " but the " + family +
                                " point of lowest test RMSE of " + of + " is " +
                                describe_ref(run, computed, fits_path));
    if (s.pareto != e.pareto) {
      const auto list = [&](const std::vector<AccuracyPointRef>& refs) {
        std::string text = "[";
        for (size_t i = 0; i < refs.size(); ++i)
          text += (i ? ", " : "") + describe_ref(run, refs[i], fits_path);
        return io::elide(text + "]", 400);
      };
      io::fail(key("pareto"), "is " + list(s.pareto) + " but the Pareto front of the points of " +
                                  of + " is " + list(e.pareto));
    }
    if (s.kan_beats_mlp != e.kan_beats_mlp) {
      const auto text = [](const std::optional<bool>& b) {
        return b ? std::string(*b ? "true" : "false") : std::string("null");
      };
      io::fail(key("kan_beats_mlp"),
               "is " + text(s.kan_beats_mlp) + " but the best KAN and MLP points of " + of + " (" +
                   describe_ref(run, e.best_kan, fits_path) + ", " +
                   describe_ref(run, e.best_mlp, fits_path) + ") make it " + text(e.kan_beats_mlp));
    }
    if (!(std::fabs(s.seconds - e.seconds) <= 1e-9 * std::max({1.0, s.seconds, e.seconds})))
      io::fail(key("seconds"), "is " + io::format_number(s.seconds) +
                                   " but the seconds of the fits of " + of + " sum to " +
                                   io::format_number(e.seconds));
  }
}

AccuracyRun accuracy_from_json(const json& value, const std::string& path, bool lenient) {
  ObjectReader r(value, path, lenient);
  AccuracyRun a;
  a.table = r.string("table");
  a.preset = r.string("preset");
  a.functions = io::as_strings(r.required("functions"), r.path_of("functions"));
  a.devices = io::as_strings(r.required("devices"), r.path_of("devices"));
  a.seeds = read_array<uint64_t>(
      r.required("seeds"), r.path_of("seeds"),
      [](const json& v, const std::string& p) { return io::as_unsigned(v, p); });
  a.train_num = r.integer("train_num", Bound::kNonNegative);
  a.test_num = r.integer("test_num", Bound::kNonNegative);
  a.grids = integers_from_json(r.required("grids"), r.path_of("grids"), 1);
  a.steps = r.integer("steps", Bound::kNonNegative);
  a.jobs = r.integer("jobs", Bound::kNonNegative);
  a.threads_per_fit = r.integer("threads_per_fit", Bound::kNonNegative);
  a.planned_fits = r.integer("planned_fits", Bound::kNonNegative);
  a.wall_seconds = r.number("wall_seconds", Bound::kNonNegative);
  a.fits = read_array<AccuracyFit>(
      r.required("fits"), r.path_of("fits"),
      [&](const json& v, const std::string& p) { return accuracy_fit_from_json(v, p, lenient); });
  a.summary = read_array<AccuracyFunction>(r.required("summary"), r.path_of("summary"),
                                           [&](const json& v, const std::string& p) {
                                             return accuracy_function_from_json(v, p, lenient);
                                           });
  r.finish();

  if (static_cast<int64_t>(a.fits.size()) > a.planned_fits)
    io::fail(r.path_of("planned_fits"), "is " + std::to_string(a.planned_fits) + " but " +
                                            r.path_of("fits") + " has " +
                                            std::to_string(a.fits.size()) + " fits");
  // Fits are unique by key (a resumed run skips a fit by it).
  std::map<std::string, size_t> keys;
  for (size_t i = 0; i < a.fits.size(); ++i) {
    const auto [first, added] = keys.emplace(a.fits[i].key(), i);
    if (!added)
      io::fail(io::index_path(r.path_of("fits"), i),
               "same key " + io::quoted(first->first) + " as " +
                   io::index_path(r.path_of("fits"), first->second) +
                   " (function, device, family, width, activation and seed)");
  }
  // One summary entry per function and device of the run, and one for every fit's.
  const auto listed = [](const std::vector<std::string>& names, const std::string& name) {
    return std::find(names.begin(), names.end(), name) != names.end();
  };
  for (size_t k = 0; k < a.summary.size(); ++k) {
    const auto& s = a.summary[k];
    const auto entry = io::index_path(r.path_of("summary"), k);
    if (!listed(a.functions, s.function))
      io::fail(io::child_path(entry, "function"),
               io::quoted(s.function) + " is not one of " + r.path_of("functions"));
    if (!listed(a.devices, s.device))
      io::fail(io::child_path(entry, "device"),
               io::quoted(s.device) + " is not one of " + r.path_of("devices"));
    for (size_t j = 0; j < k; ++j)
      if (a.summary[j].function == s.function && a.summary[j].device == s.device)
        io::fail(entry, "same function " + io::quoted(s.function) + " and device " +
                            io::quoted(s.device) + " as " +
                            io::index_path(r.path_of("summary"), j));
  }
  for (size_t i = 0; i < a.fits.size(); ++i) {
    const auto& f = a.fits[i];
    if (std::none_of(a.summary.begin(), a.summary.end(), [&](const AccuracyFunction& s) {
          return s.function == f.function && s.device == f.device;
        }))
      io::fail(io::index_path(r.path_of("fits"), i),
               "no entry of " + r.path_of("summary") + " is for its function " +
                   io::quoted(f.function) + " on " + io::quoted(f.device));
  }
  check_accuracy_summary(a, path);
  return a;
}

RunConfig config_from_json(const json& value, const std::string& path, bool lenient) {
  ObjectReader r(value, path, lenient);
  RunConfig c;
  c.suite = r.string("suite");
  c.devices = io::as_strings(r.required("devices"), r.path_of("devices"));
  c.repeat = r.integer("repeat", Bound::kNonNegative);
  c.warmup = r.optional_integer("warmup", Bound::kNonNegative);
  c.cases = r.optional_strings("cases");
  c.seed = r.optional_unsigned("seed");
  c.time_limit_seconds = r.optional_number("time_limit_seconds", Bound::kNonNegative);
  c.cupti = r.optional_bool("cupti");
  c.trace = r.optional_string("trace");
  c.out = r.optional_string("out");
  c.extra = r.optional_object("extra");
  r.finish();
  return c;
}

CudaDevice cuda_device_from_json(const json& value, const std::string& path, bool lenient) {
  ObjectReader r(value, path, lenient);
  CudaDevice d;
  d.index = r.integer("index", Bound::kNonNegative);
  d.name = r.string("name");
  d.compute_capability = r.string("compute_capability");
  d.multiprocessors = r.integer("multiprocessors", Bound::kNonNegative);
  d.total_memory_bytes = r.integer("total_memory_bytes", Bound::kNonNegative);
  d.free_memory_bytes = r.integer("free_memory_bytes", Bound::kNonNegative);
  r.finish();
  return d;
}

EnvironmentProblem problem_from_json(const json& value, const std::string& path, bool lenient) {
  ObjectReader r(value, path, lenient);
  EnvironmentProblem p;
  p.what = r.string("what");
  p.fix = r.string("fix");
  r.finish();
  return p;
}

Environment environment_from_json_at(const json& value, const std::string& path, bool lenient) {
  ObjectReader r(value, path, lenient);
  Environment e;
  e.kanbench_version = r.string("kanbench_version");
  e.git_commit = r.string("git_commit");
  e.date = r.string("date");
  e.hostname = r.string("hostname");
  e.libtorch_version = r.string("libtorch_version");
  e.cuda_build_version = r.string("cuda_build_version");
  e.cudnn_build_version = r.string("cudnn_build_version");
  e.cuda_runtime_version = r.string("cuda_runtime_version");
  e.cuda_driver_version = r.string("cuda_driver_version");
  e.cuda_available = r.boolean("cuda_available");
  e.cuda_unavailable_reason = r.string("cuda_unavailable_reason");
  if (const auto& visible = r.required("cuda_visible_devices"); !visible.is_null())
    e.cuda_visible_devices = io::as_string(visible, r.path_of("cuda_visible_devices"));
  e.cuda_devices = read_array<CudaDevice>(
      r.required("cuda_devices"), r.path_of("cuda_devices"),
      [&](const json& v, const std::string& p) { return cuda_device_from_json(v, p, lenient); });
  e.cpu_model = r.string("cpu_model");
  e.cpu_cores = r.integer("cpu_cores", Bound::kNonNegative);
  e.torch_threads = r.integer("torch_threads", Bound::kNonNegative);
  e.nvtx_available = r.boolean("nvtx_available");
  e.cupti_available = r.boolean("cupti_available");
  e.cpu_governor = r.optional_string("cpu_governor");
  e.load_average = r.optional_number("load_average", Bound::kNonNegative);
  e.problems = read_array<EnvironmentProblem>(
      r.required("problems"), r.path_of("problems"),
      [&](const json& v, const std::string& p) { return problem_from_json(v, p, lenient); });
  r.finish();
  return e;
}

} // namespace

json to_json(const Environment& e) {
  json devices = json::array(), problems = json::array();
  for (const auto& d : e.cuda_devices)
    devices.push_back({{"index", d.index},
                       {"name", d.name},
                       {"compute_capability", d.compute_capability},
                       {"multiprocessors", d.multiprocessors},
                       {"total_memory_bytes", d.total_memory_bytes},
                       {"free_memory_bytes", d.free_memory_bytes}});
  for (const auto& p : e.problems)
    problems.push_back({{"what", p.what}, {"fix", p.fix}});
  json j{{"kanbench_version", e.kanbench_version},
         {"git_commit", e.git_commit},
         {"date", e.date},
         {"hostname", e.hostname},
         {"libtorch_version", e.libtorch_version},
         {"cuda_build_version", e.cuda_build_version},
         {"cudnn_build_version", e.cudnn_build_version},
         {"cuda_runtime_version", e.cuda_runtime_version},
         {"cuda_driver_version", e.cuda_driver_version},
         {"cuda_available", e.cuda_available},
         {"cuda_unavailable_reason", e.cuda_unavailable_reason},
         {"cuda_visible_devices", nullable(e.cuda_visible_devices)},
         {"cuda_devices", devices},
         {"cpu_model", e.cpu_model},
         {"cpu_cores", e.cpu_cores},
         {"torch_threads", e.torch_threads},
         {"nvtx_available", e.nvtx_available},
         {"cupti_available", e.cupti_available},
         {"problems", problems}};
  put_optional(j, "cpu_governor", e.cpu_governor);
  put_optional(j, "load_average", e.load_average);
  return j;
}

json to_json(const AuditFinding& f) {
  json j{{"tensor", f.tensor},
         {"kind", f.kind},
         {"device", f.device},
         {"expected_device", f.expected_device},
         {"message", f.message}};
  put_nonempty(j, "problem", f.problem);
  put_nonempty(j, "fix", f.fix);
  put_nonempty(j, "dtype", f.dtype);
  put_nonempty(j, "shape", f.shape);
  put_nonempty(j, "module", f.module);
  put_nonempty(j, "phase", f.phase);
  if (f.count)
    j["count"] = *f.count;
  put_nonempty(j, "stage", f.stage);
  return j;
}

AuditFinding audit_finding_from_json(const json& value, const std::string& source) {
  try {
    return finding_from_json(value, "", false);
  } catch (const ResultsError& e) {
    throw e.in_file(source);
  }
}

Environment environment_from_json(const json& value, const std::string& source) {
  try {
    return environment_from_json_at(value, "environment", false);
  } catch (const ResultsError& e) {
    throw e.in_file(source);
  }
}

json to_json(const Results& results) {
  json cases = json::array(), comparisons = json::array(), edge_cases = json::array();
  for (const auto& c : results.cases)
    cases.push_back(to_json(c));
  for (const auto& c : results.comparisons)
    comparisons.push_back(to_json(c));
  for (const auto& e : results.edge_cases)
    edge_cases.push_back(to_json(e));
  json j{{"schema_version", results.schema_version},
         {"environment", to_json(results.environment)},
         {"config", to_json(results.config)},
         {"cases", cases},
         {"comparisons", comparisons},
         {"edge_cases", edge_cases}};
  if (!results.scaling.empty()) {
    json scaling = json::array();
    for (const auto& x : results.scaling)
      scaling.push_back(to_json(x));
    j["scaling"] = scaling;
  }
  if (results.sweep)
    j["sweep"] = to_json(*results.sweep);
  if (results.accuracy)
    j["accuracy"] = to_json(*results.accuracy);
  put_optional(j, "wall_seconds", results.wall_seconds);
  // Required since 1.1.0; left out only for a Results read from a 1.0 file (which had none).
  put_nonempty(j, "run_id", results.run_id);
  return j;
}

int check_schema_version(const json& version, const std::string& key_path,
                         const std::string& source) {
  try {
    return io::check_schema_version(version, key_path, kSchemaVersion);
  } catch (const ResultsError& e) {
    throw e.in_file(source);
  }
}

Results results_from_json(const json& value, const std::string& source) {
  try {
    if (!value.is_object())
      io::fail("", "expected a JSON object at the top level, got " + io::describe(value));
    const auto version = value.find("schema_version");
    if (version == value.end())
      io::fail("schema_version", "missing (a required key; is this a kanbench results.json?)");
    int our_minor = 0;
    std::sscanf(kSchemaVersion, "%*d.%d", &our_minor);
    const int minor = check_schema_version(*version, "schema_version");
    const bool lenient = minor > our_minor;

    ObjectReader r(value, "", lenient);
    Results results;
    results.schema_version = r.string("schema_version");
    // run_id came with 1.1.0: required from then on, unknown (refused) in 1.0 files.
    results.run_id.clear();
    if (minor >= 1) {
      results.run_id = r.string("run_id");
      if (!is_valid_run_id(results.run_id))
        io::fail("run_id", "expected 1 to 128 letters, digits, '.', '_' or '-', got " +
                               io::quoted(results.run_id));
    }
    results.environment =
        environment_from_json_at(r.required("environment"), "environment", lenient);
    results.config = config_from_json(r.required("config"), "config", lenient);
    results.cases = read_array<CaseResult>(
        r.required("cases"), "cases",
        [&](const json& v, const std::string& p) { return case_from_json(v, p, lenient); });
    results.comparisons = read_array<Comparison>(
        r.required("comparisons"), "comparisons",
        [&](const json& v, const std::string& p) { return comparison_from_json(v, p, lenient); });
    results.edge_cases = read_array<EdgeCaseResult>(
        r.required("edge_cases"), "edge_cases",
        [&](const json& v, const std::string& p) { return edge_case_from_json(v, p, lenient); });
    // From 1.3.0; absent when the run measured no scaling.
    if (const auto* scaling = r.optional("scaling")) {
      if (minor < 3)
        io::fail("scaling", "not part of schema " + results.schema_version + " (from 1.3.0)");
      results.scaling =
          read_array<ScalingResult>(*scaling, "scaling", [&](const json& v, const std::string& p) {
            return scaling_from_json(v, p, lenient);
          });
    }
    // From 1.4.0; absent when the run swept no batch sizes.
    if (const auto* sweep = r.optional("sweep")) {
      if (minor < 4)
        io::fail("sweep", "not part of schema " + results.schema_version + " (from 1.4.0)");
      results.sweep = sweep_from_json(*sweep, "sweep", lenient);
    }
    // From 1.5.0; absent unless the run is a `kanbench accuracy` run.
    if (const auto* accuracy = r.optional("accuracy")) {
      if (minor < 5)
        io::fail("accuracy", "not part of schema " + results.schema_version + " (from 1.5.0)");
      results.accuracy = accuracy_from_json(*accuracy, "accuracy", lenient);
    }
    results.wall_seconds = r.optional_number("wall_seconds", Bound::kNonNegative);
    r.finish();

    // Cross references: cases are unique by (name, target); comparisons name existing cases.
    for (size_t i = 0; i < results.cases.size(); ++i) {
      const auto& c = results.cases[i];
      for (size_t k = 0; k < i; ++k)
        if (results.cases[k].name == c.name && results.cases[k].target == c.target)
          io::fail(io::index_path("cases", i),
                   "same name " + io::quoted(c.name) + " and target " + io::quoted(c.target) +
                       " as " + io::index_path("cases", k) + " (give each target its own label)");
    }
    for (size_t i = 0; i < results.comparisons.size(); ++i) {
      const auto& c = results.comparisons[i];
      const auto path = io::index_path("comparisons", i);
      for (const auto& [key, target] : {std::pair{"a", &c.a}, std::pair{"b", &c.b}})
        if (!results.find_case(c.case_name, *target))
          io::fail(io::child_path(path, key), "no case with name " + io::quoted(c.case_name) +
                                                  " and target " + io::quoted(*target) +
                                                  " in cases");
    }
    return results;
  } catch (const ResultsError& e) {
    throw e.in_file(source);
  }
}

std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw std::runtime_error(path + ": cannot open: " + std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad())
    throw std::runtime_error(path + ": cannot read: " + std::strerror(errno));
  return text.str();
}

nlohmann::json read_json_file(const std::string& path, const std::string& what) {
  if (std::filesystem::is_directory(path))
    throw ResultsError(path, "", "is a folder, expected " + what);
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw ResultsError(path, "", std::string("cannot open: ") + std::strerror(errno));
  std::ostringstream buffer;
  buffer << in.rdbuf();
  try {
    return io::parse_json(buffer.str());
  } catch (const ResultsError& e) {
    throw e.in_file(path);
  }
}

Results read_results_file(const std::string& path) {
  return results_from_json(read_json_file(path, "a results.json file"), path);
}

void write_results_file(const std::string& path, const Results& results) {
  const json j = to_json(results);
  // The writer refuses what the reader would refuse: every file written can be read back.
  const std::string text = j.dump(2, ' ', false, json::error_handler_t::replace) + "\n";
  try {
    results_from_json(io::parse_json(text), path);
  } catch (const ResultsError& e) {
    throw ResultsError(path, e.key_path(), e.problem() + " (not written)");
  }
  io::write_file_atomically(path, text);
}

} // namespace kan::results
