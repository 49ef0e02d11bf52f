#include "kan/diagnostics/fit_setup.h"

#include "detail/document_checks.h"

#include "kan/io/json_fields.h"
#include "kan/results/results_io.h"

namespace kan::diagnostics {

namespace {

using detail::check_repeats;
using detail::in_file;
using json = nlohmann::json;

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

results::FitRecord strict_fit_record_from_json(const json& value, const std::string& source) {
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

results::FitRecord read_fit_record_strict(const std::string& path) {
  return in_file(path, [&] {
    return strict_fit_record_from_json(io::parse_json(results::read_text_file(path)));
  });
}

} // namespace kan::diagnostics
