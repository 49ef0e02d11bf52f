#include "kan/diagnostics/audit_record.h"

#include "detail/document_checks.h"

#include "kan/io/json_fields.h"
#include "kan/nn/mlp.h"
#include "kan/nn/network.h"
#include "kan/results/results_io.h"

namespace kan::diagnostics {

using detail::check_command;
using detail::check_repeats;
using detail::in_file;
using io::Bound;
using io::ObjectReader;
using json = nlohmann::json;

// Its keys, for both directions (kan/io/json_fields.h).
template <typename Fields> static void fields(Fields& f, AuditRun& c) {
  f.required("checkpoint", c.checkpoint);
  f.defaulted_enumeration("model_kind", c.model_kind, kModelKindNames);
  f.custom(
      "model", c.model, [](const json& model) { return model; },
      [](const json& model, const std::string& path) {
        if (!model.is_object())
          io::fail(path, "expected an object, got " +
                             io::elided(model.dump(), io::kQuotedChars, /*say_length=*/true));
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
