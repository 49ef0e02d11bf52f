#include "kan/results/fit_summary.h"

#include "kan/io/json_reader.h"
#include "kan/io/text.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>

namespace kan::results {

using json = nlohmann::json;
using io::Bound;
using io::ObjectReader;
using io::read_array;

namespace {

// ---------------------------------------------------------------------------------------------
// Reading. The page shows a part of fit.json: every object is read with its other keys allowed.

constexpr bool kOtherKeys = true;

double nan_if_null(ObjectReader& r, const std::string& key) {
  return r.nullable_number(key, Bound::kNonNegative)
      .value_or(std::numeric_limits<double>::quiet_NaN());
}

int64_t node_count(const json& value, const std::string& path) {
  return io::as_integer(value, path, Bound::kNonNegative);
}

// config.model's width and mult: nodes per layer, the last `mult[l]` of them multiplication nodes.
std::vector<FitLayerWidth> model_width(ObjectReader& model) {
  const auto nodes =
      read_array<int64_t>(model.required("width"), model.path_of("width"), node_count);
  std::vector<int64_t> mult;
  if (const auto* value = model.optional("mult"))
    mult = read_array<int64_t>(*value, model.path_of("mult"), node_count);
  if (!mult.empty() && mult.size() != nodes.size())
    io::fail(model.path_of("mult"), "expected one entry per layer of width (" +
                                        std::to_string(nodes.size()) + "), got " +
                                        std::to_string(mult.size()));
  std::vector<FitLayerWidth> width;
  for (size_t l = 0; l < nodes.size(); ++l) {
    const int64_t m = mult.empty() ? 0 : mult[l];
    if (m > nodes[l])
      io::fail(io::index_path(model.path_of("mult"), l),
               std::to_string(m) + " multiplication nodes in a layer of " +
                   std::to_string(nodes[l]));
    width.push_back({nodes[l] - m, m});
  }
  return width;
}

// A width in pykan's form: [2, [2, 1], 1].
std::vector<FitLayerWidth> pykan_width(const json& value, const std::string& path) {
  return read_array<FitLayerWidth>(value, path, [](const json& layer, const std::string& at) {
    if (!layer.is_array())
      return FitLayerWidth{node_count(layer, at), 0};
    if (layer.size() != 2)
      io::fail(at, "expected an integer or [addition, multiplication] nodes, got " +
                       io::describe(layer));
    return FitLayerWidth{node_count(layer[0], io::index_path(at, 0)),
                         node_count(layer[1], io::index_path(at, 1))};
  });
}

// A stage's `history`, `train_rmse` and `test_rmse` in the object `r` reads.
FitStageSummary stage_from(ObjectReader& r, const std::string& key, const std::string& title) {
  FitStageSummary stage;
  stage.key = key;
  stage.title = title;
  ObjectReader history(r.required("history"), r.path_of("history"), kOtherKeys);
  stage.steps = read_array<FitStep>(history.required("steps"), history.path_of("steps"),
                                    [](const json& value, const std::string& at) {
                                      ObjectReader step(value, at, kOtherKeys);
                                      return FitStep{step.integer("step", Bound::kNonNegative),
                                                     nan_if_null(step, "train_rmse"),
                                                     nan_if_null(step, "test_rmse")};
                                    });
  stage.seconds = history.number("seconds", Bound::kNonNegative);
  stage.train_rmse = nan_if_null(r, "train_rmse");
  stage.test_rmse = nan_if_null(r, "test_rmse");
  return stage;
}

SymbolicCurve curve_from(const json& value, const std::string& path) {
  ObjectReader r(value, path, kOtherKeys);
  SymbolicCurve curve{r.numbers("x"), r.numbers("activation"), r.numbers("fit")};
  for (const auto& [key, values] :
       {std::pair{"activation", &curve.activation}, {"fit", &curve.fit}})
    if (values->size() != curve.x.size())
      io::fail(r.path_of(key), "expected " + std::to_string(curve.x.size()) +
                                   " numbers, one per x, got " + std::to_string(values->size()));
  return curve;
}

SymbolicEdge edge_from(const json& value, const std::string& path) {
  ObjectReader r(value, path, kOtherKeys);
  SymbolicEdge edge;
  edge.layer = r.integer("layer", Bound::kNonNegative);
  edge.i = r.integer("i", Bound::kNonNegative);
  edge.j = r.integer("j", Bound::kNonNegative);
  edge.function = r.string("function");
  edge.r2 = r.number("r2");
  edge.fixed = r.boolean("fixed");
  // Written only for a fixed edge.
  if (edge.fixed || r.optional("params")) {
    const auto params = r.numbers("params");
    if (params.size() != 4)
      io::fail(r.path_of("params"),
               "expected 4 numbers (a, b, c, d), got " + std::to_string(params.size()));
    edge.params = std::array<double, 4>{params[0], params[1], params[2], params[3]};
  }
  if (const auto* curve = r.optional("curve"))
    edge.curve = curve_from(*curve, r.path_of("curve"));
  return edge;
}

// `config.symbolic` (read by `config`) and the top-level `symbolic` (read by `s`).
FitSymbolic symbolic_from(ObjectReader& config, ObjectReader& s, int64_t outputs) {
  FitSymbolic symbolic;
  ObjectReader options(config.required("symbolic"), config.path_of("symbolic"), kOtherKeys);
  symbolic.lib = io::as_strings(options.required("lib"), options.path_of("lib"));
  symbolic.r2_threshold = options.number("r2_threshold");
  symbolic.auto_symbolic_seconds = s.number("auto_symbolic_seconds", Bound::kNonNegative);
  symbolic.edges = read_array<SymbolicEdge>(s.required("edges"), s.path_of("edges"), edge_from);
  symbolic.digits = s.integer("digits", Bound::kNonNegative);
  const auto& formula = s.required("formula");
  if (formula.is_null()) {
    symbolic.formula_error = s.string("formula_error");
    return symbolic;
  }
  symbolic.formula = read_array<SymbolicFormula>(
      formula, s.path_of("formula"), [](const json& value, const std::string& at) {
        ObjectReader f(value, at, kOtherKeys);
        return SymbolicFormula{f.string("sympy"), f.string("latex"), f.string("sympy_exact")};
      });
  if (static_cast<int64_t>(symbolic.formula->size()) != outputs)
    io::fail(s.path_of("formula"), "expected one formula per output (" + std::to_string(outputs) +
                                       "), got " + std::to_string(symbolic.formula->size()));
  return symbolic;
}

} // namespace

std::string to_string(const std::vector<FitLayerWidth>& width) {
  std::string text = "[";
  for (size_t l = 0; l < width.size(); ++l) {
    text += l ? ", " : "";
    text += width[l].mult == 0
                ? std::to_string(width[l].sum)
                : "[" + std::to_string(width[l].sum) + ", " + std::to_string(width[l].mult) + "]";
  }
  return text + "]";
}

bool is_fit_document(const json& document) {
  if (!document.is_object())
    return false;
  const auto command = document.find("command");
  return command != document.end() && *command == "fit";
}

FitSummary fit_summary_from_json(const json& document, const std::string& source) {
  try {
    if (!document.is_object())
      io::fail("", "expected a JSON object at the top level, got " + io::describe(document));
    const auto version = document.find("schema_version");
    if (version == document.end())
      io::fail("schema_version", "missing (a required key; is this a kanbench fit.json?)");
    // 1.x held one refinement as an object; 2.x a list of them.
    const bool version_1 = version->is_string() && version->get<std::string>().rfind("1.", 0) == 0;
    if (!version_1)
      io::check_schema_version(*version, "schema_version", kFitSchemaVersion);

    ObjectReader r(document, "", kOtherKeys);
    FitSummary fit;
    fit.schema_version = r.string("schema_version");
    if (const auto command = r.string("command"); command != "fit")
      io::fail("command", "expected \"fit\", got " + io::quoted(command));
    fit.config = r.required("config");
    ObjectReader config(fit.config, "config", kOtherKeys);
    // A fit on a data file (fit.json 2.x's config.data) is named by its file.
    if (const auto* data = config.optional("data")) {
      ObjectReader d(*data, config.path_of("data"), kOtherKeys);
      fit.data = d.string("path");
    } else {
      fit.function = config.string("function");
    }
    fit.device = config.string("device");
    if (const auto kind = config.optional_string("model_kind"))
      fit.model_kind = *kind;
    if (fit.model_kind != "kan" && fit.model_kind != "mlp")
      io::fail("config.model_kind",
               "expected \"kan\" or \"mlp\", got " + io::quoted(fit.model_kind));
    ObjectReader model(config.required("model"), config.path_of("model"), kOtherKeys);
    fit.width = model_width(model);
    if (fit.model_kind == "mlp") {
      fit.activation = model.string("activation");
    } else {
      fit.grid = model.integer("grid", Bound::kNonNegative);
      fit.k = model.integer("k", Bound::kNonNegative);
    }
    fit.dtype = model.string("dtype");
    ObjectReader environment(r.required("environment"), "environment", kOtherKeys);
    fit.libtorch = environment.string("libtorch");

    fit.stages.push_back(stage_from(r, "trained", "first training"));
    if (r.optional("pruned")) {
      ObjectReader pruned(r.required("pruned"), "pruned", kOtherKeys);
      fit.pruned_width = pykan_width(pruned.required("width_after"), "pruned.width_after");
      fit.stages.push_back(stage_from(pruned, "pruned", "after pruning"));
    }
    // The stage's key names it in chart ids: "refined" (1.x), "refined-0", "refined-1", ...
    const auto refined_stage = [&](const json& value, const std::string& at,
                                   const std::string& key) {
      ObjectReader refined(value, at, kOtherKeys);
      fit.stages.push_back(
          stage_from(refined, key,
                     "after refinement to grid " +
                         std::to_string(refined.integer("grid", Bound::kNonNegative))));
    };
    if (const auto* refined = r.optional("refined")) {
      if (version_1) {
        refined_stage(*refined, "refined", "refined");
      } else {
        const auto& list = io::as_array(*refined, "refined");
        for (size_t i = 0; i < list.size(); ++i)
          refined_stage(list[i], io::index_path("refined", i), "refined-" + std::to_string(i));
      }
    }
    // config.symbolic and symbolic came with 1.6; null (or, in older files, missing) together.
    const bool configured = config.optional("symbolic") != nullptr;
    if (r.optional("symbolic")) {
      if (!configured)
        io::fail("symbolic", "present, but config.symbolic is null or missing");
      ObjectReader symbolic(r.required("symbolic"), "symbolic", kOtherKeys);
      const FitLayerWidth outputs = fit.width.empty() ? FitLayerWidth{} : fit.width.back();
      fit.symbolic = symbolic_from(config, symbolic, outputs.sum + outputs.mult);
      fit.stages.push_back(stage_from(symbolic, "symbolic", "after auto_symbolic"));
    } else if (configured) {
      io::fail("symbolic", "missing, but config.symbolic is set");
    }
    fit.seconds = r.number("seconds", Bound::kNonNegative);
    if (const auto* final = r.optional("final")) {
      ObjectReader size(*final, "final", kOtherKeys);
      fit.parameters = size.optional_integer("parameters", Bound::kNonNegative);
      fit.forward_flops = size.optional_integer("forward_flops", Bound::kNonNegative);
    }
    return fit;
  } catch (const ResultsError& e) {
    throw e.in_file(source);
  }
}

FitSummary read_fit_summary(const std::string& path) {
  return fit_summary_from_json(read_json_file(path, "a fit.json file"), path);
}

} // namespace kan::results
