#include "kan/diagnostics/records.h"

#include "kan/io/json_reader.h"
#include "kan/reports/results_io.h"

#include <algorithm>
#include <cmath>

namespace kan::diagnostics {
namespace {

using io::Bound;
using io::ObjectReader;
using json = nlohmann::json;

// The top level of a document: an object whose schema_version has our major; unknown keys
// are tolerated below only when its minor is newer than ours (returned as `lenient`).
bool check_document(const json& value, const char* writes, const char* what) {
  if (!value.is_object())
    io::fail("", "expected a JSON object at the top level, got " + io::describe(value));
  const auto version = value.find("schema_version");
  if (version == value.end())
    io::fail("schema_version",
             std::string("missing (a required key; is this a kanbench ") + what + "?)");
  return io::check_schema_version(*version, "schema_version", writes) > io::minor_version(writes);
}

void check_command(ObjectReader& r, const char* expected) {
  const auto command = r.string("command");
  if (command != expected)
    io::fail(r.path_of("command"),
             "expected \"" + std::string(expected) + "\", got " + io::quoted(command));
}

// A summary key that repeats another part of the document must repeat it exactly.
void check_repeats(const json& value, const json& original, const std::string& path,
                   const std::string& original_path) {
  if (value != original)
    io::fail(path, "is " + io::elide(value.dump()) + " but " + original_path + " is " +
                       io::elide(original.dump()));
}

json stage_json(const FitStage& stage) {
  return {{"history", to_json(stage.history)},
          {"train_rmse", stage.train_rmse},
          {"test_rmse", stage.test_rmse}};
}

FitStage stage_from(ObjectReader& r) {
  FitStage stage;
  stage.history = fit_history_from_json(r.required("history"), r.path_of("history"));
  stage.train_rmse = r.number("train_rmse", Bound::kNonNegative);
  stage.test_rmse = r.number("test_rmse", Bound::kNonNegative);
  return stage;
}

// A time that repeats others (a stage's, the stages' sum) must equal them up to rounding.
void check_seconds(ObjectReader& r, const std::string& key, double expected, const char* what) {
  const double seconds = r.number(key, Bound::kNonNegative);
  if (std::abs(seconds - expected) > 1e-9 * std::max(1.0, seconds))
    io::fail(r.path_of(key),
             io::format_number(seconds) + " is not " + what + " " + io::format_number(expected));
}

template <typename Read> auto in_file(const std::string& source, Read read) {
  try {
    return read();
  } catch (const io::JsonError& e) {
    throw e.in_file(source);
  }
}

} // namespace

json to_json(const FitRecord& f) {
  const auto& c = f.config;
  json j{{"schema_version", f.schema_version},
         {"command", "fit"},
         {"config",
          {{"function", c.function},
           {"train_num", c.train_num},
           {"test_num", c.test_num},
           {"seed", c.seed},
           {"device", c.device},
           {"refine", c.refine},
           {"trace_steps", c.trace_steps},
           {"model", to_json(c.model)},
           {"fit", to_json(c.fit)}}},
         {"environment", {{"libtorch", f.libtorch}, {"threads", f.threads}, {"device", c.device}}},
         {"device_audit", f.device_audit.to_json()}};
  if (!c.initial_model.empty())
    j["config"]["initial_model"] = c.initial_model;
  j.update(stage_json(f.trained));
  j["seconds"] = f.seconds();
  if (f.refined) {
    j["refined"] = stage_json(*f.refined);
    j["refined"]["grid"] = c.refine;
    j["refined"]["seconds"] = f.refined->history.seconds;
    j["refined_test_rmse"] = f.refined->test_rmse;
  }
  j["checkpoint"] = f.checkpoint;
  return j;
}

FitRecord fit_record_from_json(const json& value, const std::string& source) {
  return in_file(source, [&] {
    const bool lenient = check_document(value, kFitSchemaVersion, "fit.json");
    ObjectReader r(value, "", lenient);
    FitRecord f;
    f.schema_version = r.string("schema_version");
    check_command(r, "fit");
    ObjectReader c(r.required("config"), "config", lenient);
    f.config.function = c.string("function");
    f.config.train_num = c.integer("train_num", Bound::kNonNegative);
    f.config.test_num = c.integer("test_num", Bound::kNonNegative);
    f.config.seed = io::as_unsigned(c.required("seed"), c.path_of("seed"));
    f.config.device = c.string("device");
    f.config.refine = c.integer("refine", Bound::kNonNegative);
    f.config.trace_steps = c.integer("trace_steps", Bound::kNonNegative);
    f.config.model = kan_options_from_json(c.required("model"), c.path_of("model"));
    f.config.fit = fit_options_from_json(c.required("fit"), c.path_of("fit"));
    if (c.optional("initial_model"))
      f.config.initial_model = c.string("initial_model");
    c.finish();
    ObjectReader e(r.required("environment"), "environment", lenient);
    f.libtorch = e.string("libtorch");
    f.threads = e.integer("threads", Bound::kNonNegative);
    check_repeats(e.required("device"), f.config.device, "environment.device", "config.device");
    e.finish();
    f.device_audit = audited_fit_from_json(r.required("device_audit"), "device_audit");
    f.trained = stage_from(r);
    if (r.optional("refined")) {
      ObjectReader refined(r.required("refined"), "refined", lenient);
      f.refined = stage_from(refined);
      check_repeats(refined.required("grid"), f.config.refine, "refined.grid", "config.refine");
      check_seconds(refined, "seconds", f.refined->history.seconds, "refined.history.seconds");
      refined.finish();
      check_repeats(r.required("refined_test_rmse"), f.refined->test_rmse, "refined_test_rmse",
                    "refined.test_rmse");
    } else if (f.config.refine >= 1) {
      io::fail("refined", "missing, but config.refine is " + std::to_string(f.config.refine));
    }
    check_seconds(r, "seconds", f.seconds(), "the stages' training time");
    f.checkpoint = r.string("checkpoint");
    r.finish();
    return f;
  });
}

FitRecord read_fit_record(const std::string& path) {
  return in_file(
      path, [&] { return fit_record_from_json(io::parse_json(reports::read_text_file(path))); });
}

json to_json(const AuditRecord& a) {
  const auto& c = a.config;
  auto findings = json::array();
  for (const auto& f : a.findings)
    findings.push_back(reports::to_json(f));
  json summary{{"clean", a.findings.empty()},
               {"findings", a.findings.size()},
               {"tensors_checked", a.static_audit.summary.tensors_checked},
               {"bytes_per_device", a.static_audit.summary.bytes_per_device},
               {"exit_code", a.exit_code}};
  json j{{"schema_version", a.schema_version},
         {"command", "audit"},
         {"device", a.device},
         {"config",
          {{"checkpoint", c.checkpoint},
           {"model", to_json(c.model)},
           {"data_device", c.data_device},
           {"data_dtype", c.data_dtype},
           {"samples", c.samples},
           {"opt", c.opt},
           {"trace_steps", c.trace_steps},
           {"seed", c.seed}}},
         {"findings", findings},
         {"static_audit", a.static_audit.to_json()}};
  if (a.after_training) {
    const auto after = a.after_training->to_json();
    summary["trace"] = after["trace"]["summary"];
    summary["traced_step_seconds"] = after["traced_step_seconds"];
    summary["untraced_step_seconds"] = after["untraced_step_seconds"];
    j["after_training"] = after;
  }
  j["summary"] = summary;
  return j;
}

AuditRecord audit_record_from_json(const json& value, const std::string& source) {
  return in_file(source, [&] {
    const bool lenient = check_document(value, kAuditSchemaVersion, "audit.json");
    ObjectReader r(value, "", lenient);
    AuditRecord a;
    a.schema_version = r.string("schema_version");
    check_command(r, "audit");
    a.device = r.string("device");
    ObjectReader c(r.required("config"), "config", lenient);
    a.config.checkpoint = c.string("checkpoint");
    a.config.model = kan_options_from_json(c.required("model"), c.path_of("model"));
    a.config.data_device = c.string("data_device");
    a.config.data_dtype = c.string("data_dtype");
    a.config.samples = c.integer("samples", Bound::kNonNegative);
    a.config.opt = c.string("opt");
    a.config.trace_steps = c.integer("trace_steps", Bound::kNonNegative);
    a.config.seed = io::as_unsigned(c.required("seed"), c.path_of("seed"));
    c.finish();
    const auto& findings = io::as_array(r.required("findings"), "findings");
    for (size_t i = 0; i < findings.size(); ++i)
      a.findings.push_back(
          reports::audit_finding_from_json(findings[i], io::index_path("findings", i)));
    a.static_audit = audit_report_from_json(r.required("static_audit"), "static_audit");
    if (r.optional("after_training"))
      a.after_training = audited_fit_from_json(r.required("after_training"), "after_training");

    // The summary repeats the rest of the document; it must agree with it.
    ObjectReader s(r.required("summary"), "summary", lenient);
    a.exit_code = static_cast<int>(s.integer("exit_code", Bound::kNonNegative));
    const auto written = to_json(a)["summary"];
    for (const auto& item : written.items())
      check_repeats(s.required(item.key()), item.value(), s.path_of(item.key()),
                    "the rest of the document");
    s.finish();
    r.finish();
    return a;
  });
}

AuditRecord read_audit_record(const std::string& path) {
  return in_file(
      path, [&] { return audit_record_from_json(io::parse_json(reports::read_text_file(path))); });
}

} // namespace kan::diagnostics
