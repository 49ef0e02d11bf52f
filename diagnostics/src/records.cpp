#include "kan/diagnostics/records.h"

#include "kan/io/json_fields.h"
#include "kan/results/results_io.h"

#include <algorithm>
#include <cmath>

namespace kan::diagnostics {

namespace {

using io::Bound;
using io::ObjectReader;
using json = nlohmann::json;

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

template <typename Read> auto in_file(const std::string& source, Read read) {
  try {
    return read();
  } catch (const io::JsonError& e) {
    throw e.in_file(source);
  }
}

// An MLP's size follows from its configuration alone.
void check_mlp_size(const results::FitRecord& f, const MLPOptions& mlp) {
  if (!f.parameters)
    return;
  check_repeats(*f.parameters, mlp_parameter_count(mlp.width()), "final.parameters",
                "config.model's count");
  check_repeats(*f.forward_flops, mlp_forward_flops(mlp.width(), mlp.activation()),
                "final.forward_flops", "config.model's count");
}

} // namespace

// Its keys, for both directions (kan/io/json_fields.h).
template <typename Fields> static void fields(Fields& f, AuditRun& c) {
  f.required("checkpoint", c.checkpoint);
  f.defaulted_enumeration("model_kind", c.model_kind, kModelKindNames);
  f.custom(
      "model", c.model, [](const json& model) { return model; },
      [](const json& model, const std::string& path) {
        if (!model.is_object())
          io::fail(path, "expected an object, got " + io::elide(model.dump()));
        return model;
      });
  f.required("data_device", c.data_device);
  f.required("data_dtype", c.data_dtype);
  f.required("samples", c.samples, Bound::kNonNegative);
  f.required("opt", c.opt);
  f.required("trace_steps", c.trace_steps, Bound::kNonNegative);
  f.required("seed", c.seed);
  f.defaulted("rehearsal", c.rehearsal);
}

void write_fit_setup(const FitSetup& setup, results::FitConfig& config) {
  config.model_kind = to_string(setup.model_kind);
  config.model = setup.model_kind == ModelKind::kMLP           ? to_json(setup.mlp)
                 : setup.model_kind == ModelKind::kTorchScript ? setup.script
                                                               : to_json(setup.model);
  config.fit = to_json(setup.fit);
  config.prune = setup.prune ? to_json(*setup.prune) : json(nullptr);
  config.symbolic = setup.symbolic ? to_json(*setup.symbolic) : json(nullptr);
}

FitSetup read_fit_setup(const results::FitConfig& config) {
  FitSetup setup;
  setup.model_kind = io::enum_from_string(config.model_kind, kModelKindNames, "config.model_kind");
  if (setup.model_kind == ModelKind::kMLP)
    setup.mlp = mlp_options_from_json(config.model, "config.model");
  else if (setup.model_kind == ModelKind::kTorchScript)
    setup.script = config.model; // a description: results::model_shape reads what it needs
  else
    setup.model = kan_options_from_json(config.model, "config.model");
  setup.fit = fit_options_from_json(config.fit, "config.fit");
  if (!config.prune.is_null())
    setup.prune = prune_stage_from_json(config.prune, "config.prune");
  if (!config.symbolic.is_null())
    setup.symbolic = symbolic_stage_from_json(config.symbolic, "config.symbolic");
  return setup;
}

results::FitRecord fit_record_from_json(const json& value, const std::string& source) {
  auto record = results::fit_record_from_json(value, source);
  in_file(source, [&] {
    const auto setup = read_fit_setup(record.config);
    if (setup.model_kind == ModelKind::kMLP)
      check_mlp_size(record, setup.mlp);
    audited_fit_from_json(record.device_audit, "device_audit");
    return 0;
  });
  return record;
}

results::FitRecord read_fit_record(const std::string& path) {
  return in_file(
      path, [&] { return fit_record_from_json(io::parse_json(results::read_text_file(path))); });
}

json to_json(const AuditRecord& a) {
  const auto& c = a.config;
  auto findings = json::array();
  for (const auto& f : a.findings)
    findings.push_back(results::to_json(f));
  json summary{{"clean", a.findings.empty()},
               {"findings", a.findings.size()},
               {"tensors_checked", a.static_audit.summary.tensors_checked},
               {"bytes_per_device", a.static_audit.summary.bytes_per_device},
               {"exit_code", a.exit_code}};
  json j{{"schema_version", a.schema_version},
         {"command", "audit"},
         {"device", a.device},
         {"config", io::write_object(c)},
         {"findings", findings},
         {"static_audit", a.static_audit.to_json()}};
  if (a.after_training) {
    const auto after = a.after_training->to_json();
    summary["trace"] = after["trace"]["summary"];
    summary["traced_step_seconds"] = after["traced_step_seconds"];
    summary["untraced_step_seconds"] = after["untraced_step_seconds"];
    j["after_training"] = after;
  }
  if (a.graph_check) {
    summary["graph_check"] = a.graph_check->to_json()["summary"];
    j["graph_check"] = a.graph_check->to_json();
  }
  j["summary"] = summary;
  return j;
}

AuditRecord audit_record_from_json(const json& value, const std::string& source) {
  return in_file(source, [&] {
    const bool lenient = io::check_document(value, kAuditSchemaVersion, "audit.json") >
                         io::minor_version(kAuditSchemaVersion);
    ObjectReader r(value, "", lenient);
    AuditRecord a;
    a.schema_version = r.string("schema_version");
    check_command(r, "audit");
    a.device = r.string("device");
    a.config = io::read_object<AuditRun>(r.required("config"), "config", lenient);
    // The model's options, strictly, where kanbench built it.
    if (a.config.model_kind == ModelKind::kKAN)
      kan_options_from_json(a.config.model, "config.model");
    else if (a.config.model_kind == ModelKind::kMLP)
      mlp_options_from_json(a.config.model, "config.model");
    const auto& findings = io::as_array(r.required("findings"), "findings");
    for (size_t i = 0; i < findings.size(); ++i)
      a.findings.push_back(
          results::audit_finding_from_json(findings[i], io::index_path("findings", i)));
    a.static_audit = audit_report_from_json(r.required("static_audit"), "static_audit");
    if (r.optional("after_training"))
      a.after_training = audited_fit_from_json(r.required("after_training"), "after_training");
    if (r.optional("graph_check"))
      a.graph_check = graph_check_report_from_json(r.required("graph_check"), "graph_check");

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
      path, [&] { return audit_record_from_json(io::parse_json(results::read_text_file(path))); });
}

} // namespace kan::diagnostics
